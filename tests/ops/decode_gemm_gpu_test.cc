// The runtime's own GEMM (ops::Gemm) against the CPU
// reference in fp16 and bf16, over shapes with partial tiles in rows,
// features and K, stored with and without a bias and added to the residual
// stream; its row invariance (a row run alone in a bucket of 1, and every
// tile, give the bits of the full batch); and the inputs it refuses.
//
// x holds only the live rows (a read past them is out of bounds, which
// compute-sanitizer's memcheck reports), and rows past the live batch of y
// and of the residual must keep their poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/gemv_io.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

using detail::decode::GemvIo;
using detail::decode::GemvOutput;

struct GemmShape {
  int out_features, in_features;
  std::uint32_t capacity, active;
  const char* why;
};

constexpr GemmShape kGemmShapes[] = {
    {264, 520, 9, 7,
     "one partial tile of rows, 8 features past the last whole tile, K = 8 stages of 64 + half "
     "a k step"},
    {1000, 1032, 300, 300, "300 rows (partial row tiles of 32, 64 and 128), K = 16 stages + 8"},
    {136, 2056, 1000, 997, "1000 rows, 3 of them past the live batch, K = 32 stages + 8"},
    {4104, 264, 1, 1, "a bucket of 1, 4104 features (the last tile holds 8)"},
    {257, 64, 130, 129, "odd features (no paired stores), K = one whole stage"},
    {2048, 2048, 256, 256, "whole tiles everywhere (Llama-3.2-1B's attention output)"},
};

void PrintTo(const GemmShape& s, std::ostream* os) {
  *os << s.out_features << "x" << s.in_features << ", " << s.active << " of " << s.capacity
      << " rows live (" << s.why << ")";
}

// The residual stream's poison: all bits set (NaN).
float PoisonFloat() {
  const std::uint32_t bits = 0xFFFFFFFFu;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class GemmTest : public DecodeKernelTest,
                 public ::testing::WithParamInterface<std::tuple<GemmShape, DecoderDType>> {
 protected:
  // Draws W (scaled so outputs have rms ~1), x for the live rows only, a
  // bias and the residual stream's live rows, in that order.
  void SetUp() override {
    DecodeKernelTest::SetUp();
    if (IsSkipped()) return;
    const auto& [shape, dtype] = GetParam();
    shape_ = shape;
    dtype_ = dtype;
    const int n = shape.out_features, k = shape.in_features;
    w_ = RandomHalf(static_cast<std::size_t>(n) * k, dtype, 1.0 / std::sqrt(k * 1.0));
    x_ = RandomHalf(std::size_t{shape.active} * k, dtype, 1.0);
    bias_ = RandomHalf(n, dtype, 0.5);
    residual_ = RandomFloat(std::size_t{shape.capacity} * n, 1.0);
    std::fill(residual_.begin() + std::size_t{shape.active} * n, residual_.end(), PoisonFloat());
    batch_ = MakeBatch(shape.capacity, shape.active, shape.capacity);
    d_w_ = Upload(w_);
    d_x_ = Upload(x_);
    d_bias_ = Upload(bias_);
  }

  int n() const { return shape_.out_features; }
  int k() const { return shape_.in_features; }

  // y = W x (+ bias) for the batch, through `tile` (or ops::Gemm's).
  std::vector<std::uint16_t> Store(bool bias, const GemmTileShape* tile = nullptr) {
    auto d_y = Poisoned<std::uint16_t>(std::size_t{shape_.capacity} * n());
    const GemvIo io = GemvIo::plain(d_x_.data(), d_y.data(), bias ? d_bias_.data() : nullptr);
    const cudaError_t launched =
        tile == nullptr ? ops::Enqueue(ops::Gemm::of(dtype_, GemvOutput::kStore, d_w_.data(), n(),
                                                     k(), io, batch_.view),
                                       stream_.get())
                        : ops::Enqueue(ops::Gemm::tiled(*tile, dtype_, GemvOutput::kStore,
                                                        d_w_.data(), n(), k(), io, batch_.view),
                                       stream_.get());
    EXPECT_EQ(launched, cudaSuccess);
    Sync();
    return Download(d_y);
  }

  // residual += round(W x + bias) for the batch, through `tile` (or ops::Gemm's).
  std::vector<float> Add(const GemmTileShape* tile = nullptr) {
    auto d_residual = Upload(residual_);
    const GemvIo io = GemvIo::residual_add(d_x_.data(), d_residual.data(), d_bias_.data());
    const cudaError_t launched =
        tile == nullptr ? ops::Enqueue(ops::Gemm::of(dtype_, GemvOutput::kResidualAdd, d_w_.data(),
                                                     n(), k(), io, batch_.view),
                                       stream_.get())
                        : ops::Enqueue(ops::Gemm::tiled(*tile, dtype_, GemvOutput::kResidualAdd,
                                                        d_w_.data(), n(), k(), io, batch_.view),
                                       stream_.get());
    EXPECT_EQ(launched, cudaSuccess);
    Sync();
    return Download(d_residual);
  }

  // Live rows whose bits are compared with a run alone: the first and last,
  // rows at the edges of the 16-row mmas and the row tiles, and 4 drawn ones.
  std::vector<std::uint32_t> RowsToRunAlone() {
    std::vector<std::uint32_t> rows = {0, 1, 15, 16, 63, 64, 127, 128, 255, 256, shape_.active - 1};
    for (int i = 0; i < 4; ++i) rows.push_back(Draw() % shape_.active);
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [&](std::uint32_t r) { return r >= shape_.active; }),
               rows.end());
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
  }

  GemmShape shape_{};
  DecoderDType dtype_{};
  std::vector<std::uint16_t> w_, x_, bias_;
  std::vector<float> residual_;
  TestBatch batch_;
  DeviceBuffer<std::uint16_t> d_w_, d_x_, d_bias_;
};

