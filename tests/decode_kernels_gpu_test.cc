// Every decode-step kernel against the CPU reference (support/decode_reference.h)
// on fresh random inputs, in fp16 and bf16, with outputs poisoned (all bits
// set: NaN in every float type, -1 for tokens) before each run, so an element
// a kernel failed to write fails the comparison, and positions past the live
// batch must keep their poison.
//
// Tolerances are relative errors ‖out − ref‖₂ / ‖ref‖₂ against a double
// reference computed from the same 16-bit inputs. Rounding the output to the
// storage type alone costs about u/√3 (u = 2^-11 for fp16, 2^-8 for bf16):
// 2.8e-4 and 2.3e-3. The bounds, 2e-3 (fp16) and 1e-2 (bf16), leave room for
// fp32 accumulation order, fast exp and intermediate roundings (attention reads
// keys the kernel itself rounded to the storage type).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "baton/cuda_resources.h"
#include "kernels/decode_kernels.h"
#include "kernels/half_bits.h"
#include "support/decode_reference.h"
#include "support/gpu_test.h"

namespace baton {
namespace {

constexpr DecoderDType kDTypes[] = {DecoderDType::kFloat16, DecoderDType::kBFloat16};

const char* Name(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? "fp16" : "bf16"; }
double Tolerance(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? 2e-3 : 1e-2; }

// Reports a measured error (in the log and the gtest JSON) and checks it.
void ExpectWithin(const std::string& what, DecoderDType dtype, double error) {
  const std::string key = what + "_" + Name(dtype);
  ::testing::Test::RecordProperty(key, std::to_string(error));
  std::printf("  %-28s rel err %.3e (bound %.0e)\n", key.c_str(), error, Tolerance(dtype));
  EXPECT_LE(error, Tolerance(dtype)) << key;  // NaN fails too
}

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng;
}

std::uint64_t Draw() { return Rng()(); }

std::vector<std::uint16_t> RandomHalf(std::size_t n, DecoderDType dtype, double stddev) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<std::uint16_t> out(n);
  for (auto& v : out) v = FloatToHalfBits(static_cast<float>(normal(Rng())), dtype);
  return out;
}

template <class T>
std::vector<T> Download(const DeviceBuffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  EXPECT_TRUE(buffer.CopyTo(absl::MakeSpan(host)).ok());
  return host;
}

template <class T>
DeviceBuffer<T> Upload(const std::vector<T>& host) {
  auto buffer = DeviceBuffer<T>::Create(host.size());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->CopyFrom(absl::MakeConstSpan(host)).ok());
  return std::move(buffer).value();
}

template <class T>
DeviceBuffer<T> Poisoned(std::size_t n) {
  auto buffer = DeviceBuffer<T>::Create(n);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->Fill(0xFF).ok());
  return std::move(buffer).value();
}

// A batch on the device: `capacity` positions, the first `active` live.
struct TestBatch {
  DeviceBuffer<std::uint32_t> active;
  DeviceBuffer<std::uint32_t> slots;
  DeviceBuffer<std::int32_t> positions;
  DecodeBatch view;
  std::vector<std::uint32_t> host_slots;
  std::vector<std::int32_t> host_positions;  // by slot
};

// Slots are a random subset of [0, max_slots) in random order, so position
// and slot never coincide by accident.
TestBatch MakeBatch(std::uint32_t capacity, std::uint32_t active, std::uint32_t max_slots,
                    std::vector<std::int32_t> positions_by_position = {}) {
  TestBatch batch;
  std::vector<std::uint32_t> all(max_slots);
  std::iota(all.begin(), all.end(), 0u);
  std::shuffle(all.begin(), all.end(), Rng());
  batch.host_slots.assign(all.begin(), all.begin() + capacity);
  batch.host_positions.assign(max_slots, 0);
  for (std::uint32_t p = 0; p < positions_by_position.size() && p < capacity; ++p) {
    batch.host_positions[batch.host_slots[p]] = positions_by_position[p];
  }
  batch.active = Upload(std::vector<std::uint32_t>{active});
  batch.slots = Upload(batch.host_slots);
  batch.positions = Upload(batch.host_positions);
  batch.view.active = batch.active.data();
  batch.view.capacity = capacity;
  batch.view.slots = batch.slots.data();
  batch.view.positions = batch.positions.data();
  batch.view.max_slots = max_slots;
  return batch;
}

bool AllBitsSet(std::uint16_t v) { return v == 0xFFFF; }
bool AllBitsSet(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits == 0xFFFFFFFFu;
}

// Positions [active, capacity) of a [capacity, width] output kept their poison.
template <class T>
void ExpectUntouched(const std::vector<T>& out, std::size_t width, std::uint32_t active,
                     std::uint32_t capacity) {
  for (std::size_t i = active * width; i < capacity * width; ++i) {
    ASSERT_TRUE(AllBitsSet(out[i])) << "element " << i << " past the live batch was written";
  }
}

class DecodeKernelsTest : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    auto stream = CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(stream).value();
  }
  void Sync() { ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess); }

  // Batch invariance: each of `positions`, run alone in a bucket of 1, gets
  // the bits it got as row p of the full batch's [capacity, width] output.
  // upload(p) returns position p's input on the device; run(input, batch, y)
  // enqueues the kernel on stream_ and returns its cudaError_t.
  template <class UploadInput, class Run>
  void ExpectSameBitsAlone(const std::vector<std::uint16_t>& batch_out, int width,
                           const std::vector<std::uint32_t>& positions, UploadInput upload,
                           Run run) {
    for (std::uint32_t p : positions) {
      TestBatch one = MakeBatch(1, 1, 16);
      const auto input = upload(p);
      auto d_y1 = Poisoned<std::uint16_t>(width);
      ASSERT_EQ(run(input.data(), one.view, d_y1.data()), cudaSuccess);
      Sync();
      const auto y1 = Download(d_y1);
      ASSERT_TRUE(std::equal(y1.begin(), y1.end(), batch_out.begin() + std::size_t{p} * width))
          << "position " << p << " differs between the full batch and a bucket of 1";
    }
  }

  Stream stream_;
};

