// Tensor parallelism's split of the weights (plan/tensor_parallel.h), on the
// CPU: the ranks' slices tile every tensor exactly once; a rank's query heads
// map onto its own key/value heads; and, in double on random weights, one
// layer's attention output and FFN computed rank by rank (column-parallel
// slices, row-parallel partial sums added in rank order) equal the whole
// model's, for sizes 1, 2, 4 and 8 of the Llama-3.1-8B and -70B shapes' head
// counts (scaled down) and Qwen2's biases.
#include "plan/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "support/test_seed.h"

namespace baton::detail {
namespace {

constexpr WeightRole kSplit[] = {WeightRole::kQ,     WeightRole::kK,     WeightRole::kV,
                                 WeightRole::kQBias, WeightRole::kKBias, WeightRole::kVBias,
                                 WeightRole::kGate,  WeightRole::kUp,    WeightRole::kO,
                                 WeightRole::kDown,  WeightRole::kOBias, WeightRole::kLmHead};

// Small configs with the real models' head structure: 32 query heads on 8
// key/value heads (Llama-3.1-8B), 64 on 8 (70B).
DecoderConfig Config(int heads, int kv_heads) {
  DecoderConfig c;
  c.d_model = 48;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 8;  // a rank of 8 holds one key/value head: 16-byte rows
  c.ffn = 64;
  c.vocab = 250;  // padded to 256: 32 rows a rank at 8 ranks
  c.qkv_bias = true;
  c.o_bias = true;
  return c;
}

TEST(TensorParallelTest, SlicesTileEveryTensorOnce) {
  for (const DecoderConfig& c : {Config(32, 8), Config(64, 8)}) {
    for (int size : {1, 2, 4, 8}) {
      for (WeightRole role : kSplit) {
        std::size_t rows = 0, cols = 0;
        FullShape(role, c, rows, cols);
        std::vector<int> owners(rows * cols, 0);
        for (int r = 0; r < size; ++r) {
          const absl::Status valid = ValidateTensorParallel(c, {size, r});
          ASSERT_TRUE(valid.ok()) << valid;
          const Slice s = SliceOf(role, c, {size, r});
          for (std::size_t i = s.row_begin; i < s.row_end; ++i) {
            for (std::size_t j = s.col_begin; j < s.col_end; ++j) ++owners[i * cols + j];
          }
        }
        for (std::size_t k = 0; k < owners.size(); ++k) {
          ASSERT_EQ(owners[k], 1) << "role " << static_cast<int>(role) << ", size " << size
                                  << ": element " << k << " held " << owners[k] << " times";
        }
      }
    }
  }
}

TEST(TensorParallelTest, EachRanksQueryHeadsUseItsOwnKeyValueHeads) {
  const DecoderConfig c = Config(64, 8);
  for (int size : {1, 2, 4, 8}) {
    for (int r = 0; r < size; ++r) {
      const Slice q = SliceOf(WeightRole::kQ, c, {size, r});
      const Slice k = SliceOf(WeightRole::kK, c, {size, r});
      for (std::size_t row = q.row_begin; row < q.row_end; ++row) {
        const std::size_t head = row / c.head_dim, kv_head = head / c.group_size();
        EXPECT_GE(kv_head * c.head_dim, k.row_begin);
        EXPECT_LT(kv_head * c.head_dim, k.row_end);
      }
      const DecoderConfig rc = RankConfig(c, {size, r});
      EXPECT_EQ(rc.group_size(), c.group_size());
      EXPECT_EQ(static_cast<std::size_t>(rc.attention_width()), q.row_end - q.row_begin);
    }
  }
}

TEST(TensorParallelTest, ShapesThatDoNotDivideAreRefusedNamingThem) {
  DecoderConfig c = Config(32, 8);
  const absl::Status kv = ValidateTensorParallel(c, {3, 0});
  EXPECT_EQ(kv.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(kv.message().find("key/value heads (8) do not divide by it"), std::string::npos) << kv;
  c.ffn = 66;
  const absl::Status ffn = ValidateTensorParallel(c, {4, 0});
  EXPECT_NE(ffn.message().find("the FFN width (ffn) (66)"), std::string::npos) << ffn;
  EXPECT_EQ(ValidateTensorParallel(Config(32, 8), {2, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTensorParallel(Config(32, 8), {0, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  // Each rank's logits are gathered as whole 16-byte rows.
  c = Config(32, 8);
  c.vocab = 200;  // 25 rows a rank at 8 ranks
  const absl::Status vocab = ValidateTensorParallel(c, {8, 0});
  EXPECT_NE(vocab.message().find("padded vocabulary rows (200) split into 25 rows a rank"),
            std::string::npos)
      << vocab;
  c.vocab = 192;  // 24 rows a rank
  EXPECT_TRUE(ValidateTensorParallel(c, {8, 0}).ok());
  // A rank's share must itself be a shape the kernels run.
  c = Config(32, 8);
  c.head_dim = 4;  // one key/value head of 4: an 8-byte row
  const absl::Status share = ValidateTensorParallel(c, {8, 0});
  EXPECT_NE(share.message().find("a rank's share of the model: decoder config: kv_heads * head_dim = 4"),
            std::string::npos)
      << share;
}

// y = W x for a row-major [rows, cols] W.
std::vector<double> MatVec(const std::vector<double>& w, std::size_t rows, std::size_t cols,
                           const std::vector<double>& x) {
  std::vector<double> y(rows, 0.0);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) y[i] += w[i * cols + j] * x[j];
  }
  return y;
}

std::vector<double> Random(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = g(rng);
  return v;
}

std::vector<double> Take(const std::vector<double>& full, std::size_t cols, const Slice& s) {
  std::vector<double> out(s.elements());
  CopySlice(full.data(), cols, s, out.data());
  return out;
}

// The FFN (SiLU(gate x) * up x, then down) and the attention output
// projection with its bias, per rank, against the whole layer.
TEST(TensorParallelTest, RankPartialsSumToTheWholeLayer) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937_64 rng(testing::TestSeed());
  const DecoderConfig c = Config(32, 8);
  const std::size_t d = c.d_model, f = c.ffn, a = c.attention_width();
  const auto gate = Random(f * d, rng), up = Random(f * d, rng), down = Random(d * f, rng);
  const auto o = Random(d * a, rng), o_bias = Random(d, rng);
  const auto x = Random(d, rng), heads_out = Random(a, rng);
  const auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  // The whole layer.
  std::vector<double> hidden(f);
  const auto g = MatVec(gate, f, d, x), u = MatVec(up, f, d, x);
  for (std::size_t i = 0; i < f; ++i) hidden[i] = silu(g[i]) * u[i];
  const auto ffn_whole = MatVec(down, d, f, hidden);
  auto attn_whole = MatVec(o, d, a, heads_out);
  for (std::size_t i = 0; i < d; ++i) attn_whole[i] += o_bias[i];
  for (int size : {1, 2, 4, 8}) {
    std::vector<double> ffn_sum(d, 0.0), attn_sum(d, 0.0);
    for (int r = 0; r < size; ++r) {  // rank order, as the all-reduce adds
      const TensorParallel tp{size, r};
      const Slice gs = SliceOf(WeightRole::kGate, c, tp), us = SliceOf(WeightRole::kUp, c, tp);
      const Slice ds = SliceOf(WeightRole::kDown, c, tp), os = SliceOf(WeightRole::kO, c, tp);
      const Slice bs = SliceOf(WeightRole::kOBias, c, tp);
      const std::size_t fr = gs.row_end - gs.row_begin;
      const auto gr = MatVec(Take(gate, d, gs), fr, d, x), ur = MatVec(Take(up, d, us), fr, d, x);
      std::vector<double> hr(fr);
      for (std::size_t i = 0; i < fr; ++i) hr[i] = silu(gr[i]) * ur[i];
      const auto partial = MatVec(Take(down, f, ds), d, fr, hr);
      // The rank's attention heads' outputs are its own rows of heads_out.
      const std::vector<double> mine(heads_out.begin() + os.col_begin,
                                     heads_out.begin() + os.col_end);
      const auto attn_partial = MatVec(Take(o, a, os), d, os.col_end - os.col_begin, mine);
      const auto bias = Take(o_bias, 1, bs);
      for (std::size_t i = 0; i < d; ++i) {
        ffn_sum[i] += partial[i];
        attn_sum[i] += attn_partial[i] + (bias.empty() ? 0.0 : bias[i]);
      }
    }
    for (std::size_t i = 0; i < d; ++i) {
      EXPECT_NEAR(ffn_sum[i], ffn_whole[i], 1e-9 * (1 + std::abs(ffn_whole[i]))) << size << " " << i;
      EXPECT_NEAR(attn_sum[i], attn_whole[i], 1e-9 * (1 + std::abs(attn_whole[i])))
          << size << " " << i;
    }
  }
}

}  // namespace
}  // namespace baton::detail