TEST_P(GemmTest, StoresMatchTheReference) {
  SCOPED_TRACE(shape_.why);
  const auto wf = reference::ToFloat(w_, dtype_);
  const auto xf = reference::ToFloat(x_, dtype_);
  const auto bf = reference::ToFloat(bias_, dtype_);
  std::vector<double> ref, ref_bias;
  for (std::uint32_t r = 0; r < shape_.active; ++r) {
    const auto row = reference::Gemv(wf.data(), &xf[std::size_t{r} * k()], n(), k());
    ref.insert(ref.end(), row.begin(), row.end());
    for (int o = 0; o < n(); ++o) ref_bias.push_back(row[o] + bf[o]);
  }
  const auto to_double = [&](const std::vector<std::uint16_t>& bits) {
    std::vector<double> out;
    for (std::size_t i = 0; i < std::size_t{shape_.active} * n(); ++i) {
      out.push_back(ToDouble(bits[i], dtype_));
    }
    return out;
  };
  const auto y = Store(/*bias=*/false);
  ExpectClose("gemm", dtype_, to_double(y), ref, n());
  ExpectUntouched(y, n(), shape_.active, shape_.capacity);
  const auto y_bias = Store(/*bias=*/true);
  ExpectClose("gemm_bias", dtype_, to_double(y_bias), ref_bias, n());
  ExpectUntouched(y_bias, n(), shape_.active, shape_.capacity);
}

// kResidualAdd adds exactly what kStore stores (fp32 += the rounded y), and
// leaves the residual's rows past the live batch alone.
TEST_P(GemmTest, ResidualAddAddsTheStoredProduct) {
  SCOPED_TRACE(shape_.why);
  const auto y = Store(/*bias=*/true);
  const auto added = Add();
  for (std::size_t i = 0; i < added.size(); ++i) {
    const bool live = i < std::size_t{shape_.active} * n();
    const float expected =
        live ? residual_[i] + static_cast<float>(ToDouble(y[i], dtype_)) : PoisonFloat();
    ASSERT_TRUE(SameBits(added[i], expected))
        << "row " << i / n() << ", feature " << i % n() << ": " << added[i] << " instead of "
        << expected << (live ? "" : " (past the live batch: the poison)");
  }
}

