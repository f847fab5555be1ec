// The benchmark tensor lists (bench/data) match the totals of the models
// they stand for, so benchmark figures are about the real shapes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "bench/kernels/tensor_list.h"

namespace weft {
namespace bench {
namespace {

std::vector<TensorSpec> Read(const std::string& name) {
  const char* dir = std::getenv("WEFT_BENCH_DATA_DIR");
  EXPECT_NE(dir, nullptr) << "WEFT_BENCH_DATA_DIR is set by meson";
  absl::StatusOr<std::vector<TensorSpec>> list = ReadTensorList(std::string(dir ? dir : ".") + "/" + name + ".tensors");
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : std::vector<TensorSpec>{};
}

TEST(BenchData, ResNet50) {
  std::vector<TensorSpec> l = Read("resnet50");
  EXPECT_EQ(l.size(), 161u);
  EXPECT_EQ(TotalCount(l), 25557032u);
  EXPECT_EQ(l.front().name, "conv1.weight");
  EXPECT_EQ(l.back().name, "fc.bias");
}

TEST(BenchData, Gpt2Small) {
  std::vector<TensorSpec> l = Read("gpt2_small");
  EXPECT_EQ(l.size(), 148u);
  EXPECT_EQ(TotalCount(l), 124439808u);
}

TEST(BenchData, LlamaLayerTinyAndHuge) {
  std::vector<TensorSpec> llama = Read("llama_layer");
  EXPECT_EQ(llama.size(), 9u);
  EXPECT_EQ(TotalCount(llama), 4u * 4096 * 4096 + 3u * 11008 * 4096 + 2u * 4096);
  std::vector<TensorSpec> tiny = Read("tiny_10k");
  EXPECT_EQ(tiny.size(), 10000u);
  for (const TensorSpec& t : tiny) EXPECT_LE(t.count, 512u);
  std::vector<TensorSpec> huge = Read("huge_3");
  EXPECT_EQ(huge.size(), 3u);
  EXPECT_EQ(TotalCount(huge), 3u * 8192 * 4096);
}

TEST(BenchData, RejectsMalformedLines) {
  const std::string path = ::testing::TempDir() + "/bad.tensors";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("ok 3x4\nbad 3xq\n", f);
  std::fclose(f);
  absl::StatusOr<std::vector<TensorSpec>> l = ReadTensorList(path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("bad.tensors:2"), std::string::npos) << l.status();
}

}  // namespace
}  // namespace bench
}  // namespace weft