TEST_F(DecodeKernelsTest, EmbeddingGathersRowsAndZeroesOutOfRangeTokens) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 1000;
    config.d_model = 264;
    const std::uint32_t capacity = 7, active = 6;
    const auto table = RandomHalf(std::size_t{1000} * 264, dtype, 1.0);
    std::vector<std::int32_t> tokens(capacity);
    for (auto& t : tokens) t = static_cast<std::int32_t>(Draw() % 1000);
    tokens[2] = -3;    // out of range below
    tokens[4] = 1000;  // out of range above
    tokens[5] = 999;   // the last row
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_table = Upload(table);
    auto d_tokens = Upload(tokens);
    auto hidden = Poisoned<float>(capacity * 264);
    ASSERT_EQ(EnqueueEmbedding(config, d_table.data(), d_tokens.data(), batch.view, hidden.data(),
                               stream_.get()),
              cudaSuccess);
    Sync();
    const auto out = Download(hidden);
    for (std::uint32_t p = 0; p < active; ++p) {
      const bool valid = tokens[p] >= 0 && tokens[p] < 1000;
      for (int i = 0; i < 264; ++i) {
        const float expected =
            valid ? HalfBitsToFloat(table[static_cast<std::size_t>(tokens[p]) * 264 + i], dtype)
                  : 0.0f;
        ASSERT_EQ(out[p * 264 + i], expected) << "position " << p << " element " << i;
      }
    }
    ExpectUntouched(out, 264, active, capacity);
  }
}

TEST_F(DecodeKernelsTest, RmsNormMatchesReference) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.d_model = 1000;  // not a multiple of the block size
    config.rms_epsilon = 1e-5f;
    const std::uint32_t capacity = 9, active = 7;
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> hidden(capacity * 1000);
    for (auto& v : hidden) v = normal(Rng());
    const auto weight = RandomHalf(1000, dtype, 1.0);
    const auto weight_f = reference::ToFloat(weight, dtype);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_hidden = Upload(hidden);
    auto d_weight = Upload(weight);
    auto d_out = Poisoned<std::uint16_t>(capacity * 1000);
    ASSERT_EQ(EnqueueRmsNorm(config, d_hidden.data(), d_weight.data(), batch.view, d_out.data(),
                             stream_.get()),
              cudaSuccess);
    Sync();
    const auto out_bits = Download(d_out);
    std::vector<double> out, ref;
    for (std::uint32_t p = 0; p < active; ++p) {
      const auto row = reference::RmsNorm(&hidden[p * 1000], weight_f.data(), 1000, 1e-5);
      ref.insert(ref.end(), row.begin(), row.end());
      for (int i = 0; i < 1000; ++i) out.push_back(HalfBitsToFloat(out_bits[p * 1000 + i], dtype));
    }
    ExpectWithin("rms_norm", dtype, reference::RelativeError(out, ref));
    ExpectUntouched(out_bits, 1000, active, capacity);
  }
}

// fp32 += storage-type delta is one exact float addition: bit-exact.
TEST_F(DecodeKernelsTest, ResidualAddIsExactFloatAddition) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.d_model = 520;
    const std::uint32_t capacity = 5, active = 4;
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> hidden(capacity * 520);
    for (auto& v : hidden) v = normal(Rng());
    const auto delta = RandomHalf(capacity * 520, dtype, 1.0);
    TestBatch batch = MakeBatch(capacity, active, 8);
    auto d_hidden = Upload(hidden);
    auto d_delta = Upload(delta);
    ASSERT_EQ(
        EnqueueResidualAdd(config, d_hidden.data(), d_delta.data(), batch.view, stream_.get()),
        cudaSuccess);
    Sync();
    const auto out = Download(d_hidden);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const float expected =
          i < active * 520u ? hidden[i] + HalfBitsToFloat(delta[i], dtype) : hidden[i];
      ASSERT_EQ(out[i], expected) << "element " << i;
    }
  }
}

// The fused embedding + norm equals the two kernels it replaces, bit for bit.
TEST_F(DecodeKernelsTest, EmbeddingRmsNormEqualsEmbeddingThenRmsNorm) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 1000;
    config.d_model = 264;
    const std::uint32_t capacity = 7, active = 6;
    const auto table = RandomHalf(std::size_t{1000} * 264, dtype, 1.0);
    const auto weight = RandomHalf(264, dtype, 1.0);
    const auto weight_f = reference::ToFloat(weight, dtype);
    std::vector<std::int32_t> tokens(capacity);
    for (auto& t : tokens) t = static_cast<std::int32_t>(Draw() % 1000);
    tokens[1] = -1;    // a zero row: the norm must stay finite (eps)
    tokens[3] = 1000;  // out of range above
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_table = Upload(table);
    auto d_tokens = Upload(tokens);
    auto d_weight = Upload(weight);
    auto fused_hidden = Poisoned<float>(capacity * 264);
    auto fused_out = Poisoned<std::uint16_t>(capacity * 264);
    ASSERT_EQ(
        EnqueueEmbeddingRmsNorm(config, d_table.data(), d_tokens.data(), d_weight.data(),
                                batch.view, fused_hidden.data(), fused_out.data(), stream_.get()),
        cudaSuccess);
    auto hidden = Poisoned<float>(capacity * 264);
    auto out = Poisoned<std::uint16_t>(capacity * 264);
    ASSERT_EQ(EnqueueEmbedding(config, d_table.data(), d_tokens.data(), batch.view, hidden.data(),
                               stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueRmsNorm(config, hidden.data(), d_weight.data(), batch.view, out.data(),
                             stream_.get()),
              cudaSuccess);
    Sync();
    const auto fused_h = Download(fused_hidden);
    const auto fused_o = Download(fused_out);
    const auto h = Download(hidden);
    const auto o = Download(out);
    std::vector<double> got, ref;
    for (std::uint32_t p = 0; p < active; ++p) {
      const bool valid = tokens[p] >= 0 && tokens[p] < 1000;
      for (int i = 0; i < 264; ++i) {
        const float expected =
            valid ? HalfBitsToFloat(table[static_cast<std::size_t>(tokens[p]) * 264 + i], dtype)
                  : 0.0f;
        ASSERT_EQ(fused_h[p * 264 + i], expected) << "position " << p << " element " << i;
      }
      const auto row = reference::RmsNorm(&fused_h[p * 264], weight_f.data(), 264, 1e-5);
      ref.insert(ref.end(), row.begin(), row.end());
      for (int i = 0; i < 264; ++i) got.push_back(HalfBitsToFloat(fused_o[p * 264 + i], dtype));
    }
    ExpectWithin("embedding_rms_norm", dtype, reference::RelativeError(got, ref));
    for (std::size_t i = 0; i < active * 264u; ++i) {
      ASSERT_EQ(fused_o[i], o[i]) << "fused and separate norms differ at element " << i;
    }
    ExpectUntouched(fused_h, 264, active, capacity);
    ExpectUntouched(fused_o, 264, active, capacity);
  }
}

