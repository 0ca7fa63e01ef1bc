// Host conversions between float and the 16-bit storage types, on raw bits so
// host code (weights, references, tests) needs no CUDA half types. No Abseil.
#pragma once

#include <cstdint>

#include "baton/decoder_config.h"

namespace baton {

// Round to nearest even, as the device's __float2half_rn / __float2bfloat16_rn.
[[nodiscard]] std::uint16_t FloatToHalfBits(float value, DecoderDType dtype);
[[nodiscard]] float HalfBitsToFloat(std::uint16_t bits, DecoderDType dtype);

}  // namespace baton
