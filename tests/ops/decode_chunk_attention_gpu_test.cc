// ops::ChunkAttention (kernels/attention/chunk_attention.h, ops/chunk_attention.h) against the CPU
// reference in double, in fp16 and bf16, for multi-head, grouped-query (Llama-3.2-1B's 32/8,
// Qwen2.5-0.5B's 14/2, 8/2 at head_dim 96) and multi-query attention (head_dim 128). One step mixes
// every kind of position: decoding tokens at random contexts (the last cache row included), a chunk
// from position 0, a chunk with history (300 + 257 tokens), chunks that do not fill their last
// tile, a position with no tokens, skipped positions (start -1, a slot past
// max_slots, a chunk past max_context), dead positions (capacity > active)
// and rows no position owns, at random slots and in a random row order. Every
// (row, head) is compared element by element with reference::Attention over
// its keys [0, start + i]; every row not computed must keep its poison. The
// same positions run again at other batch positions, rows and capacity must
// give the same bits (deterministic, and independent of the grid mapping).
// DISABLED_Timing launches the performance shapes for ncu (not a test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention/chunk_attention.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

constexpr int kMaxContext = 1024;
constexpr std::int32_t kAnyStart = -100;  // drawn from [0, max_context)
constexpr std::uint16_t kPoison = 0xFFFF;

struct ChunkShape {
  int heads, kv_heads, head_dim;
};

const std::vector<ChunkShape>& ChunkShapes() {
  static const std::vector<ChunkShape> shapes = {
      {4, 4, 64},   // multi-head (group 1)
      {32, 8, 64},  // Llama-3.2-1B (group 4)
      {14, 2, 64},  // Qwen2.5-0.5B (group 7: tiles split tokens)
      {8, 2, 96},   // group 4, head_dim 96 (rows padded in shared memory)
      {8, 1, 128},  // multi-query, group 8, the largest head
      {4, 2, 32},   // a small head (half a swizzled row)
  };
  return shapes;
}

struct PositionSpec {
  std::uint32_t tokens;
  std::int32_t start;  // kAnyStart: random
  bool bad_slot = false;
};

// The step's positions: the last two are dead (p >= active).
const std::vector<PositionSpec>& StepPositions() {
  static const std::vector<PositionSpec> positions = {
      {1, kAnyStart},              // decoding
      {200, 0},                    // a chunk from the prompt's start
      {0, 5},                      // no rows this step
      {257, 300},                  // a chunk with history
      {3, -1},                     // skipped: start < 0
      {1, kMaxContext - 1},        // decoding at the full context
      {77, 33},                    // a partial last tile for every group size
      {4, 10, /*bad_slot=*/true},  // skipped: slot >= max_slots
      {1, kAnyStart},              // decoding
      {16, 0},                     // a short chunk
      {5, kMaxContext - 3},        // skipped: past max_context
      {6, 40},                     // dead
      {1, 7},                      // dead
  };
  return positions;
}
constexpr std::uint32_t kDeadPositions = 2;

// A step on the host and the device: per-position arrays and the view.
struct Step {
  std::vector<std::uint32_t> tokens, first_row, slots;
  std::vector<std::int32_t> start;
  std::uint32_t active = 0, rows = 0, max_slots = 0;
  DeviceBuffer<std::uint32_t> d_active, d_tokens, d_first_row, d_slots;
  DeviceBuffer<std::int32_t> d_start;