// hidden += delta exactly, then the norm of the new hidden; 5000 elements
// cover rows longer than a thread keeps in registers.
TEST_F(DecodeKernelsTest, ResidualAddRmsNormMatchesReferenceAndTheSeparateKernels) {
  for (DecoderDType dtype : kDTypes) {
    for (int d_model : {520, 5000}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " d_model " + std::to_string(d_model));
      DecoderConfig config;
      config.dtype = dtype;
      config.d_model = d_model;
      const std::uint32_t capacity = 5, active = 4;
      const std::size_t n = std::size_t{capacity} * d_model;
      std::normal_distribution<float> normal(0.0f, 2.0f);
      std::vector<float> hidden(n);
      for (auto& v : hidden) v = normal(Rng());
      const auto delta = RandomHalf(n, dtype, 1.0);
      const auto weight = RandomHalf(d_model, dtype, 1.0);
      const auto weight_f = reference::ToFloat(weight, dtype);
      TestBatch batch = MakeBatch(capacity, active, 8);
      auto d_delta = Upload(delta);
      auto d_weight = Upload(weight);
      auto fused_hidden = Upload(hidden);
      auto fused_out = Poisoned<std::uint16_t>(n);
      ASSERT_EQ(
          EnqueueResidualAddRmsNorm(config, fused_hidden.data(), d_delta.data(), d_weight.data(),
                                    batch.view, fused_out.data(), stream_.get()),
          cudaSuccess);
      auto sep_hidden = Upload(hidden);
      auto sep_out = Poisoned<std::uint16_t>(n);
      ASSERT_EQ(
          EnqueueResidualAdd(config, sep_hidden.data(), d_delta.data(), batch.view, stream_.get()),
          cudaSuccess);
      ASSERT_EQ(EnqueueRmsNorm(config, sep_hidden.data(), d_weight.data(), batch.view,
                               sep_out.data(), stream_.get()),
                cudaSuccess);
      Sync();
      const auto h = Download(fused_hidden);
      const auto o = Download(fused_out);
      const auto sep_o = Download(sep_out);
      for (std::size_t i = 0; i < n; ++i) {
        const float expected = i < active * static_cast<std::size_t>(d_model)
                                   ? hidden[i] + HalfBitsToFloat(delta[i], dtype)
                                   : hidden[i];
        ASSERT_EQ(h[i], expected) << "element " << i;
      }
      std::vector<double> got, ref;
      for (std::uint32_t p = 0; p < active; ++p) {
        const auto row = reference::RmsNorm(&h[p * static_cast<std::size_t>(d_model)],
                                            weight_f.data(), d_model, 1e-5);
        ref.insert(ref.end(), row.begin(), row.end());
        for (int i = 0; i < d_model; ++i) {
          got.push_back(HalfBitsToFloat(o[p * static_cast<std::size_t>(d_model) + i], dtype));
        }
      }
      ExpectWithin("residual_rms_norm_" + std::to_string(d_model), dtype,
                   reference::RelativeError(got, ref));
      for (std::size_t i = 0; i < active * static_cast<std::size_t>(d_model); ++i) {
        ASSERT_EQ(o[i], sep_o[i]) << "fused and separate norms differ at element " << i;
      }
      ExpectUntouched(o, d_model, active, capacity);
    }
  }
}

TEST_F(DecodeKernelsTest, SiluMulMatchesReference) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.ffn = 1368;
    const std::uint32_t capacity = 6, active = 5;
    const auto gate_up = RandomHalf(capacity * 2 * 1368, dtype, 2.0);
    const auto f = reference::ToFloat(gate_up, dtype);
    TestBatch batch = MakeBatch(capacity, active, 8);
    auto d_in = Upload(gate_up);
    auto d_out = Poisoned<std::uint16_t>(capacity * 1368);
    ASSERT_EQ(EnqueueSiluMul(config, d_in.data(), batch.view, d_out.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto out_bits = Download(d_out);
    std::vector<double> out, ref;
    for (std::uint32_t p = 0; p < active; ++p) {
      for (int i = 0; i < 1368; ++i) {
        ref.push_back(reference::SiluMul(f[p * 2736 + i], f[p * 2736 + 1368 + i]));
        out.push_back(HalfBitsToFloat(out_bits[p * 1368 + i], dtype));
      }
    }
    ExpectWithin("silu_mul", dtype, reference::RelativeError(out, ref));
    ExpectUntouched(out_bits, 1368, active, capacity);
  }
}

TEST_F(DecodeKernelsTest, GemvMatchesReference) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    // 1001 rows (a partial block of 16), 520 inputs (a partial k-block of
    // 32), 7 live positions (a partial tile of 8) in a capacity of 9.
    const int out_features = 1001, in_features = 520;
    const std::uint32_t capacity = 9, active = 7;
    const auto w = RandomHalf(std::size_t{1001} * 520, dtype, 1.0 / std::sqrt(520.0));
    const auto x = RandomHalf(capacity * 520, dtype, 1.0);
    const auto wf = reference::ToFloat(w, dtype);
    const auto xf = reference::ToFloat(x, dtype);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_w = Upload(w);
    auto d_x = Upload(x);
    auto d_y = Poisoned<std::uint16_t>(capacity * out_features);
    ASSERT_EQ(EnqueueGemv(dtype, d_w.data(), out_features, in_features, d_x.data(), batch.view,
                          d_y.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto y_bits = Download(d_y);
    std::vector<double> out, ref;
    for (std::uint32_t p = 0; p < active; ++p) {
      const auto row = reference::Gemv(wf.data(), &xf[p * in_features], out_features, in_features);
      ref.insert(ref.end(), row.begin(), row.end());
      for (int r = 0; r < out_features; ++r) {
        out.push_back(HalfBitsToFloat(y_bits[p * out_features + r], dtype));
      }
    }
    ExpectWithin("gemv", dtype, reference::RelativeError(out, ref));
    ExpectUntouched(y_bits, out_features, active, capacity);
    std::vector<std::uint32_t> live(active);
    std::iota(live.begin(), live.end(), 0u);
    ExpectSameBitsAlone(
        y_bits, out_features, live,
        [&](std::uint32_t p) {
          return Upload(std::vector<std::uint16_t>(x.begin() + p * in_features,
                                                   x.begin() + (p + 1) * in_features));
        },
        [&](const std::uint16_t* x1, DecodeBatch one, std::uint16_t* y1) {
          return EnqueueGemv(dtype, d_w.data(), out_features, in_features, x1, one, y1,
                             stream_.get());
        });
  }
}

