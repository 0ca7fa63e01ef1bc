#include "checkpoint/convert.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "json_util.h"

namespace baton::checkpoint {
namespace {

std::uint32_t Bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Drops the low `shift` bits of `value`, rounding to nearest with ties to
// even. shift is 1..31.
std::uint32_t ShiftRoundEven(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

float ReadElement(const unsigned char* data, std::size_t i, DType dtype) {
  if (dtype == DType::kFloat32) {
    float value;
    std::memcpy(&value, data + 4 * i, 4);  // safetensors offsets carry no alignment
    return value;
  }
  std::uint16_t bits;
  std::memcpy(&bits, data + 2 * i, 2);
  return dtype == DType::kFloat16 ? Float16ToFloat(bits) : BFloat16ToFloat(bits);
}

}  // namespace

std::uint16_t FloatToFloat16(float value, bool* overflow) {
  const std::uint32_t f = Bits(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const int exponent = static_cast<int>((f >> 23) & 0xffu);
  const std::uint32_t mantissa = f & 0x7fffffu;
  if (overflow != nullptr) *overflow = false;
  if (exponent == 0xff) {
    if (mantissa == 0) return sign | 0x7c00u;
    // Keep the top payload bits and force the quiet bit, so a NaN never
    // collapses into an infinity.
    return static_cast<std::uint16_t>(sign | 0x7e00u | (mantissa >> 13));
  }
  const int e = exponent - 127 + 15;  // the float16 biased exponent
  std::uint32_t half;
  if (e >= 1) {
    // Normal: rounding may carry into the exponent, up to infinity (0x7c00).
    half = ShiftRoundEven((static_cast<std::uint32_t>(e) << 23) | mantissa, 13);
  } else {
    // Subnormal in float16 (float32 subnormals are far below its range): the
    // value in units of 2^-24 is (1.mantissa << 23) >> (14 - e).
    const int shift = 14 - e;
    half = shift > 24 || exponent == 0 ? 0u : ShiftRoundEven(mantissa | 0x800000u, shift);
  }
  if (half >= 0x7c00u) {
    if (overflow != nullptr) *overflow = true;
    half = 0x7c00u;
  }
  return static_cast<std::uint16_t>(sign | half);
}

std::uint16_t FloatToBFloat16(float value, bool* overflow) {
  const std::uint32_t f = Bits(value);
  if (overflow != nullptr) *overflow = false;
  if ((f & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((f >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t rounded = f + 0x7fffu + ((f >> 16) & 1u);
  const std::uint16_t bits = static_cast<std::uint16_t>(rounded >> 16);
  if (overflow != nullptr && (bits & 0x7fffu) == 0x7f80u && (f & 0x7fffffffu) != 0x7f800000u) {
    *overflow = true;
  }
  return bits;
}

float Float16ToFloat(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const int exponent = (bits >> 10) & 0x1f;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    return FromBits(sign | (static_cast<std::uint32_t>(exponent - 15 + 127) << 23) |
                    (mantissa << 13));
  }
  if (mantissa == 0) return FromBits(sign);
  // Subnormal: normalise into float32's wider exponent range (exact).
  int e = -14;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return FromBits(sign | (static_cast<std::uint32_t>(e + 127) << 23) | ((mantissa & 0x3ffu) << 13));
}

float BFloat16ToFloat(std::uint16_t bits) {
  return FromBits(static_cast<std::uint32_t>(bits) << 16);
}

absl::Status ConvertTensor(const TensorView& t, DType target, std::uint16_t* out) {
  if (target != DType::kFloat16 && target != DType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat("ConvertTensor(", t.name, "): target ",
                                                   internal::AsAbsl(DTypeName(target)),
                                                   " is not supported (supported: float16, "
                                                   "bfloat16)"));
  }
  const std::size_t size = DTypeSize(t.dtype);
  if (t.bytes % size != 0 || (t.bytes > 0 && (t.data == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvertTensor(", t.name, "): ", t.bytes, " bytes of ",
        internal::AsAbsl(DTypeName(t.dtype)),
        t.bytes % size != 0 ? " is not a whole number of elements" : " with a null pointer"));
  }
  if (t.dtype == target) {
    if (t.bytes > 0) std::memcpy(out, t.data, t.bytes);
    return absl::OkStatus();
  }
  const std::size_t n = t.bytes / size;
  const bool to_half = target == DType::kFloat16;
  for (std::size_t i = 0; i < n; ++i) {
    const float value = ReadElement(t.data, i, t.dtype);
    bool overflow = false;
    out[i] = to_half ? FloatToFloat16(value, &overflow) : FloatToBFloat16(value, &overflow);
    if (overflow) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensor '%s' element %d is %g, which overflows %s (largest finite %s); convert "
          "this %s tensor to %s instead, which keeps float32's range",
          t.file, t.name, i, value, DTypeName(target), to_half ? "65504" : "3.3895e+38",
          DTypeName(t.dtype), to_half ? "bfloat16" : "float32"));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::checkpoint
