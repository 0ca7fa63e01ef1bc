#include "kernels/half_bits.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace baton {

std::uint16_t FloatToHalfBits(float value, DecoderDType dtype) {
  if (dtype == DecoderDType::kBFloat16) {
    const __nv_bfloat16_raw raw = __float2bfloat16_rn(value);
    return raw.x;
  }
  const __half_raw raw = __float2half_rn(value);
  return raw.x;
}

float HalfBitsToFloat(std::uint16_t bits, DecoderDType dtype) {
  if (dtype == DecoderDType::kBFloat16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

}  // namespace baton