// SiLU·mul fused into the GEMV's input equals EnqueueSiluMul then
// EnqueueGemv bit for bit.
TEST_F(DecodeKernelsTest, GatedGemvEqualsSiluMulThenGemv) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    const int out_features = 777, ffn = 2824;  // more than one chunk of a row per lane
    DecoderConfig config;
    config.dtype = dtype;
    config.ffn = ffn;
    const std::uint32_t capacity = 11, active = 10;
    const auto w = RandomHalf(std::size_t{777} * ffn, dtype, 1.0 / std::sqrt(ffn * 1.0));
    const auto gate_up = RandomHalf(std::size_t{capacity} * 2 * ffn, dtype, 2.0);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_w = Upload(w);
    auto d_gate_up = Upload(gate_up);
    auto d_act = Poisoned<std::uint16_t>(std::size_t{capacity} * ffn);
    auto d_y = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    auto d_fused = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    ASSERT_EQ(EnqueueSiluMul(config, d_gate_up.data(), batch.view, d_act.data(), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueGemv(dtype, d_w.data(), out_features, ffn, d_act.data(), batch.view,
                          d_y.data(), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueGatedGemv(dtype, d_w.data(), out_features, ffn, d_gate_up.data(), batch.view,
                               d_fused.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto y = Download(d_y);
    const auto fused = Download(d_fused);
    for (std::size_t i = 0; i < active * static_cast<std::size_t>(out_features); ++i) {
      ASSERT_EQ(fused[i], y[i]) << "element " << i;
    }
    ExpectUntouched(fused, out_features, active, capacity);
  }
}

// RMSNorm fused into the GEMV's input: against the reference (norm rounded
// to the dtype, then the GEMV) and the two separate kernels, batch
// invariant, positions past the live batch untouched.
TEST_F(DecodeKernelsTest, RmsNormGemvMatchesReferenceAndTheSeparateKernels) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.d_model = 1032;  // a partial k-block, float4 rows, more than a warp's 8 loads
    config.rms_epsilon = 1e-5f;
    const int d = config.d_model, out_features = 777;
    const std::uint32_t capacity = 11, active = 9;  // two position tiles, the second partial
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> hidden(std::size_t{capacity} * d);
    for (auto& v : hidden) v = normal(Rng());
    const auto norm = RandomHalf(d, dtype, 1.0);
    const auto w = RandomHalf(std::size_t{777} * d, dtype, 1.0 / std::sqrt(d * 1.0));
    const auto norm_f = reference::ToFloat(norm, dtype);
    const auto wf = reference::ToFloat(w, dtype);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_hidden = Upload(hidden);
    auto d_norm = Upload(norm);
    auto d_w = Upload(w);
    auto d_fused = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    auto d_normed = Poisoned<std::uint16_t>(std::size_t{capacity} * d);
    auto d_separate = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    ASSERT_EQ(EnqueueRmsNormGemv(config, d_w.data(), out_features, d_hidden.data(), d_norm.data(),
                                 batch.view, d_fused.data(), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueRmsNorm(config, d_hidden.data(), d_norm.data(), batch.view, d_normed.data(),
                             stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueGemv(dtype, d_w.data(), out_features, d, d_normed.data(), batch.view,
                          d_separate.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto fused = Download(d_fused);
    const auto separate = Download(d_separate);
    std::vector<double> out, ref, two_kernels;
    for (std::uint32_t p = 0; p < active; ++p) {
      const auto normed = reference::RmsNorm(&hidden[p * d], norm_f.data(), d, 1e-5);
      std::vector<float> rounded(d);
      for (int i = 0; i < d; ++i) {
        rounded[i] = HalfBitsToFloat(FloatToHalfBits(static_cast<float>(normed[i]), dtype), dtype);
      }
      const auto row = reference::Gemv(wf.data(), rounded.data(), out_features, d);
      ref.insert(ref.end(), row.begin(), row.end());
      for (int r = 0; r < out_features; ++r) {
        out.push_back(HalfBitsToFloat(fused[p * out_features + r], dtype));
        two_kernels.push_back(HalfBitsToFloat(separate[p * out_features + r], dtype));
      }
    }
    ExpectWithin("rms_norm_gemv", dtype, reference::RelativeError(out, ref));
    ExpectWithin("rms_norm_gemv_vs_separate", dtype, reference::RelativeError(out, two_kernels));
    ExpectUntouched(fused, out_features, active, capacity);
    ExpectSameBitsAlone(
        fused, out_features, {0u, active - 1},
        [&](std::uint32_t p) {
          return Upload(std::vector<float>(hidden.begin() + p * d, hidden.begin() + (p + 1) * d));
        },
        [&](const float* row, DecodeBatch one, std::uint16_t* y1) {
          return EnqueueRmsNormGemv(config, d_w.data(), out_features, row, d_norm.data(), one, y1,
                                    stream_.get());
        });
  }
}

// The embedding fused into the normed GEMV (the step's first projection)
// equals EnqueueEmbedding then EnqueueRmsNormGemv bit for bit, hidden and y,
// including zero rows for tokens outside the table; a 12-position batch
// spans two position tiles, so two blocks of the first row block store hidden.
TEST_F(DecodeKernelsTest, EmbeddingRmsNormGemvEqualsEmbeddingThenRmsNormGemv) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 1000;
    config.d_model = 264;
    const int out_features = 520;
    const std::uint32_t capacity = 13, active = 12;
    const auto table = RandomHalf(std::size_t{1000} * 264, dtype, 1.0);
    const auto norm = RandomHalf(264, dtype, 1.0);
    const auto w = RandomHalf(std::size_t{520} * 264, dtype, 1.0 / std::sqrt(264.0));
    std::vector<std::int32_t> tokens(capacity);
    for (auto& t : tokens) t = static_cast<std::int32_t>(Draw() % 1000);
    tokens[1] = -1;     // a zero row: the norm must stay finite (eps)
    tokens[10] = 1000;  // out of range above, in the second tile
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_table = Upload(table);
    auto d_tokens = Upload(tokens);
    auto d_norm = Upload(norm);
    auto d_w = Upload(w);
    auto fused_hidden = Poisoned<float>(capacity * 264);
    auto fused_y = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    ASSERT_EQ(EnqueueEmbeddingRmsNormGemv(config, d_table.data(), d_tokens.data(), d_w.data(),
                                          out_features, d_norm.data(), batch.view,
                                          fused_hidden.data(), fused_y.data(), stream_.get()),
              cudaSuccess);
    auto hidden = Poisoned<float>(capacity * 264);
    auto y = Poisoned<std::uint16_t>(std::size_t{capacity} * out_features);
    ASSERT_EQ(EnqueueEmbedding(config, d_table.data(), d_tokens.data(), batch.view, hidden.data(),
                               stream_.get()),
              cudaSuccess);
    ASSERT_EQ(EnqueueRmsNormGemv(config, d_w.data(), out_features, hidden.data(), d_norm.data(),
                                 batch.view, y.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto fh = Download(fused_hidden);
    const auto h = Download(hidden);
    const auto fy = Download(fused_y);
    const auto sy = Download(y);
    for (std::size_t i = 0; i < active * 264u; ++i) {
      ASSERT_EQ(std::memcmp(&fh[i], &h[i], 4), 0) << "hidden differs at element " << i;
    }
    for (std::size_t i = 0; i < active * static_cast<std::size_t>(out_features); ++i) {
      ASSERT_EQ(fy[i], sy[i]) << "y differs at element " << i;
    }
    ExpectUntouched(fh, 264, active, capacity);
    ExpectUntouched(fy, out_features, active, capacity);
  }
}

// The residual add fused into the GEMV's output (plain and gated input)
// equals the GEMV followed by EnqueueResidualAdd, bit for bit; the residual
// stream past the live batch is left alone.
TEST_F(DecodeKernelsTest, GemvResidualAddEqualsGemvThenResidualAdd) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.d_model = 264;
    config.ffn = 2824;
    const int d = config.d_model, ffn = config.ffn;
    const std::uint32_t capacity = 10, active = 9;
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> hidden(std::size_t{capacity} * d);
    for (auto& v : hidden) v = normal(Rng());
    const auto w = RandomHalf(static_cast<std::size_t>(d) * ffn, dtype, 1.0 / std::sqrt(ffn * 1.0));
    const auto x = RandomHalf(std::size_t{capacity} * ffn, dtype, 1.0);
    const auto gate_up = RandomHalf(std::size_t{capacity} * 2 * ffn, dtype, 2.0);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_w = Upload(w);
    auto d_x = Upload(x);
    auto d_gate_up = Upload(gate_up);
    for (bool gated : {false, true}) {
      SCOPED_TRACE(gated ? "gated" : "plain");
      auto fused = Upload(hidden);
      auto separate = Upload(hidden);
      auto d_delta = Poisoned<std::uint16_t>(std::size_t{capacity} * d);
      if (gated) {
        ASSERT_EQ(EnqueueGatedGemvResidualAdd(config, d_w.data(), ffn, d_gate_up.data(), batch.view,
                                              fused.data(), stream_.get()),
                  cudaSuccess);
        ASSERT_EQ(EnqueueGatedGemv(dtype, d_w.data(), d, ffn, d_gate_up.data(), batch.view,
                                   d_delta.data(), stream_.get()),
                  cudaSuccess);
      } else {
        ASSERT_EQ(EnqueueGemvResidualAdd(config, d_w.data(), ffn, d_x.data(), batch.view,
                                         fused.data(), stream_.get()),
                  cudaSuccess);
        ASSERT_EQ(EnqueueGemv(dtype, d_w.data(), d, ffn, d_x.data(), batch.view, d_delta.data(),
                              stream_.get()),
                  cudaSuccess);
      }
      ASSERT_EQ(
          EnqueueResidualAdd(config, separate.data(), d_delta.data(), batch.view, stream_.get()),
          cudaSuccess);
      Sync();
      const auto f = Download(fused);
      const auto s = Download(separate);
      std::size_t changed = 0;
      for (std::size_t i = 0; i < f.size(); ++i) {
        ASSERT_EQ(f[i], s[i]) << "element " << i;
        if (i >= active * static_cast<std::size_t>(d)) {
          ASSERT_EQ(f[i], hidden[i]) << "element " << i << " past the live batch was written";
        }
        changed += f[i] != hidden[i];
      }
      EXPECT_GT(changed, active * static_cast<std::size_t>(d) / 2) << "the delta was not added";
    }
  }
}

// DecodeBatch::launch_next_early lets the next kernel launch before the
// current one's wait; it must not let any kernel read its predecessor's
// output early. A chain where each kernel reads the one before (normed GEMV
// -> residual-add GEMV of it -> normed GEMV of the new residual stream,
// six times over, every kernel launching its successor early) gives the
// same bits as the chain without the flag.
TEST_F(DecodeKernelsTest, LaunchNextEarlyKeepsEveryKernelAfterItsPredecessor) {
  DecoderConfig config;
  config.d_model = 256;
  const int d = config.d_model, ffn = 768;
  const std::uint32_t capacity = 3, active = 3;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> hidden(std::size_t{capacity} * d);
  for (auto& v : hidden) v = normal(Rng());
  const auto norm = RandomHalf(d, config.dtype, 1.0);
  const auto w_up = RandomHalf(static_cast<std::size_t>(ffn) * d, config.dtype, 0.1);
  const auto w_down = RandomHalf(static_cast<std::size_t>(d) * ffn, config.dtype, 0.05);
  auto d_norm = Upload(norm);
  auto d_up = Upload(w_up);
  auto d_down = Upload(w_down);
  TestBatch batch = MakeBatch(capacity, active, 4);
  std::vector<std::vector<float>> results;
  for (bool early : {false, true}) {
    DecodeBatch view = batch.view;
    view.launch_next_early = early;
    auto d_hidden = Upload(hidden);
    auto d_y = Poisoned<std::uint16_t>(std::size_t{capacity} * ffn);
    for (int round = 0; round < 6; ++round) {
      ASSERT_EQ(EnqueueRmsNormGemv(config, d_up.data(), ffn, d_hidden.data(), d_norm.data(), view,
                                   d_y.data(), stream_.get()),
                cudaSuccess);
      ASSERT_EQ(EnqueueGemvResidualAdd(config, d_down.data(), ffn, d_y.data(), view,
                                       d_hidden.data(), stream_.get()),
                cudaSuccess);
    }
    Sync();
    results.push_back(Download(d_hidden));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_EQ(results[0][i], results[1][i]) << "element " << i;
  }
  EXPECT_NE(results[0], hidden) << "the chain changed nothing";
}

// RoPE + KV append, then attention, for sequences whose contexts differ
// (1 token, 2, a length not a multiple of 128 or 32, the full max_context),
// each at its own slot; checks q rotated in place, the appended cache rows,
// every other cache row unchanged bit for bit, and the attention output.
void RunAttentionCase(DecodeKernelsTest* test, cudaStream_t stream, DecoderDType dtype, int heads,
                      int head_dim, int max_context, std::vector<std::int32_t> positions,
                      bool fused = false) {
  DecoderConfig config;
  config.dtype = dtype;
  config.heads = heads;
  config.head_dim = head_dim;
  config.max_context = max_context;
  config.rope_theta = 10000.0f;
  const int width = config.attention_width();
  const int qkv_width = config.qkv_width();
  const std::uint32_t capacity = static_cast<std::uint32_t>(positions.size()) + 1;
  const std::uint32_t active = capacity - 1;  // the last position is not live
  positions.push_back(0);
  const std::uint32_t max_slots = capacity + 3;
  TestBatch batch = MakeBatch(capacity, active, max_slots, positions);
  const std::size_t cache_elements =
      static_cast<std::size_t>(max_slots) * heads * max_context * head_dim;
  const auto keys0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto values0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto qkv0 = RandomHalf(static_cast<std::size_t>(capacity) * qkv_width, dtype, 1.0);
  auto d_keys = Upload(keys0);
  auto d_values = Upload(values0);
  auto d_qkv = Upload(qkv0);
  auto d_out = Poisoned<std::uint16_t>(static_cast<std::size_t>(capacity) * width);
  const KvCacheLayer cache{d_keys.data(), d_values.data()};
  if (fused) {
    ASSERT_EQ(EnqueueRopeAttention(config, d_qkv.data(), cache, batch.view, d_out.data(), stream),
              cudaSuccess);
  } else {
    ASSERT_EQ(EnqueueRopeAppendKv(config, d_qkv.data(), cache, batch.view, stream), cudaSuccess);
    ASSERT_EQ(EnqueueDecodeAttention(config, d_qkv.data(), cache, batch.view, d_out.data(), stream),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto keys = Download(d_keys);
  const auto values = Download(d_values);
  const auto qkv = Download(d_qkv);
  const auto out_bits = Download(d_out);

  auto expected_keys = keys0;
  auto expected_values = values0;
  std::vector<double> q_out, q_ref, k_out, k_ref, att_out, att_ref;
  const auto at = [&](const std::vector<std::uint16_t>& v, std::size_t i) {
    return static_cast<double>(HalfBitsToFloat(v[i], dtype));
  };
  for (std::uint32_t p = 0; p < active; ++p) {
    const std::uint32_t slot = batch.host_slots[p];
    const int pos = positions[p];
    for (int h = 0; h < heads; ++h) {
      const std::size_t q_base = static_cast<std::size_t>(p) * qkv_width + h * head_dim;
      std::vector<double> q(head_dim), k(head_dim);
      for (int d = 0; d < head_dim; ++d) {
        q[d] = at(qkv0, q_base + d);
        k[d] = at(qkv0, q_base + width + d);
      }
      reference::Rope(q.data(), head_dim, pos, config.rope_theta);
      reference::Rope(k.data(), head_dim, pos, config.rope_theta);
      const std::size_t row =
          ((static_cast<std::size_t>(slot) * heads + h) * max_context + pos) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        q_ref.push_back(q[d]);
        q_out.push_back(at(qkv, q_base + d));
        k_ref.push_back(k[d]);
        k_out.push_back(at(keys, row + d));
        expected_keys[row + d] = keys[row + d];                   // compared by value above
        expected_values[row + d] = qkv0[q_base + 2 * width + d];  // v is copied exactly
      }
      // The sequence's context: cached rows before pos, then this token.
      const std::size_t first = row - static_cast<std::size_t>(pos) * head_dim;
      std::vector<double> ctx_keys, ctx_values;
      for (int t = 0; t < pos; ++t) {
        for (int d = 0; d < head_dim; ++d) {
          ctx_keys.push_back(at(keys0, first + static_cast<std::size_t>(t) * head_dim + d));
          ctx_values.push_back(at(values0, first + static_cast<std::size_t>(t) * head_dim + d));
        }
      }
      for (int d = 0; d < head_dim; ++d) {
        ctx_keys.push_back(k[d]);
        ctx_values.push_back(at(qkv0, q_base + 2 * width + d));
      }
      const auto att = reference::Attention(q, ctx_keys, ctx_values, head_dim);
      for (int d = 0; d < head_dim; ++d) {
        att_ref.push_back(att[d]);
        att_out.push_back(at(out_bits, static_cast<std::size_t>(p) * width + h * head_dim + d));
      }
    }
  }
  const std::string shape = std::string(fused ? "_fused" : "") + "_h" + std::to_string(heads) +
                            "x" + std::to_string(head_dim);
  ExpectWithin("rope_q" + shape, dtype, reference::RelativeError(q_out, q_ref));
  ExpectWithin("rope_k_cache" + shape, dtype, reference::RelativeError(k_out, k_ref));
  ExpectWithin("attention" + shape, dtype, reference::RelativeError(att_out, att_ref));
  EXPECT_TRUE(keys == expected_keys) << "a key cache row other than the appended ones changed";
  EXPECT_TRUE(values == expected_values) << "value cache differs from old rows + appended v";
  for (std::size_t i = active * static_cast<std::size_t>(qkv_width); i < qkv.size(); ++i) {
    ASSERT_EQ(qkv[i], qkv0[i]) << "qkv past the live batch changed";
  }
  ExpectUntouched(out_bits, width, active, capacity);
  (void)test;
}

TEST_F(DecodeKernelsTest, AttentionMatchesReferenceOverDifferentContextLengths) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    std::uniform_int_distribution<int> any(0, 299);
    // head_dim 64: two thread groups split the context in the value pass.
    RunAttentionCase(this, stream_.get(), dtype, 4, 64, 300, {0, 1, 129, 299, any(Rng())});
    // head_dim 96 (does not divide the block), longer contexts.
    std::uniform_int_distribution<int> longer(0, 999);
    RunAttentionCase(this, stream_.get(), dtype, 2, 96, 1000,
                     {517, 0, 999, 31, longer(Rng()), longer(Rng())});
    // head_dim 128, the largest; sequences at slots far apart.
    RunAttentionCase(this, stream_.get(), dtype, 3, 128, 2048, {2047, 1500, 1});
    // head_dim 10: even but not a multiple of 8 (4-byte loads).
    RunAttentionCase(this, stream_.get(), dtype, 4, 10, 64, {0, 63, 17});
  }
}

// EnqueueRopeAttention (RoPE and KV append fused into attention) against the
// same references and the same cache checks.
TEST_F(DecodeKernelsTest, RopeAttentionMatchesReferenceOverDifferentContextLengths) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    std::uniform_int_distribution<int> any(0, 299);
    RunAttentionCase(this, stream_.get(), dtype, 4, 64, 300, {0, 1, 129, 299, any(Rng())}, true);
    RunAttentionCase(this, stream_.get(), dtype, 2, 96, 1000, {517, 0, 999, 31}, true);
    RunAttentionCase(this, stream_.get(), dtype, 3, 128, 2048, {2047, 1500, 1}, true);
    RunAttentionCase(this, stream_.get(), dtype, 4, 10, 64, {0, 63, 17}, true);
  }
}

