// PeerGroup's all-reduce on 2 GPUs and, where the machine has them, 4
// (skipped below 2): against a CPU sum in rank order (float, rounded once to
// the storage type), bit-exact on every rank, for sizes from one vector to
// 1 MB, both storage types, in place, 64 back-to-back calls captured in each
// rank's CUDA graph and replayed; a rank whose peer never comes gives up
// within its timeout and is reported, its output untouched; bad arguments
// are refused before anything is enqueued. Random inputs from the printed
// seed; outputs poisoned before each run.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "baton/cuda_resources.h"
#include "baton/peer_group.h"
#include "kernels/half_bits.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton::testing {
namespace {

class AllReduceTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudaGetDeviceCount(&gpus_), cudaSuccess);
    // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
    if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, an all-reduce needs 2";
    rng_.seed(TestSeed());
  }
  // The group sizes this machine can test: 2, and 4 where it has 4.
  std::vector<int> Sizes() const { return gpus_ >= 4 ? std::vector<int>{2, 4} : std::vector<int>{2}; }

  int gpus_ = 0;
  std::mt19937_64 rng_;
};

// One rank's buffers and stream on its device.
struct RankData {
  int device = 0;
  Stream stream;
  DeviceBuffer<std::uint16_t> in, out;
  std::vector<std::uint16_t> host;
};

std::vector<RankData> MakeRanks(int ranks, std::size_t count, DecoderDType dtype,
                                std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<RankData> data(ranks);
  for (int r = 0; r < ranks; ++r) {
    RankData& d = data[r];
    d.device = r;
    EXPECT_EQ(cudaSetDevice(r), cudaSuccess);
    auto stream = CreateStream();
    EXPECT_TRUE(stream.ok()) << stream.status();
    d.stream = std::move(*stream);
    d.in = *DeviceBuffer<std::uint16_t>::Create(count);
    d.out = *DeviceBuffer<std::uint16_t>::Create(count);
    d.host.resize(count);
    for (auto& h : d.host) h = FloatToHalfBits(value(rng), dtype);
    EXPECT_TRUE(d.in.CopyFrom(d.host).ok());
    EXPECT_TRUE(d.out.Fill(0xFF).ok());  // NaN in both types: an unwritten element shows
  }
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  return data;
}

// The sum every rank must hold: float, rank order, rounded once.
std::vector<std::uint16_t> Expected(const std::vector<RankData>& data, DecoderDType dtype) {
  std::vector<std::uint16_t> sum(data[0].host.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    float acc = 0.0f;
    for (const RankData& d : data) acc += HalfBitsToFloat(d.host[i], dtype);
    sum[i] = FloatToHalfBits(acc, dtype);
  }
  return sum;
}

void SyncAll(const std::vector<RankData>& data) {
  for (const RankData& d : data) {
    ASSERT_EQ(cudaSetDevice(d.device), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(d.stream.get()), cudaSuccess);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

void ExpectOutputs(const std::vector<RankData>& data, const std::vector<std::uint16_t>& expected,
                   const std::string& what) {
  for (const RankData& d : data) {
    std::vector<std::uint16_t> got(expected.size());
    ASSERT_TRUE(d.out.CopyTo(absl::MakeSpan(got)).ok());
    std::size_t wrong = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != expected[i] && wrong++ == 0) first = i;
    }
    EXPECT_EQ(wrong, 0u) << what << " rank " << d.device << ": " << wrong << " of " << got.size()
                         << " elements differ, first at " << first << " (got 0x" << std::hex
                         << got[first] << ", expected 0x" << expected[first] << std::dec << ")";
  }
}

TEST_F(AllReduceTest, EveryRankHoldsTheRankOrderSumBitExactly) {
  for (int ranks : Sizes()) {
    PeerGroupOptions options;
    for (int r = 0; r < ranks; ++r) options.devices.push_back(r);
    BATON_ASSERT_OK_AND_ASSIGN(auto group, PeerGroup::Create(options));
    for (DecoderDType dtype : {DecoderDType::kBFloat16, DecoderDType::kFloat16}) {
      // One vector; 4 KB; 64 KB; an odd number of vectors; the largest (1 MB).
      for (std::size_t count : {std::size_t{8}, std::size_t{2048}, std::size_t{32768},
                                std::size_t{8 * 12345}, options.max_bytes / 2}) {
        const std::string what = std::to_string(ranks) + " ranks, " +
                                 (dtype == DecoderDType::kBFloat16 ? "bf16" : "fp16") + ", " +
                                 std::to_string(count) + " elements";
        std::vector<RankData> data = MakeRanks(ranks, count, dtype, rng_);
        const std::vector<std::uint16_t> expected = Expected(data, dtype);
        for (int r = 0; r < ranks; ++r) {
          BATON_ASSERT_OK(group->AllReduce(r, data[r].in.data(), data[r].out.data(), count, dtype,
                                           data[r].stream.get()));
        }
        SyncAll(data);
        ExpectOutputs(data, expected, what);
        // In place: out = in, the same sum.
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(data[r].out.data(), data[r].in.data(), data[r].in.bytes(),
                               cudaMemcpyDeviceToDevice),
                    cudaSuccess);
          BATON_ASSERT_OK(group->AllReduce(r, data[r].out.data(), data[r].out.data(), count, dtype,
                                           data[r].stream.get()));
        }
        SyncAll(data);
        ExpectOutputs(data, expected, what + " (in place)");
      }
    }
    BATON_EXPECT_OK(group->CheckFaults());
    std::printf("  %d ranks: 10 sizes and types exact on every rank\n", ranks);
  }
}

