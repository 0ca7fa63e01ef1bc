// Baton's wide GEMV (ops::WideGemv) against the CPU reference, in fp16 and
// bf16, for each of its outputs (stored, added to the residual stream,
// SiLU(gate) * up), over shapes that take its different paths (a partial
// block of rows, a partial k-block and chunk, K split across clusters of 2
// to 8, position tiles of 16, 32 and 64, two tiles of 64, one of them
// wholly past the live batch), and its batch
// invariance: the live positions give the same bits when the same inputs
// run in a bucket of another tile size, and a position alone in a bucket
// of 1 gets the bits it got in the full batch. Positions past the live
// batch are neither written nor, for the residual stream, changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

using detail::decode::GemvIo;
using detail::decode::GemvOutput;

struct WideShape {
  GemvOutput output;
  int out_features, in_features;                   // the weight's (a gate | up weight for kSiluMul)
  std::uint32_t capacity, active, other_capacity;  // other_capacity: the invariance rerun's
  bool bias;
  const char* why;
};

constexpr WideShape kWideShapes[] = {
    {GemvOutput::kStore, 3072, 2048, 32, 29, 64, false,
     "Llama-3.2-1B's QKV: 24 row blocks x a split of 8, a tile of 32 (rerun in a tile of 64)"},
    {GemvOutput::kStore, 1001, 520, 16, 11, 40, true,
     "a partial row block, a partial k-block and chunk, a split of 2, a bias"},
    {GemvOutput::kStore, 777, 2824, 64, 61, 20, true,
     "a split of 8 over 89 k-blocks (ranges of 11 and 12: partial chunks), a tile of 64"},
    {GemvOutput::kStore, 264, 520, 100, 70, 16, false,
     "two tiles of 64, the second partly live (the weights read once per tile)"},
    {GemvOutput::kResidualAdd, 264, 1368, 128, 50, 32, false,
     "two tiles of 64, the second wholly past the live batch (its blocks wait for the weights "
     "they requested before the wait, then leave)"},
    {GemvOutput::kResidualAdd, 2048, 8192, 32, 32, 16, false,
     "Llama-3.2-1B's FFN down: 16 row blocks x a split of 8, every position live"},
    {GemvOutput::kResidualAdd, 264, 1368, 20, 17, 64, true,
     "a partial row block, a tile of 32 partly past the live batch, a bias"},
    {GemvOutput::kSiluMul, 2 * 1368, 264, 48, 45, 16, false,
     "gate | up pairs in a partial block of 64, K unsplit (9 k-blocks), a tile of 64"},
    {GemvOutput::kSiluMul, 2 * 2824, 1032, 32, 30, 64, false,
     "45 row blocks of gate | up pairs, a split of 4, a partial k-block"},
};

void PrintTo(const WideShape& s, std::ostream* os) {
  *os << s.out_features << "x" << s.in_features << ", " << s.active << " of " << s.capacity << " ("
      << s.why << ")";
}

const char* OutputName(GemvOutput output) {
  switch (output) {
    case GemvOutput::kStore:
      return "store";
    case GemvOutput::kResidualAdd:
      return "residual_add";
    case GemvOutput::kSiluMul:
      return "silu_mul";
  }
  return "?";
}

class WideGemvTest : public DecodeKernelTest,
                     public ::testing::WithParamInterface<std::tuple<WideShape, DecoderDType>> {
 protected:
  // The outputs' width: out_features, or the gate | up pairs.
  static int Width(const WideShape& s) {
    return s.output == GemvOutput::kSiluMul ? s.out_features / 2 : s.out_features;
  }

  // Runs the kernel over `capacity` positions (the first `active` live) of
  // x and returns the stored output's bits ([capacity, width]) or, for
  // kResidualAdd, residual after the add (fp32 [capacity, width]).
  template <class Out>
  std::vector<Out> Run(const WideShape& s, DecoderDType dtype, const DeviceBuffer<std::uint16_t>& w,
                       const std::vector<std::uint16_t>& x, const DeviceBuffer<std::uint16_t>& bias,
                       const std::vector<float>& residual, std::uint32_t capacity,
                       std::uint32_t active) {
    const int width = Width(s);
    TestBatch batch = MakeBatch(capacity, active, capacity);
    auto d_x = Upload(
        std::vector<std::uint16_t>(x.begin(), x.begin() + std::size_t{capacity} * s.in_features));
    auto d_y = Poisoned<std::uint16_t>(std::size_t{capacity} * width);
    auto d_residual = Upload(
        std::vector<float>(residual.begin(), residual.begin() + std::size_t{capacity} * width));
    GemvIo io = GemvIo::plain(d_x.data(), d_y.data(), s.bias ? bias.data() : nullptr);
    if (s.output == GemvOutput::kResidualAdd)
      io = GemvIo::residual_add(d_x.data(), d_residual.data(), io.bias);
    EXPECT_EQ(ops::Enqueue(ops::WideGemv::of(dtype, s.output, w.data(), s.out_features,
                                             s.in_features, io, batch.view),
                           stream_.get()),
              cudaSuccess);
    Sync();
    if constexpr (std::is_same_v<Out, float>) {
      return Download(d_residual);
    } else {
      return Download(d_y);
    }
  }
};