TEST_F(DecodeKernelsTest, ArgmaxIsExactWithTiesToTheLowestIndex) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 50000;  // not a multiple of the block
    const int vocab = config.vocab;
    const std::uint32_t capacity = 7, active = 6;
    auto logits = RandomHalf(static_cast<std::size_t>(capacity) * vocab, dtype, 3.0);
    const std::uint16_t big = FloatToHalfBits(40.0f, dtype);
    const std::uint16_t nan = dtype == DecoderDType::kFloat16 ? 0x7E00 : 0x7FC0;
    std::uniform_int_distribution<int> index(0, vocab - 1);
    // Row 1: a tie between two random indices.
    int a = index(Rng()), b = index(Rng());
    while (b == a) b = index(Rng());
    logits[1 * vocab + a] = logits[1 * vocab + b] = big;
    // Row 2: all equal.
    std::fill(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab, big);
    // Row 3: NaNs around a maximum.
    for (int i = 0; i < 100; ++i) logits[3 * vocab + index(Rng())] = nan;
    logits[3 * vocab + 77] = big;
    // Row 4: the maximum at the last index.
    logits[4 * vocab + vocab - 1] = big;
    // Row 5: -0 and +0 tie (the comparison says equal), -0 at the lower
    // index, every other logit negative.
    const std::uint16_t negative = FloatToHalfBits(-40.0f, dtype);
    std::fill(logits.begin() + 5 * vocab, logits.begin() + 6 * vocab, negative);
    const int minus_zero = index(Rng()) / 2, plus_zero = vocab / 2 + index(Rng()) / 2;
    logits[5 * vocab + minus_zero] = 0x8000;  // -0 in both types
    logits[5 * vocab + plus_zero] = 0x0000;
    const auto f = reference::ToFloat(logits, dtype);
    TestBatch batch = MakeBatch(capacity, active, 8);
    auto d_logits = Upload(logits);
    auto d_tokens = Poisoned<std::int32_t>(capacity);
    ASSERT_EQ(EnqueueArgmax(config, d_logits.data(), batch.view, d_tokens.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto tokens = Download(d_tokens);
    for (std::uint32_t p = 0; p < active; ++p) {
      EXPECT_EQ(tokens[p], reference::Argmax(&f[p * vocab], vocab)) << "position " << p;
    }
    EXPECT_EQ(tokens[1], std::min(a, b));
    EXPECT_EQ(tokens[2], 0);
    EXPECT_EQ(tokens[4], vocab - 1);
    EXPECT_EQ(tokens[5], minus_zero);
    EXPECT_EQ(tokens[active], -1) << "the token past the live batch was written";
  }
}