TEST_F(AllReduceTest, SixtyFourCallsInEachRanksGraphReplayExactly) {
  for (int ranks : Sizes()) {
    PeerGroupOptions options;
    for (int r = 0; r < ranks; ++r) options.devices.push_back(r);
    BATON_ASSERT_OK_AND_ASSIGN(auto group, PeerGroup::Create(options));
    const std::size_t count = 16384;  // 32 KB: a decode step's activations at d_model 4096, b4
    std::vector<RankData> data = MakeRanks(ranks, count, DecoderDType::kBFloat16, rng_);
    const std::vector<std::uint16_t> expected = Expected(data, DecoderDType::kBFloat16);
    std::vector<GraphExec> graphs;
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      cudaStream_t s = data[r].stream.get();
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      for (int k = 0; k < 64; ++k) {
        BATON_ASSERT_OK(group->AllReduce(r, data[r].in.data(), data[r].out.data(), count,
                                         DecoderDType::kBFloat16, s));
      }
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
      auto exec = InstantiateGraph(graph);
      (void)cudaGraphDestroy(graph);
      ASSERT_TRUE(exec.ok()) << exec.status();
      graphs.push_back(std::move(*exec));
    }
    for (int replay = 0; replay < 5; ++replay) {
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(graphs[r].get(), data[r].stream.get()), cudaSuccess);
      }
    }
    SyncAll(data);
    ExpectOutputs(data, expected, std::to_string(ranks) + " ranks after 320 graph-launched calls");
    BATON_EXPECT_OK(group->CheckFaults());
  }
}

TEST_F(AllReduceTest, ARankWhosePeerNeverComesGivesUpAndIsReported) {
  PeerGroupOptions options;
  options.devices = {0, 1};
  options.wait_timeout = absl::Milliseconds(50);
  BATON_ASSERT_OK_AND_ASSIGN(auto group, PeerGroup::Create(options));
  std::vector<RankData> data = MakeRanks(2, 4096, DecoderDType::kBFloat16, rng_);
  // Rank 1 never calls.
  BATON_ASSERT_OK(group->AllReduce(0, data[0].in.data(), data[0].out.data(), 4096,
                                   DecoderDType::kBFloat16, data[0].stream.get()));
  SyncAll(data);
  const absl::Status fault = group->CheckFaults();
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal) << fault;
  EXPECT_NE(fault.message().find("rank(s) 0 gave up waiting"), std::string::npos) << fault;
  std::vector<std::uint16_t> out(4096);
  ASSERT_TRUE(data[0].out.CopyTo(absl::MakeSpan(out)).ok());
  for (std::uint16_t x : out) ASSERT_EQ(x, 0xFFFF) << "the output was written without the peer";
}

TEST_F(AllReduceTest, BadArgumentsAreRefusedBeforeAnyLaunch) {
  PeerGroupOptions options;
  options.devices = {0, 1};
  options.max_bytes = 4096;
  BATON_ASSERT_OK_AND_ASSIGN(auto group, PeerGroup::Create(options));
  std::vector<RankData> data = MakeRanks(2, 4096, DecoderDType::kBFloat16, rng_);
  const auto code = [&](int rank, const void* in, void* out, std::size_t count) {
    return group->AllReduce(rank, in, out, count, DecoderDType::kBFloat16, data[0].stream.get())
        .code();
  };
  void* in = data[0].in.data();
  void* out = data[0].out.data();
  EXPECT_EQ(code(2, in, out, 8), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(-1, in, out, 8), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(0, in, out, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(0, in, out, 12), absl::StatusCode::kInvalidArgument);    // not whole vectors
  EXPECT_EQ(code(0, in, out, 2056), absl::StatusCode::kInvalidArgument);  // past max_bytes
  EXPECT_EQ(code(0, static_cast<char*>(in) + 2, out, 8), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(0, nullptr, out, 8), absl::StatusCode::kInvalidArgument);
  SyncAll(data);
  BATON_EXPECT_OK(group->CheckFaults());  // nothing ran, nothing waits

  options.devices = {0, gpus_};
  const auto missing = PeerGroup::Create(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition) << missing.status();
}

}  // namespace
}  // namespace baton::testing