TEST_P(WideGemvTest, MatchesReferenceAndIsBatchInvariant) {
  const auto& [s, dtype] = GetParam();
  SCOPED_TRACE(s.why);
  const int width = Width(s);
  const std::uint32_t most = std::max(s.capacity, s.other_capacity);
  const auto w = RandomHalf(static_cast<std::size_t>(s.out_features) * s.in_features, dtype,
                            1.0 / std::sqrt(s.in_features * 1.0));
  const auto x = RandomHalf(std::size_t{most} * s.in_features, dtype, 1.0);
  const auto bias = RandomHalf(static_cast<std::size_t>(s.out_features), dtype, 0.5);
  const auto residual = RandomFloat(std::size_t{most} * width, 2.0);
  const auto wf = reference::ToFloat(w, dtype);
  const auto xf = reference::ToFloat(x, dtype);
  const auto bf = reference::ToFloat(bias, dtype);
  auto d_w = Upload(w);
  auto d_bias = Upload(bias);
  const bool add = s.output == GemvOutput::kResidualAdd;

  // The reference of live position p: W x (+ bias); SiLU(gate) * up of the
  // two sums rounded to the dtype (what the stored gate | up row holds).
  std::vector<double> ref;
  for (std::uint32_t p = 0; p < s.active; ++p) {
    auto y = reference::Gemv(wf.data(), &xf[std::size_t{p} * s.in_features], s.out_features,
                             s.in_features);
    if (s.bias) {
      for (int r = 0; r < s.out_features; ++r) y[r] += bf[r];
    }
    for (int r = 0; r < width; ++r) {
      ref.push_back(
          s.output == GemvOutput::kSiluMul
              ? reference::SiluMul(RoundToStorage(y[r], dtype), RoundToStorage(y[width + r], dtype))
              : y[r]);
    }
  }
  // The outputs' live values (for the residual stream: what was added), and
  // every position past the live batch untouched.
  std::vector<double> out;
  std::vector<std::uint16_t> y_bits;
  std::vector<float> added;
  if (add) {
    added = Run<float>(s, dtype, d_w, x, d_bias, residual, s.capacity, s.active);
    for (std::size_t i = 0; i < std::size_t{s.active} * width; ++i) {
      out.push_back(static_cast<double>(added[i]) - residual[i]);
    }
    for (std::size_t i = std::size_t{s.active} * width; i < std::size_t{s.capacity} * width; ++i) {
      ASSERT_EQ(added[i], residual[i]) << "residual element " << i << " past the live batch";
    }
  } else {
    y_bits = Run<std::uint16_t>(s, dtype, d_w, x, d_bias, residual, s.capacity, s.active);
    for (std::size_t i = 0; i < std::size_t{s.active} * width; ++i) {
      out.push_back(ToDouble(y_bits[i], dtype));
    }
    ExpectUntouched(y_bits, width, s.active, s.capacity);
  }
  ExpectClose(std::string("wide_gemv_") + OutputName(s.output), dtype, out, ref, width);

  // The same inputs in a bucket of another tile size, every position live:
  // the first `active` positions keep their bits.
  const std::uint32_t shared = std::min(s.active, s.other_capacity);
  const auto same = [&](std::uint32_t capacity, std::uint32_t active, std::uint32_t first,
                        const char* what) {
    if (add) {
      const auto other = Run<float>(s, dtype, d_w, x, d_bias, residual, capacity, active);
      for (std::size_t i = 0; i < std::size_t{first} * width; ++i) {
        ASSERT_EQ(other[i], added[i]) << what << ": residual element " << i;
      }
    } else {
      const auto other = Run<std::uint16_t>(s, dtype, d_w, x, d_bias, residual, capacity, active);
      for (std::size_t i = 0; i < std::size_t{first} * width; ++i) {
        ASSERT_EQ(other[i], y_bits[i]) << what << ": element " << i;
      }
    }
  };
  same(s.other_capacity, s.other_capacity, shared, "a bucket of another tile size");
  same(1, 1, 1, "position 0 alone in a bucket of 1");
}