std::vector<std::int32_t> Sample(cudaStream_t stream, const DecoderConfig& config,
                                 const DeviceBuffer<std::uint16_t>& logits, const TestBatch& batch,
                                 SamplingParams params, const std::vector<std::uint64_t>& ids,
                                 const std::vector<std::uint32_t>& steps) {
  auto d_ids = Upload(ids);
  auto d_steps = Upload(steps);
  auto d_tokens = Poisoned<std::int32_t>(batch.view.capacity);
  EXPECT_EQ(EnqueueSample(config, logits.data(), batch.view, params, d_ids.data(), d_steps.data(),
                          d_tokens.data(), stream),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return Download(d_tokens);
}

// The device's token maximizes the CPU's Gumbel scores, computed through the
// host Philox from the documented (seed, sequence, step) mapping. Scores are
// compared within 1e-3 since the device's logf differs from double log in the
// last bits; a wrong counter mapping misses by whole units.
TEST_F(DecodeKernelsTest, SamplingMatchesTheCpuPhiloxReference) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 1000;
    const std::uint32_t capacity = 16, active = 16;
    const auto logits = RandomHalf(capacity * 1000, dtype, 2.0);
    const auto f = reference::ToFloat(logits, dtype);
    TestBatch batch = MakeBatch(capacity, active, 16);
    auto d_logits = Upload(logits);
    std::vector<std::uint64_t> ids(capacity);
    std::vector<std::uint32_t> steps(capacity);
    for (auto& id : ids) id = Draw();
    for (auto& s : steps) s = static_cast<std::uint32_t>(Draw());  // offsets past 2^32 too
    steps[0] = 0;
    for (float temperature : {1.0f, 0.7f}) {
      SamplingParams params{temperature, Draw()};
      const auto tokens = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
      int exact = 0;
      for (std::uint32_t p = 0; p < active; ++p) {
        const auto scores =
            reference::SampleScores(&f[p * 1000], 1000, temperature, params.seed, ids[p], steps[p]);
        const int best =
            static_cast<int>(std::max_element(scores.begin(), scores.end()) - scores.begin());
        ASSERT_GE(tokens[p], 0);
        ASSERT_LT(tokens[p], 1000);
        EXPECT_GE(scores[tokens[p]], scores[best] - 1e-3) << "position " << p;
        exact += tokens[p] == best;
      }
      std::printf("  sampling %s T=%.1f: %d/%u tokens equal the CPU Philox reference\n",
                  Name(dtype), temperature, exact, active);
      ::testing::Test::RecordProperty(
          std::string("sample_exact_") + Name(dtype) + "_T" + std::to_string(temperature), exact);
    }
  }
}

