// The runtime's own GEMV (ops::Gemv::plain) against the CPU reference, in fp16
// and bf16, over shapes that take its different paths, and its batch
// invariance: every live position, run alone in a bucket of 1, gets the bits
// it got in the full batch. The GEMV's fusions are checked against it in
// decode_fused_kernels_gpu_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

struct GemvShape {
  int out_features, in_features;
  std::uint32_t capacity, active;
  const char* why;
};

constexpr GemvShape kGemvShapes[] = {
    {1001, 520, 9, 7,
     "a partial block of 16 rows, a partial k-block of 32, a partial tile of 8, K unsplit"},
    {777, 2824, 17, 16, "K split across a cluster of 3 blocks, three position tiles"},
    {8, 1032, 1, 1, "fewer rows than a block, K split in 2, a bucket of 1"},
    {2040, 8200, 8, 5,
     "128 row blocks (the last partial), too many for a wider split, paired in clusters of 2 "
     "(Llama-3.2-1B's FFN down GEMV), a partial k-block"},
    // Buckets above 8: a grid row of blocks per tile of 8 positions, each
    // tile's bits those of a bucket of 1.
    {3072, 2048, 32, 29,
     "Llama-3.2-1B's QKV GEMV at a bucket of 32: four position tiles, the last partly live"},
    {777, 2824, 20, 9, "three tiles, the second partly live and the third past the live batch"},
    {264, 1032, 64, 61, "eight tiles, K split in 2"},
};

void PrintTo(const GemvShape& s, std::ostream* os) {
  *os << s.out_features << "x" << s.in_features << ", " << s.active << " of " << s.capacity
      << " positions live (" << s.why << ")";
}

class GemvTest : public DecodeKernelTest,
                 public ::testing::WithParamInterface<std::tuple<GemvShape, DecoderDType>> {};

TEST_P(GemvTest, MatchesReferenceAndIsBatchInvariant) {
  const auto& [shape, dtype] = GetParam();
  SCOPED_TRACE(shape.why);
  const int out_features = shape.out_features, in_features = shape.in_features;
  const std::uint32_t capacity = shape.capacity, active = shape.active;
  const auto w = RandomHalf(static_cast<std::size_t>(out_features) * in_features, dtype,
                            1.0 / std::sqrt(in_features * 1.0));
  const auto x = RandomHalf(std::size_t{capacity} * in_features, dtype, 1.0);
  const auto wf = reference::ToFloat(w, dtype);
  const auto xf = reference::ToFloat(x, dtype);
  TestBatch batch = MakeBatch(capacity, active, 16);
  auto d_w = Upload(w);
  auto d_x = Upload(x);
  auto d_y = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
  ASSERT_EQ(ops::Enqueue(ops::Gemv::plain(dtype, d_w.data(), out_features, in_features, d_x.data(),
                                          batch.view, d_y.data()),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto y_bits = Download(d_y);
  std::vector<double> out, ref;
  for (std::uint32_t p = 0; p < active; ++p) {
    const auto row =
        reference::Gemv(wf.data(), &xf[std::size_t{p} * in_features], out_features, in_features);
    ref.insert(ref.end(), row.begin(), row.end());
    for (int r = 0; r < out_features; ++r) {
      out.push_back(ToDouble(y_bits[std::size_t{p} * out_features + r], dtype));
    }
  }
  ExpectClose("gemv", dtype, out, ref, out_features);
  ExpectUntouched(y_bits, out_features, active, capacity);
  std::vector<std::uint32_t> live(active);
  std::iota(live.begin(), live.end(), 0u);
  ExpectSameBitsAlone(
      y_bits, out_features, live,
      [&](std::uint32_t p) {
        return Upload(std::vector<std::uint16_t>(x.begin() + std::size_t{p} * in_features,
                                                 x.begin() + std::size_t{p + 1} * in_features));
      },
      [&](const std::uint16_t* x1, DecodeBatch one, std::uint16_t* y1) {
        return ops::Enqueue(
            ops::Gemv::plain(dtype, d_w.data(), out_features, in_features, x1, one, y1),
            stream_.get());
      });
}

std::string GemvName(const ::testing::TestParamInfo<GemvTest::ParamType>& info) {
  const auto& [shape, dtype] = info.param;
  return "out" + std::to_string(shape.out_features) + "_in" + std::to_string(shape.in_features) +
         "_b" + std::to_string(shape.active) + "of" + std::to_string(shape.capacity) + "_" +
         Name(dtype);
}

INSTANTIATE_TEST_SUITE_P(, GemvTest,
                         ::testing::Combine(::testing::ValuesIn(kGemvShapes),
                                            ::testing::ValuesIn(kDTypes)),
                         GemvName);

}  // namespace
}  // namespace baton::kernel_test