// Each checked row, run alone with a capacity of 1 (another tile), gets the
// bits of the full batch, stored and added; so does every tile.
TEST_P(GemmTest, RowsAreInvariant) {
  SCOPED_TRACE(shape_.why);
  const auto y = Store(/*bias=*/true);
  const auto added = Add();
  for (const GemmTileShape& tile : kGemmTileShapes) {
    SCOPED_TRACE("tile " + std::to_string(static_cast<int>(tile)));
    ASSERT_TRUE(Store(/*bias=*/true, &tile) == y) << "a tile changed the stored bits";
    const auto tile_added = Add(&tile);
    ASSERT_EQ(std::memcmp(tile_added.data(), added.data(), added.size() * sizeof(float)), 0)
        << "a tile changed the added bits";
  }
  const auto rows = RowsToRunAlone();
  const auto upload_row = [&](std::uint32_t r) {
    return Upload(std::vector<std::uint16_t>(x_.begin() + std::size_t{r} * k(),
                                             x_.begin() + std::size_t{r + 1} * k()));
  };
  ExpectSameBitsAlone(
      y, n(), rows, upload_row, [&](const std::uint16_t* x1, DecodeBatch one, std::uint16_t* y1) {
        return ops::Enqueue(ops::Gemm::of(dtype_, GemvOutput::kStore, d_w_.data(), n(), k(),
                                          GemvIo::plain(x1, y1, d_bias_.data()), one),
                            stream_.get());
      });
  for (std::uint32_t r : rows) {
    TestBatch one = MakeBatch(1, 1, 16);
    const auto x1 = upload_row(r);
    auto d_residual = Upload(std::vector<float>(residual_.begin() + std::size_t{r} * n(),
                                                residual_.begin() + std::size_t{r + 1} * n()));
    ASSERT_EQ(ops::Enqueue(
                  ops::Gemm::of(dtype_, GemvOutput::kResidualAdd, d_w_.data(), n(), k(),
                                GemvIo::residual_add(x1.data(), d_residual.data(), d_bias_.data()),
                                one.view),
                  stream_.get()),
              cudaSuccess);
    Sync();
    const auto alone = Download(d_residual);
    ASSERT_EQ(std::memcmp(alone.data(), &added[std::size_t{r} * n()], alone.size() * 4), 0)
        << "row " << r << " added other bits alone than in the full batch";
  }
}

std::string GemmName(const ::testing::TestParamInfo<GemmTest::ParamType>& info) {
  const auto& [shape, dtype] = info.param;
  return "out" + std::to_string(shape.out_features) + "_in" + std::to_string(shape.in_features) +
         "_rows" + std::to_string(shape.active) + "of" + std::to_string(shape.capacity) + "_" +
         Name(dtype);
}

INSTANTIATE_TEST_SUITE_P(, GemmTest,
                         ::testing::Combine(::testing::ValuesIn(kGemmShapes),
                                            ::testing::ValuesIn(kDTypes)),
                         GemmName);

using GemmInputTest = DecodeKernelTest;

