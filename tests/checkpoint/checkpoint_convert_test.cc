// ConvertTensor: round to nearest even, NaN and infinities kept, float16
// overflow refused, and agreement with the compiler's own _Float16 rounding.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/convert.h"
#include "tiny_checkpoint.h"

namespace baton::checkpoint {
namespace {

float F(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TensorView View(DType dtype, const std::string& bytes, std::vector<std::int64_t> shape) {
  TensorView t;
  t.name = "w";
  t.file = "model.safetensors";
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const unsigned char*>(bytes.data());
  t.bytes = bytes.size();
  return t;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(CheckpointConvert, Float32ToFloat16TiesToEven) {
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFloat16(1.0f + 0x1p-11f), 0x3c00);             // halfway, even below
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * 0x1p-11f), 0x3c02);         // halfway, even above
  EXPECT_EQ(FloatToFloat16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // just past halfway
  EXPECT_EQ(FloatToFloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16(65519.0f), 0x7bff);  // below the halfway point to 65536
  // Subnormals: units of 2^-24, halfway cases to even.
  EXPECT_EQ(FloatToFloat16(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToFloat16(0x1p-25f), 0x0000);
  EXPECT_EQ(FloatToFloat16(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(FloatToFloat16(1.5f * 0x1p-24f), 0x0002);
  EXPECT_EQ(FloatToFloat16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToFloat16(-0x1p-30f), 0x8000);
  EXPECT_EQ(FloatToFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(CheckpointConvert, NaNAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  bool overflow = true;
  EXPECT_EQ(FloatToFloat16(inf, &overflow), 0x7c00);
  EXPECT_FALSE(overflow);  // infinity in, infinity out: not an overflow
  EXPECT_EQ(FloatToFloat16(-inf), 0xfc00);
  const std::uint16_t nan = FloatToFloat16(F(0x7f800001u));  // a signalling NaN, low payload
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(FloatToFloat16(F(0xffc00000u)) & 0x8000, 0x8000);
  EXPECT_EQ(FloatToBFloat16(F(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(FloatToBFloat16(-inf), 0xff80);
  EXPECT_TRUE(std::isnan(Float16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0xffc1)));
  EXPECT_EQ(Float16ToFloat(0xfc00), -inf);
}

TEST(CheckpointConvert, Float32ToBFloat16TiesToEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  bool overflow = false;
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max(), &overflow), 0x7f80);
  EXPECT_TRUE(overflow);
}

TEST(CheckpointConvert, EveryFloat16RoundTripsThroughFloat32) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Float16ToFloat(static_cast<std::uint16_t>(h));
    const std::uint16_t back = FloatToFloat16(f);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
      EXPECT_EQ(back, h | 0x0200) << std::hex << h;  // NaN: payload kept, made quiet
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's float -> _Float16 conversion (libgcc, IEEE round to nearest
// even) is an independent reference.
TEST(CheckpointConvert, AgreesWithTheCompilersFloat16) {
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()));
  for (int i = 0; i < 2'000'000; ++i) {
    // Exponents near float16's range, where rounding is interesting.
    const std::uint32_t bits = (rng() & 0x807fffffu) | ((100u + rng() % 60u) << 23);
    const float f = F(bits);
    const _Float16 h = static_cast<_Float16>(f);
    std::uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(FloatToFloat16(f), want) << std::hexfloat << f;
  }
}
#endif

TEST(CheckpointConvert, TensorConversions) {
  // float32 -> float16 and bfloat16; unaligned source (offset 1).
  const std::vector<float> values = {1.0f, -0.5f, 1.0f + 0x1p-11f, 3.0e-8f, 65504.0f};
  const std::string storage = "x" + Bytes(values);
  TensorView t = View(DType::kFloat32, storage.substr(1), {5});
  const std::string unaligned = storage;
  t.data = reinterpret_cast<const unsigned char*>(unaligned.data()) + 1;
  std::vector<std::uint16_t> out(5);
  ASSERT_TRUE(ConvertTensor(t, DType::kFloat16, out.data()).ok());
  EXPECT_EQ(out, (std::vector<std::uint16_t>{0x3c00, 0xb800, 0x3c00, 0x0001, 0x7bff}));
  ASSERT_TRUE(ConvertTensor(t, DType::kBFloat16, out.data()).ok());
  EXPECT_EQ(out, (std::vector<std::uint16_t>{0x3f80, 0xbf00, 0x3f80, 0x3301, 0x4780}));
  // float16 -> bfloat16 through float: 1 + 2^-10 is below bfloat16's halfway.
  const std::string halves = Bytes(std::vector<std::uint16_t>{0x3c01, 0x7e00, 0xfc00});
  ASSERT_TRUE(ConvertTensor(View(DType::kFloat16, halves, {3}), DType::kBFloat16, out.data()).ok());
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x7fc0);
  EXPECT_EQ(out[2], 0xff80);
  // Same dtype: a bit-exact copy, NaN payloads included.
  const std::string raw = Bytes(std::vector<std::uint16_t>{0x7f81, 0x1234});
  ASSERT_TRUE(ConvertTensor(View(DType::kBFloat16, raw, {2}), DType::kBFloat16, out.data()).ok());
  EXPECT_EQ(out[0], 0x7f81);
  EXPECT_EQ(out[1], 0x1234);
}

TEST(CheckpointConvert, Float16OverflowIsRefusedNamingTheTensorAndTheFix) {
  const std::string bytes = Bytes(std::vector<float>{1.0f, 65520.0f});
  std::vector<std::uint16_t> out(2);
  absl::Status status =
      ConvertTensor(View(DType::kFloat32, bytes, {2}), DType::kFloat16, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()),
            "model.safetensors: tensor 'w' element 1 is 65520, which overflows float16 (largest "
            "finite 65504); convert this float32 tensor to bfloat16 instead, which keeps "
            "float32's range");
  const std::string bf = Bytes(std::vector<std::uint16_t>{0x47c3});  // 99840
  status = ConvertTensor(View(DType::kBFloat16, bf, {1}), DType::kFloat16, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("element 0 is 99840, which overflows float16"), std::string::npos)
      << status;
  status = ConvertTensor(View(DType::kFloat16, bf, {1}), DType::kFloat32, out.data());
  EXPECT_EQ(std::string(status.message()),
            "ConvertTensor(w): target float32 is not supported (supported: float16, bfloat16)");
}

}  // namespace
}  // namespace baton::checkpoint
