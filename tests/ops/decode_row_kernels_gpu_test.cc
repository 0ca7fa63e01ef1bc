// The decode step's row kernels alone (one position's d_model or ffn row at
// a time): embedding, RMSNorm, residual add and SiLU·mul against the CPU
// reference, in fp16 and bf16, on poisoned outputs (support/kernel_harness.h
// says how they are compared). Their fusions with each other and with the
// GEMV are checked against these kernels in decode_fused_kernels_gpu_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/half_bits.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

class RowKernelsTest : public DTypeKernelTest {};

TEST_P(RowKernelsTest, EmbeddingGathersRowsAndZeroesOutOfRangeTokens) {
  DecoderConfig config;
  config.dtype = dtype();
  config.vocab = 1000;
  config.d_model = 264;
  const std::uint32_t capacity = 7, active = 6;
  const auto table = RandomHalf(std::size_t{1000} * 264, dtype(), 1.0);
  std::vector<std::int32_t> tokens(capacity);
  for (auto& t : tokens) t = static_cast<std::int32_t>(Draw() % 1000);
  tokens[2] = -3;    // out of range below
  tokens[4] = 1000;  // out of range above
  tokens[5] = 999;   // the last row
  TestBatch batch = MakeBatch(capacity, active, 16);
  auto d_table = Upload(table);
  auto d_tokens = Upload(tokens);
  auto hidden = Poisoned<float>(capacity * 264);
  ASSERT_EQ(ops::Enqueue(ops::RowNorm::embedding(config, d_table.data(), d_tokens.data(),
                                                 batch.view, hidden.data()),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto out = Download(hidden);
  for (std::uint32_t p = 0; p < active; ++p) {
    const bool valid = tokens[p] >= 0 && tokens[p] < 1000;
    for (int i = 0; i < 264; ++i) {
      const float expected =
          valid ? HalfBitsToFloat(table[static_cast<std::size_t>(tokens[p]) * 264 + i], dtype())
                : 0.0f;
      ASSERT_EQ(out[p * 264 + i], expected) << "position " << p << " element " << i;
    }
  }
  ExpectUntouched(out, 264, active, capacity);
}

TEST_P(RowKernelsTest, RmsNormMatchesReference) {
  DecoderConfig config;
  config.dtype = dtype();
  config.d_model = 1000;  // not a multiple of the block size
  config.rms_epsilon = 1e-5f;
  const std::uint32_t capacity = 9, active = 7;
  const auto hidden = RandomFloat(capacity * 1000, 3.0);
  const auto weight = RandomHalf(1000, dtype(), 1.0);
  const auto weight_f = reference::ToFloat(weight, dtype());
  TestBatch batch = MakeBatch(capacity, active, 16);
  auto d_hidden = Upload(hidden);
  auto d_weight = Upload(weight);
  auto d_out = Poisoned<std::uint16_t>(capacity * 1000);
  ASSERT_EQ(ops::Enqueue(ops::RowNorm::rms_norm(config, d_hidden.data(), d_weight.data(),
                                                batch.view, d_out.data()),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto out_bits = Download(d_out);
  std::vector<double> out, ref;
  for (std::uint32_t p = 0; p < active; ++p) {
    const auto row = reference::RmsNorm(&hidden[p * 1000], weight_f.data(), 1000, 1e-5);
    ref.insert(ref.end(), row.begin(), row.end());
    for (int i = 0; i < 1000; ++i) out.push_back(ToDouble(out_bits[p * 1000 + i], dtype()));
  }
  ExpectClose("rms_norm", dtype(), out, ref, 1000);
  ExpectUntouched(out_bits, 1000, active, capacity);
}

// fp32 += storage-type delta is one exact float addition: bit-exact.
TEST_P(RowKernelsTest, ResidualAddIsExactFloatAddition) {
  DecoderConfig config;
  config.dtype = dtype();
  config.d_model = 520;
  const std::uint32_t capacity = 5, active = 4;
  const auto hidden = RandomFloat(capacity * 520, 2.0);
  const auto delta = RandomHalf(capacity * 520, dtype(), 1.0);
  TestBatch batch = MakeBatch(capacity, active, 8);
  auto d_hidden = Upload(hidden);
  auto d_delta = Upload(delta);
  ASSERT_EQ(
      ops::Enqueue(ops::RowNorm::residual_add(config, d_hidden.data(), d_delta.data(), batch.view),
                   stream_.get()),
      cudaSuccess);
  Sync();
  const auto out = Download(d_hidden);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float expected =
        i < active * 520u ? hidden[i] + HalfBitsToFloat(delta[i], dtype()) : hidden[i];
    ASSERT_EQ(out[i], expected) << "element " << i;
  }
}

TEST_P(RowKernelsTest, SiluMulMatchesReference) {
  DecoderConfig config;
  config.dtype = dtype();
  config.ffn = 1368;
  const std::uint32_t capacity = 6, active = 5;
  const auto gate_up = RandomHalf(capacity * 2 * 1368, dtype(), 2.0);
  const auto f = reference::ToFloat(gate_up, dtype());
  TestBatch batch = MakeBatch(capacity, active, 8);
  auto d_in = Upload(gate_up);
  auto d_out = Poisoned<std::uint16_t>(capacity * 1368);
  ASSERT_EQ(
      ops::Enqueue(ops::SiluMul::of(config, d_in.data(), batch.view, d_out.data()), stream_.get()),
      cudaSuccess);
  Sync();
  const auto out_bits = Download(d_out);
  std::vector<double> out, ref;
  for (std::uint32_t p = 0; p < active; ++p) {
    for (int i = 0; i < 1368; ++i) {
      ref.push_back(reference::SiluMul(f[p * 2736 + i], f[p * 2736 + 1368 + i]));
      out.push_back(ToDouble(out_bits[p * 1368 + i], dtype()));
    }
  }
  ExpectClose("silu_mul", dtype(), out, ref, 1368);
  ExpectUntouched(out_bits, 1368, active, capacity);
}

INSTANTIATE_TEST_SUITE_P(, RowKernelsTest, ::testing::ValuesIn(kDTypes), DTypeParamName);

}  // namespace
}  // namespace baton::kernel_test