  std::uint32_t capacity() const { return static_cast<std::uint32_t>(tokens.size()); }
  // Whether position p is computed (ops::ChunkAttention's contract).
  bool Computed(std::uint32_t p) const {
    return p < active && tokens[p] > 0 && slots[p] < max_slots && start[p] >= 0 &&
           start[p] + static_cast<std::int64_t>(tokens[p]) <= kMaxContext &&
           first_row[p] + tokens[p] <= rows;
  }
  // Lays the positions' rows out in a random order with random gaps and a
  // few spare rows at the end, and uploads everything.
  ChunkAttentionBatch Upload() {
    std::vector<std::uint32_t> order(capacity());
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), Rng());
    first_row.assign(capacity(), 0);
    std::uint32_t row = 0;
    for (std::uint32_t p : order) {
      row += static_cast<std::uint32_t>(Rng()() % 3);
      first_row[p] = row;
      row += tokens[p];
    }
    rows = row + 5;
    d_active = kernel_test::Upload(std::vector<std::uint32_t>{active});
    d_tokens = kernel_test::Upload(tokens);
    d_first_row = kernel_test::Upload(first_row);
    d_slots = kernel_test::Upload(slots);
    d_start = kernel_test::Upload(start);
    ChunkAttentionBatch batch;
    batch.active = d_active.data();
    batch.capacity = capacity();
    batch.rows = rows;
    batch.tokens = d_tokens.data();
    batch.first_row = d_first_row.data();
    batch.slots = d_slots.data();
    batch.start = d_start.data();
    batch.max_slots = max_slots;
    return batch;
  }
};

DecoderConfig ShapeConfig(const ChunkShape& shape, DecoderDType dtype, int max_context) {
  DecoderConfig config;
  config.dtype = dtype;
  config.heads = shape.heads;
  config.kv_heads = shape.kv_heads;
  config.head_dim = shape.head_dim;
  config.max_context = max_context;
  return config;
}

class ChunkAttentionTest
    : public DecodeKernelTest,
      public ::testing::WithParamInterface<std::tuple<std::size_t, DecoderDType>> {};