// Every refusal is cudaErrorInvalidValue before anything launches: the
// runtime's last-error slot stays clean and nothing is written.
TEST_F(GemmInputTest, RefusesShapesAndBuffersItCannotRun) {
  auto w = Poisoned<std::uint16_t>(64 * 64 + 8);
  auto x = Poisoned<std::uint16_t>(4 * 64 + 8);
  auto y = Poisoned<std::uint16_t>(4 * 64 + 8);
  auto residual = Poisoned<float>(4 * 64 + 4);
  TestBatch batch = MakeBatch(4, 4, 4);
  const auto enqueue = [&](GemvOutput output, const void* wp, int n, int k, const GemvIo& io,
                           DecodeBatch b) {
    return ops::Enqueue(ops::Gemm::of(DecoderDType::kBFloat16, output, wp, n, k, io, b),
                        stream_.get());
  };
  const GemvIo plain = GemvIo::plain(x.data(), y.data());
  const DecodeBatch ok = batch.view;
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 60, plain, ok), cudaErrorInvalidValue)
      << "in_features not a multiple of 8";
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 0, plain, ok), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 0, 64, plain, ok), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data() + 1, 64, 64, plain, ok), cudaErrorInvalidValue)
      << "misaligned weights";
  EXPECT_EQ(enqueue(GemvOutput::kStore, nullptr, 64, 64, plain, ok), cudaErrorInvalidValue);
  EXPECT_EQ(
      enqueue(GemvOutput::kStore, w.data(), 64, 64, GemvIo::plain(x.data() + 4, y.data()), ok),
      cudaErrorInvalidValue)
      << "misaligned x";
  EXPECT_EQ(
      enqueue(GemvOutput::kStore, w.data(), 64, 64, GemvIo::plain(x.data(), y.data() + 1), ok),
      cudaErrorInvalidValue)
      << "misaligned y";
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 64, GemvIo::plain(x.data(), nullptr), ok),
            cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(GemvOutput::kResidualAdd, w.data(), 64, 64,
                    GemvIo::residual_add(x.data(), residual.data() + 1), ok),
            cudaErrorInvalidValue)
      << "misaligned residual";
  EXPECT_EQ(enqueue(GemvOutput::kResidualAdd, w.data(), 64, 64, plain, ok), cudaErrorInvalidValue)
      << "no residual to add to";
  const auto* odd_bias = reinterpret_cast<const unsigned char*>(w.data()) + 1;
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 64,
                    GemvIo::plain(x.data(), y.data(), odd_bias), ok),
            cudaErrorInvalidValue)
      << "misaligned bias";
  DecodeBatch no_count = ok;
  no_count.active = nullptr;
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 64, plain, no_count), cudaErrorInvalidValue);
  DecodeBatch empty = ok;
  empty.capacity = 0;
  EXPECT_EQ(enqueue(GemvOutput::kStore, w.data(), 64, 64, plain, empty), cudaErrorInvalidValue);
  EXPECT_EQ(ops::Enqueue(ops::Gemm::of(static_cast<DecoderDType>(7), GemvOutput::kStore, w.data(),
                                       64, 64, plain, ok),
                         stream_.get()),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Sync();
  const auto y_bits = Download(y);
  EXPECT_TRUE(std::all_of(y_bits.begin(), y_bits.end(), AllBitsSet<std::uint16_t>))
      << "a refused launch wrote y";
}

// *active = 0 (an emptied step) writes nothing; *active past the capacity
// is clamped to it.
TEST_F(GemmInputTest, WritesOnlyRowsUpToTheLiveCount) {
  const int n = 40, k = 24;
  const auto w = RandomHalf(n * k, DecoderDType::kFloat16, 0.2);
  const auto x = RandomHalf(3 * k, DecoderDType::kFloat16, 1.0);
  auto d_w = Upload(w);
  auto d_x = Upload(x);
  TestBatch none = MakeBatch(3, 0, 3);
  auto d_y = Poisoned<std::uint16_t>(3 * n);
  ASSERT_EQ(ops::Enqueue(ops::Gemm::of(DecoderDType::kFloat16, GemvOutput::kStore, d_w.data(), n, k,
                                       GemvIo::plain(d_x.data(), d_y.data()), none.view),
                         stream_.get()),
            cudaSuccess);
  Sync();
  ExpectUntouched(Download(d_y), n, 0, 3);
  TestBatch over = MakeBatch(3, 5, 5);
  over.view.capacity = 3;
  ASSERT_EQ(ops::Enqueue(ops::Gemm::of(DecoderDType::kFloat16, GemvOutput::kStore, d_w.data(), n, k,
                                       GemvIo::plain(d_x.data(), d_y.data()), over.view),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto y = Download(d_y);
  EXPECT_TRUE(std::none_of(y.begin(), y.end(), AllBitsSet<std::uint16_t>))
      << "a row up to the capacity was not written";
}

}  // namespace
}  // namespace baton::kernel_test
