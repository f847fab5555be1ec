// From measurements to verdicts: which ranks are bad, slow or hung, and
// the line that says why for each.
#ifndef WEFT_BENCH_CHECK_VERDICT_H_
#define WEFT_BENCH_CHECK_VERDICT_H_

#include <string>
#include <vector>

#include "bench/check/report.h"

namespace weft_check {

// Ranks whose output was wrong where other ranks' outputs of the same check
// were right, or, when in every check with wrong values every rank that got
// an output got a wrong one, the rank whose contribution every wrong element
// shares. (A reduce's or a gather's output is its root's: the roots of a
// check's iterations are the ranks that got one.) Returns whether anything
// was wrong.
bool JudgeCorrectness(Report* r);
// The slow ranks and links the pairs found, with their lines.
void JudgeSpeed(Report* r);
// What bisection adds: the isolated ranks where the direct attribution
// named none, and the links it found.
void JudgeBisection(Report* r);
// After a call failed or timed out: the ranks' heartbeats (`beats`, read
// from `channel`: a directory or rank 0's TCP listener) say which call hung,
// who never joined it and what each completed last.
void JudgeHang(const std::vector<Beat>& beats, const std::string& channel, Report* r);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_VERDICT_H_
