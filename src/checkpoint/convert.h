// Host-side dtype conversion of checkpoint tensors into the 16-bit formats the
// GPU kernels take. Pure bit manipulation: no CUDA headers, identical results
// on every host.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "checkpoint/model_spec.h"
#include "checkpoint/safetensors.h"

namespace baton::checkpoint {

// Writes NumElements(t) values of `target` (kFloat16 or kBFloat16) to `out`.
// Same dtype: a plain copy. From float32: round to nearest, ties to even.
// float16 <-> bfloat16: through float32 (exact), then rounded the same way.
// NaN stays NaN (quiet, sign kept), infinities stay infinite, values below the
// target's smallest subnormal round to a signed zero. A finite value that
// would become infinite (float16 tops out at 65504) is refused naming the
// tensor, the element and the fix; `out` is then partly written.
[[nodiscard]] absl::Status ConvertTensor(const TensorView& t, DType target, std::uint16_t* out);

// The single-value conversions ConvertTensor uses, for tests and reference
// code. `overflow` (optional) is set when a finite input became infinite.
[[nodiscard]] std::uint16_t FloatToFloat16(float value, bool* overflow = nullptr);
[[nodiscard]] std::uint16_t FloatToBFloat16(float value, bool* overflow = nullptr);
[[nodiscard]] float Float16ToFloat(std::uint16_t bits);
[[nodiscard]] float BFloat16ToFloat(std::uint16_t bits);

}  // namespace baton::checkpoint