TEST_P(ChunkAttentionTest, MatchesReferenceAndWritesOnlyItsRows) {
  const ChunkShape& shape = ChunkShapes()[std::get<0>(GetParam())];
  const DecoderDType dtype = std::get<1>(GetParam());
  const DecoderConfig config = ShapeConfig(shape, dtype, kMaxContext);
  const int hd = shape.head_dim, kv_heads = shape.kv_heads, group = config.group_size();
  const std::size_t width = config.attention_width(), qkv_width = config.qkv_width();

  const auto& specs = StepPositions();
  Step step;
  step.active = static_cast<std::uint32_t>(specs.size()) - kDeadPositions;
  step.max_slots = static_cast<std::uint32_t>(specs.size()) + 4;
  std::vector<std::uint32_t> free_slots(step.max_slots);
  std::iota(free_slots.begin(), free_slots.end(), 0u);
  std::shuffle(free_slots.begin(), free_slots.end(), Rng());
  std::uniform_int_distribution<std::int32_t> any_start(0, kMaxContext - 1);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    step.tokens.push_back(specs[p].tokens);
    step.start.push_back(specs[p].start == kAnyStart ? any_start(Rng()) : specs[p].start);
    step.slots.push_back(specs[p].bad_slot ? step.max_slots + static_cast<std::uint32_t>(p)
                                           : free_slots[p]);
  }
  const ChunkAttentionBatch batch = step.Upload();

  const std::size_t cache_elements =
      static_cast<std::size_t>(step.max_slots) * kv_heads * kMaxContext * hd;
  const auto keys = RandomHalf(cache_elements, dtype, 1.0);
  const auto values = RandomHalf(cache_elements, dtype, 1.0);
  const auto qkv = RandomHalf(static_cast<std::size_t>(step.rows) * qkv_width, dtype, 1.0);
  auto d_keys = Upload(keys);
  auto d_values = Upload(values);
  auto d_qkv = Upload(qkv);
  auto d_out = Poisoned<std::uint16_t>(static_cast<std::size_t>(step.rows) * width);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the poison is down
  const KvCacheLayer cache{d_keys.data(), d_values.data()};
  ASSERT_EQ(ops::Enqueue(ops::ChunkAttention::of(config, d_qkv.data(), cache, batch, d_out.data()),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto out = Download(d_out);

  const auto at = [&](const std::vector<std::uint16_t>& v, std::size_t i) {
    return ToDouble(v[i], dtype);
  };
  std::vector<double> got, want;
  std::vector<bool> owned(step.rows, false);
  for (std::uint32_t p = 0; p < step.capacity(); ++p) {
    if (!step.Computed(p)) continue;
    const int context = step.start[p] + static_cast<int>(step.tokens[p]);
    for (int kh = 0; kh < kv_heads; ++kh) {
      // The sequence's keys and values [0, start + tokens) of this kv head.
      const std::size_t first =
          (static_cast<std::size_t>(step.slots[p]) * kv_heads + kh) * kMaxContext * hd;
      std::vector<double> ctx_keys(static_cast<std::size_t>(context) * hd);
      std::vector<double> ctx_values(ctx_keys.size());
      for (std::size_t i = 0; i < ctx_keys.size(); ++i) {
        ctx_keys[i] = at(keys, first + i);
        ctx_values[i] = at(values, first + i);
      }
      for (std::uint32_t i = 0; i < step.tokens[p]; ++i) {
        const std::size_t row = step.first_row[p] + i;
        owned[row] = true;
        const std::size_t keys_seen = static_cast<std::size_t>(step.start[p] + i + 1) * hd;
        const std::vector<double> k(ctx_keys.begin(), ctx_keys.begin() + keys_seen);
        const std::vector<double> v(ctx_values.begin(), ctx_values.begin() + keys_seen);
        for (int g = 0; g < group; ++g) {
          const int h = kh * group + g;
          std::vector<double> q(hd);
          for (int d = 0; d < hd; ++d) q[d] = at(qkv, row * qkv_width + h * hd + d);
          const auto ref = reference::Attention(q, k, v, hd);
          for (int d = 0; d < hd; ++d) {
            want.push_back(ref[d]);
            got.push_back(at(out, row * width + h * hd + d));
          }
        }
      }
    }
  }
  // One comparison row per (row, head).
  ExpectClose("chunk_attention", dtype, got, want, hd);
  for (std::uint32_t r = 0; r < step.rows; ++r) {
    if (owned[r]) continue;
    for (std::size_t i = 0; i < width; ++i) {
      ASSERT_EQ(out[r * width + i], kPoison)
          << "row " << r << ", element " << i << " belongs to no computed position";
    }
  }

  // The live positions again, in reverse batch order, at other rows, with
  // more dead positions (another capacity, rows and grid): every computed
  // row must get the same bits.
  Step again;
  again.max_slots = step.max_slots;
  again.active = step.active;
  for (std::uint32_t i = 0; i < step.capacity(); ++i) {
    const std::uint32_t p = i < step.active ? step.active - 1 - i : i;
    again.tokens.push_back(step.tokens[p]);
    again.start.push_back(step.start[p]);
    again.slots.push_back(step.slots[p]);
  }
  for (int extra = 0; extra < 3; ++extra) {
    again.tokens.push_back(9);
    again.start.push_back(0);
    again.slots.push_back(free_slots[0]);
  }
  const ChunkAttentionBatch batch_again = again.Upload();
  std::vector<std::uint16_t> qkv_again(static_cast<std::size_t>(again.rows) * qkv_width, 0);
  for (std::uint32_t i = 0; i < step.active; ++i) {
    const std::uint32_t p = step.active - 1 - i;
    for (std::uint32_t t = 0; t < step.tokens[p]; ++t) {
      std::copy_n(qkv.begin() + (step.first_row[p] + t) * qkv_width, qkv_width,
                  qkv_again.begin() + (again.first_row[i] + t) * qkv_width);
    }
  }
  auto d_qkv_again = Upload(qkv_again);
  auto d_out_again = Poisoned<std::uint16_t>(static_cast<std::size_t>(again.rows) * width);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(ops::Enqueue(ops::ChunkAttention::of(config, d_qkv_again.data(), cache, batch_again,
                                                 d_out_again.data()),
                         stream_.get()),
            cudaSuccess);
  Sync();
  const auto out_again = Download(d_out_again);
  for (std::uint32_t i = 0; i < step.active; ++i) {
    const std::uint32_t p = step.active - 1 - i;
    if (!step.Computed(p)) continue;
    for (std::uint32_t t = 0; t < step.tokens[p]; ++t) {
      ASSERT_TRUE(std::equal(out.begin() + (step.first_row[p] + t) * width,
                             out.begin() + (step.first_row[p] + t + 1) * width,
                             out_again.begin() + (again.first_row[i] + t) * width))
          << "position " << p << " row " << t << " differs when run at another batch position";
    }
  }
}

std::string ChunkName(const ::testing::TestParamInfo<ChunkAttentionTest::ParamType>& info) {
  const ChunkShape& shape = ChunkShapes()[std::get<0>(info.param)];
  return "h" + std::to_string(shape.heads) + "kv" + std::to_string(shape.kv_heads) + "x" +
         std::to_string(shape.head_dim) + "_" + Name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(, ChunkAttentionTest,
                         ::testing::Combine(::testing::Range<std::size_t>(0, ChunkShapes().size()),
                                            ::testing::ValuesIn(kDTypes)),
                         ChunkName);

class ChunkAttentionLaunchTest : public DecodeKernelTest {};

// Shapes and arguments the kernel does not take are refused before any
// launch: cudaErrorInvalidValue, and no error left behind.
TEST_F(ChunkAttentionLaunchTest, RefusesWhatItCannotRun) {
  auto d_u32 = Upload(std::vector<std::uint32_t>(4, 0));
  auto d_i32 = Upload(std::vector<std::int32_t>(4, 0));
  auto d_data = Upload(std::vector<std::uint16_t>(1 << 16, 0));
  ChunkAttentionBatch batch;
  batch.active = d_u32.data();
  batch.capacity = 1;
  batch.rows = 1;
  batch.tokens = d_u32.data();
  batch.first_row = d_u32.data();
  batch.slots = d_u32.data();
  batch.start = d_i32.data();
  batch.max_slots = 1;
  const KvCacheLayer cache{d_data.data(), d_data.data()};
  DecoderConfig config = ShapeConfig({4, 2, 64}, DecoderDType::kBFloat16, 16);
  cudaStream_t stream = stream_.get();
  const auto enqueue = [&](const DecoderConfig& c, ChunkAttentionBatch b, const void* qkv,
                           void* out) {
    return ops::Enqueue(ops::ChunkAttention::of(c, qkv, cache, b, out), stream);
  };
  ASSERT_EQ(enqueue(config, batch, d_data.data(), d_data.data()), cudaSuccess);
  for (int head_dim : {8, 10, 72, 136, 256}) {
    DecoderConfig bad = config;
    bad.head_dim = head_dim;
    EXPECT_EQ(enqueue(bad, batch, d_data.data(), d_data.data()), cudaErrorInvalidValue)
        << "head_dim " << head_dim;
  }
  DecoderConfig bad_groups = config;
  bad_groups.kv_heads = 3;
  EXPECT_EQ(enqueue(bad_groups, batch, d_data.data(), d_data.data()), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(config, batch, nullptr, d_data.data()), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(config, batch, d_data.data(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(enqueue(config, batch, d_data.data() + 1, d_data.data()), cudaErrorInvalidValue);
  ChunkAttentionBatch empty = batch;
  empty.capacity = 0;
  EXPECT_EQ(enqueue(config, empty, d_data.data(), d_data.data()), cudaErrorInvalidValue);
  ChunkAttentionBatch no_tokens = batch;
  no_tokens.tokens = nullptr;
  EXPECT_EQ(enqueue(config, no_tokens, d_data.data(), d_data.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Sync();
}

// The performance shapes (docs: the brief's table), for ncu's
// gpu__time_duration.sum; also timed with events here (boost clocks, launches
// back to back). BATON_CHUNK_TIMING_REPS sets the launches per case.
struct TimingCase {
  const char* name;
  int head_dim;
  std::vector<std::uint32_t> tokens;
  std::vector<std::int32_t> start;
};

TEST_F(ChunkAttentionLaunchTest, DISABLED_Timing) {
  const char* reps_env = std::getenv("BATON_CHUNK_TIMING_REPS");
  const int reps = reps_env != nullptr ? std::atoi(reps_env) : 20;
  std::vector<TimingCase> cases = {
      {"prompt1000_chunk0_512", 64, {512}, {0}},
      {"prompt1000_chunk512_1000", 64, {488}, {512}},
      {"8x512_at0", 64, std::vector<std::uint32_t>(8, 512), std::vector<std::int32_t>(8, 0)},
      {"mixed_16dec_ctx1000_plus_496", 64, {}, {}},
      {"hd128_chunk1000_at0", 128, {1000}, {0}},
  };
  for (int i = 0; i < 16; ++i) {
    cases[3].tokens.push_back(1);
    cases[3].start.push_back(992 + i);
  }
  cases[3].tokens.push_back(496);
  cases[3].start.push_back(0);
  for (const TimingCase& c : cases) {
    const DecoderConfig config = ShapeConfig({32, 8, c.head_dim}, DecoderDType::kBFloat16, 2048);
    Step step;
    step.tokens = c.tokens;
    step.start = c.start;
    step.active = step.capacity();
    step.max_slots = step.capacity();
    step.slots.resize(step.capacity());
    std::iota(step.slots.begin(), step.slots.end(), 0u);
    const ChunkAttentionBatch batch = step.Upload();
    const std::size_t cache_elements =
        static_cast<std::size_t>(step.max_slots) * config.key_value_heads() * 2048 * c.head_dim;
    auto d_keys = Poisoned<std::uint16_t>(cache_elements);
    auto d_values = Poisoned<std::uint16_t>(cache_elements);
    auto d_qkv = Poisoned<std::uint16_t>(static_cast<std::size_t>(step.rows) * config.qkv_width());
    auto d_out =
        Poisoned<std::uint16_t>(static_cast<std::size_t>(step.rows) * config.attention_width());
    // Small finite values (0x2020 is about 1e-19 in bf16).
    ASSERT_EQ(cudaMemset(d_keys.data(), 0x20, d_keys.bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_values.data(), 0x20, d_values.bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_qkv.data(), 0x20, d_qkv.bytes()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const KvCacheLayer cache{d_keys.data(), d_values.data()};
    double flops = 0;  // causal: row i of a chunk at start s sees s + i + 1 keys
    for (std::uint32_t p = 0; p < step.capacity(); ++p) {
      for (std::uint32_t i = 0; i < step.tokens[p]; ++i) {
        flops += 4.0 * (step.start[p] + i + 1) * c.head_dim * config.heads;
      }
    }
    cudaEvent_t begin, end;
    ASSERT_EQ(cudaEventCreate(&begin), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
    ASSERT_EQ(
        ops::Enqueue(ops::ChunkAttention::of(config, d_qkv.data(), cache, batch, d_out.data()),
                     stream_.get()),
        cudaSuccess);  // warm-up
    ASSERT_EQ(cudaEventRecord(begin, stream_.get()), cudaSuccess);
    for (int r = 0; r < reps; ++r) {
      ASSERT_EQ(
          ops::Enqueue(ops::ChunkAttention::of(config, d_qkv.data(), cache, batch, d_out.data()),
                       stream_.get()),
          cudaSuccess);
    }
    ASSERT_EQ(cudaEventRecord(end, stream_.get()), cudaSuccess);
    Sync();
    float ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&ms, begin, end), cudaSuccess);
    const double us = 1000.0 * ms / std::max(reps, 1);
    std::printf("TIMING %-30s rows %5u grid %u x %u  %.3f GFLOP  %.2f us/launch  %.1f TFLOP/s\n",
                c.name, step.rows, chunk_attention_grid(config, batch.capacity, batch.rows).x,
                chunk_attention_grid(config, batch.capacity, batch.rows).y, flops * 1e-9, us,
                flops / us * 1e-6);
    (void)cudaEventDestroy(begin);
    (void)cudaEventDestroy(end);
  }
}

}  // namespace
}  // namespace baton::kernel_test