std::string WideName(const ::testing::TestParamInfo<WideGemvTest::ParamType>& info) {
  const auto& [s, dtype] = info.param;
  return std::string(OutputName(s.output)) + "_out" + std::to_string(s.out_features) + "_in" +
         std::to_string(s.in_features) + "_b" + std::to_string(s.active) + "of" +
         std::to_string(s.capacity) + "_" + Name(dtype);
}

INSTANTIATE_TEST_SUITE_P(, WideGemvTest,
                         ::testing::Combine(::testing::ValuesIn(kWideShapes),
                                            ::testing::ValuesIn(kDTypes)),
                         WideName);

// The split is the documented function of the shape: Llama-3.2-1B's
// projections take 8, 8, 2, 8 and 1 (kernels/wide_gemv_body.cuh).
TEST(WideGemvSplit, IsTheShapesOwn) {
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kStore, 3072, 2048), 8);
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kResidualAdd, 2048, 2048), 8);
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kSiluMul, 16384, 2048), 2);
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kResidualAdd, 2048, 8192), 8);
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kStore, 128256, 2048), 1);
  EXPECT_EQ(ops::WideGemv::split(GemvOutput::kStore, 1001, 520), 2);
}

class WideGemvRefusalTest : public DTypeKernelTest {};

// Bad arguments are refused before any launch, with nothing written.
TEST_P(WideGemvRefusalTest, RefusesBadArguments) {
  const DecoderDType dtype = this->dtype();
  TestBatch batch = MakeBatch(16, 16, 16);
  auto w = Poisoned<std::uint16_t>(64 * 72);
  auto x = Poisoned<std::uint16_t>(16 * 72 + 8);
  auto y = Poisoned<std::uint16_t>(16 * 64);
  const GemvIo io = GemvIo::plain(x.data(), y.data());
  const auto enqueue = [&](GemvOutput output, const void* weight, int out, int in,
                           const GemvIo& args, DecodeBatch b) {
    return ops::Enqueue(ops::WideGemv::of(dtype, output, weight, out, in, args, b), stream_.get());
  };
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 70, io, batch.view), cudaErrorInvalidValue)
      << "in_features not a multiple of 8";
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 0, 72, io, batch.view), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kStore, nullptr, 64, 72, io, batch.view), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data() + 1, 64, 72, io, batch.view),
            cudaErrorInvalidValue)
      << "W not 16-byte aligned";
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 72, GemvIo::plain(x.data() + 1, y.data()),
                    batch.view),
            cudaErrorInvalidValue)
      << "x not 16-byte aligned";
  EXPECT_EQ(
      enqueue(GemvOutput::kStore, w.data(), 64, 72, GemvIo::plain(x.data(), nullptr), batch.view),
      cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kResidualAdd, w.data(), 64, 72, io, batch.view),
            cudaErrorInvalidValue)
      << "no residual stream";
  EXPECT_EQ(enqueue(GemvOutput::kSiluMul, w.data(), 63, 72, io, batch.view), cudaErrorInvalidValue)
      << "an odd gate | up width";
  EXPECT_EQ(enqueue(GemvOutput::kSiluMul, w.data(), 64, 72,
                    GemvIo::plain(x.data(), y.data(), w.data()), batch.view),
            cudaErrorInvalidValue)
      << "a bias with SiLU(gate) * up";
  DecodeBatch no_active = batch.view;
  no_active.active = nullptr;
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 72, io, no_active), cudaErrorInvalidValue);
  DecodeBatch empty = batch.view;
  empty.capacity = 0;
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 72, io, empty), cudaSuccess);
  Sync();
  ExpectUntouched(Download(y), 64, 0, 16);
}

INSTANTIATE_TEST_SUITE_P(, WideGemvRefusalTest, ::testing::ValuesIn(kDTypes), DTypeParamName);

}  // namespace
}  // namespace baton::kernel_test
