// WEFT_API marks the definitions of the C ABI's entry points. libweft is
// built with hidden visibility and a linker version script (weft.map), so
// only what carries this mark and is named weft* is exported.
#ifndef WEFT_CAPI_EXPORT_H_
#define WEFT_CAPI_EXPORT_H_

#define WEFT_API extern "C" __attribute__((visibility("default")))

#endif  // WEFT_CAPI_EXPORT_H_