// Same (seed, sequence, step) -> same token, wherever the sequence sits in the
// batch; another seed or step -> other draws.
TEST_F(DecodeKernelsTest, SamplingIsReproducibleAndKeyedBySeedSequenceAndStep) {
  DecoderConfig config;
  config.vocab = 4096;
  const std::uint32_t capacity = 64, active = 64;
  // Flat logits: every token likely, so different keys give different draws.
  const auto logits = RandomHalf(capacity * 4096, config.dtype, 0.1);
  TestBatch batch = MakeBatch(capacity, active, 64);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::vector<std::uint32_t> steps(capacity);
  for (auto& id : ids) id = Draw();
  for (auto& s : steps) s = static_cast<std::uint32_t>(Draw() % 1000);
  const SamplingParams params{1.0f, Draw()};
  const auto first = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
  const auto second = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
  EXPECT_EQ(first, second);
  const auto differing = [&](const std::vector<std::int32_t>& other) {
    int n = 0;
    for (std::uint32_t p = 0; p < active; ++p) n += other[p] != first[p];
    return n;
  };
  const auto other_seed =
      Sample(stream_.get(), config, d_logits, batch, {1.0f, params.seed ^ 1}, ids, steps);
  EXPECT_GT(differing(other_seed), 48);
  auto next_steps = steps;
  for (auto& s : next_steps) ++s;
  EXPECT_GT(differing(Sample(stream_.get(), config, d_logits, batch, params, ids, next_steps)), 48);
  auto other_ids = ids;
  for (auto& id : other_ids) id += 1;
  EXPECT_GT(differing(Sample(stream_.get(), config, d_logits, batch, params, other_ids, steps)),
            48);
  // Reverse the batch (rows of logits with their sequences): each sequence
  // draws the same token at its new position.
  std::vector<std::uint16_t> reversed(logits.size());
  std::vector<std::uint64_t> rev_ids(ids.rbegin(), ids.rend());
  std::vector<std::uint32_t> rev_steps(steps.rbegin(), steps.rend());
  for (std::uint32_t p = 0; p < capacity; ++p) {
    std::copy(logits.begin() + p * 4096, logits.begin() + (p + 1) * 4096,
              reversed.begin() + (capacity - 1 - p) * 4096);
  }
  auto d_reversed = Upload(reversed);
  const auto moved = Sample(stream_.get(), config, d_reversed, batch, params, rev_ids, rev_steps);
  for (std::uint32_t p = 0; p < capacity; ++p) EXPECT_EQ(moved[capacity - 1 - p], first[p]);
}

TEST_F(DecodeKernelsTest, SamplingAtZeroTemperatureIsArgmax) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.vocab = 2048;
    const std::uint32_t capacity = 8, active = 8;
    // Distinct logits in the storage type: consecutive bit patterns upward of
    // 1.0 in a random order, so neighbours differ by at least one ulp of 1.0
    // (2^-10 fp16, 2^-7 bf16), which at T = 1e-5 outweighs any Gumbel
    // difference (< 20 for u inside (2^-24, 1 - 2^-24)).
    std::vector<std::uint16_t> logits(capacity * 2048);
    const std::uint16_t one = FloatToHalfBits(1.0f, dtype);
    for (std::uint32_t p = 0; p < capacity; ++p) {
      std::vector<int> order(2048);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), Rng());
      for (int i = 0; i < 2048; ++i) {
        logits[p * 2048 + i] = static_cast<std::uint16_t>(one + order[i]);
      }
    }
    TestBatch batch = MakeBatch(capacity, active, 8);
    std::vector<std::uint64_t> ids(capacity);
    std::vector<std::uint32_t> steps(capacity, 5);
    for (auto& id : ids) id = Draw();
    auto d_logits = Upload(logits);
    auto d_greedy = Poisoned<std::int32_t>(capacity);
    ASSERT_EQ(EnqueueArgmax(config, d_logits.data(), batch.view, d_greedy.data(), stream_.get()),
              cudaSuccess);
    Sync();
    const auto greedy = Download(d_greedy);
    EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {0.0f, Draw()}, ids, steps), greedy);
    EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {1e-5f, Draw()}, ids, steps), greedy);
    EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {-1.0f, Draw()}, ids, steps), greedy);
  }
}

// 32768 draws over a vocabulary of 8 (1024 sequences x 32 steps): each
// token's frequency is within 0.015 of softmax(logits / T) (about 5 standard
// deviations of a frequency estimated from 32768 draws).
TEST_F(DecodeKernelsTest, SamplingFrequenciesFollowSoftmax) {
  DecoderConfig config;
  config.vocab = 8;
  const float temperature = 1.3f;
  const std::uint32_t capacity = 1024;
  const float row[8] = {0.0f, 0.5f, 1.0f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f};
  std::vector<std::uint16_t> logits(capacity * 8);
  for (std::uint32_t p = 0; p < capacity; ++p) {
    for (int i = 0; i < 8; ++i) logits[p * 8 + i] = FloatToHalfBits(row[i], config.dtype);
  }
  TestBatch batch = MakeBatch(capacity, capacity, capacity);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::iota(ids.begin(), ids.end(), std::uint64_t{0});
  const SamplingParams params{temperature, Draw()};
  std::vector<double> counts(8, 0.0);
  constexpr int kSteps = 32;
  for (int s = 0; s < kSteps; ++s) {
    const auto tokens = Sample(stream_.get(), config, d_logits, batch, params, ids,
                               std::vector<std::uint32_t>(capacity, s));
    for (std::int32_t t : tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 8);
      counts[t] += 1;
    }
  }
  double z = 0;
  for (float l : row) z += std::exp(l / temperature);
  double worst = 0;
  for (int i = 0; i < 8; ++i) {
    const double expected = std::exp(row[i] / temperature) / z;
    const double got = counts[i] / (capacity * kSteps);
    worst = std::max(worst, std::abs(got - expected));
    EXPECT_NEAR(got, expected, 0.015) << "token " << i;
  }
  std::printf("  sampling frequencies: worst |freq - softmax| = %.4f over %u draws\n", worst,
              capacity * kSteps);
  ::testing::Test::RecordProperty("sample_freq_worst_abs_dev", std::to_string(worst));
}

}  // namespace
}  // namespace baton
