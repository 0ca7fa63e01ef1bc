// ServerOptions::tensor_parallel_size (baton/server.h): one Server over a
// model split 2 (and, with 4 GPUs, 4) ways, each rank's DecoderModel and
// Runtime on its GPU, the ranks' device schedulers in lockstep. Requests
// sampled at temperature 1 and all submitted in one call (the first decision
// admits them together), so the schedule is the one a host loop deciding
// every step for every rank replays (support/host_decode_loop.h), and every
// request's events must give exactly that loop's tokens (whose tokens
// decoder_tp_gpu_test checks against the CPU reference), in order, finishing
// once; Close ends every rank, on the conditional and tail-launch engines.
// More ranks than GPUs is refused naming both. Skips that start with
// "multi-GPU:" are counted apart by the suite.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/server.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/host_decode_loop.h"

namespace baton::testing {
namespace {

DecoderModelOptions ModelOptions() {
  DecoderModelOptions options;
  options.config = SplitDecoderConfig();
  options.weight_seed = Rng()();
  options.max_batch = 16;
  options.max_tokens_per_step = 48;
  options.max_tokens_without_decodes = 64;
  options.max_requests = 64;
  options.sampling = SamplingParams{1.0f, Rng()()};
  return options;
}

class ServerTensorParallelTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudaGetDeviceCount(&gpus_), cudaSuccess);
  }
  void TearDown() override {
    (void)cudaSetDevice(0);
    GpuTest::TearDown();
  }

  // The tokens of `requests` (entries 0..n-1) on `size` ranks driven by one
  // host loop, by entry.
  std::map<std::uint32_t, std::vector<std::int32_t>> HostLoopTokens(
      const DecoderModelOptions& options, int size, const std::vector<DecodeRequest>& requests) {
    std::map<std::uint32_t, std::vector<std::int32_t>> tokens;
    PeerGroupOptions peers;
    for (int d = 0; d < size; ++d) peers.devices.push_back(d);
    auto bytes = TensorParallelExchangeBytes(options, size);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return tokens;
    peers.max_bytes = *bytes;
    auto made = PeerGroup::Create(peers);
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return tokens;
    std::shared_ptr<const PeerGroup> group(std::move(*made));
    std::vector<std::unique_ptr<DecoderModel>> ranks;
    std::vector<StepProgram> programs;
    for (int r = 0; r < size; ++r) {
      DecoderModelOptions rank = options;
      rank.tensor_parallel = {group, r};
      auto model = DecoderModel::Create(rank);
      EXPECT_TRUE(model.ok()) << "rank " << r << ": " << model.status();
      if (!model.ok()) return tokens;
      EXPECT_TRUE((*model)->WriteRequests(0, requests).ok());
      programs.push_back((*model)->MakeStepProgram());
      ranks.push_back(std::move(*model));
    }
    std::vector<WorkItem> items;
    for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(ranks[0]->WorkItemFor(i));
    auto loop = HostDecodeLoop::CreateRanks(programs, peers.devices);
    EXPECT_TRUE(loop.ok()) << loop.status();
    if (!loop.ok()) return tokens;
    auto done = (*loop)->Run(items);
    EXPECT_TRUE(done.ok()) << done.status();
    if (!done.ok()) return tokens;
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    for (const Completion& c : *done) {
      auto generated = ranks[0]->ReadGenerated(c.id, c.value);
      EXPECT_TRUE(generated.ok()) << generated.status();
      if (generated.ok()) tokens[c.id] = *generated;
    }
    return tokens;
  }

  int gpus_ = 0;
};

TEST_F(ServerTensorParallelTest, EveryRequestGetsTheHostLoopsTokensOnEveryEngine) {
  // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
  if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, tensor parallelism needs 2";
  const std::vector<int> sizes = gpus_ >= 4 ? std::vector<int>{2, 4} : std::vector<int>{2};
  for (int size : sizes) {
    for (Engine engine : {Engine::kConditional, Engine::kTailLaunch}) {
      SCOPED_TRACE("TP" + std::to_string(size) + ", " + EngineName(engine));
      ServerOptions options;
      options.model = ModelOptions();
      options.engine = engine;
      options.tensor_parallel_size = size;
      std::vector<DecodeRequest> requests = RandomRequests(options.model.config, 16);
      for (DecodeRequest& r : requests) {
        const std::vector<std::int32_t> more = RandomPrompt(options.model.config, Uniform(0, 40));
        r.prompt.insert(r.prompt.end(), more.begin(), more.end());
      }
      const auto want = HostLoopTokens(options.model, size, requests);
      ASSERT_EQ(want.size(), requests.size());

      BATON_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Server> server, Server::Create(options));
      BATON_ASSERT_OK_AND_ASSIGN(const std::vector<std::uint64_t> ids, server->Submit(requests));
      std::map<std::uint64_t, std::vector<std::int32_t>> got;
      std::map<std::uint64_t, int> finished;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (server->pending() > 0 && std::chrono::steady_clock::now() < deadline) {
        BATON_ASSERT_OK_AND_ASSIGN(const std::vector<ServerEvent> events,
                                   server->Poll(absl::Milliseconds(20)));
        for (const ServerEvent& e : events) {
          ASSERT_EQ(finished[e.id], 0) << "request " << e.id << ": an event after its last";
          got[e.id].insert(got[e.id].end(), e.tokens.begin(), e.tokens.end());
          if (e.finished) ++finished[e.id];
        }
      }
      ASSERT_EQ(server->pending(), 0u) << "requests unfinished after 60 s";
      for (std::uint32_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(finished[ids[i]], 1) << "request " << i;
        EXPECT_EQ(got[ids[i]], want.at(i)) << "request " << i << ": not the host loop's tokens";
      }
      BATON_EXPECT_OK(server->Close());
      std::printf("  TP%d, %s: %zu requests, the host loop's tokens, %llu steps\n", size,
                  EngineName(engine), requests.size(),
                  static_cast<unsigned long long>(server->stats().steps));
    }
  }
}

TEST_F(ServerTensorParallelTest, MoreRanksThanGpusIsRefusedNamingBoth) {
  if (gpus_ >= kMaxPeerRanks) GTEST_SKIP() << "every rank count up to the most fits";
  ServerOptions options;
  options.model = ModelOptions();
  options.tensor_parallel_size = gpus_ + 1;
  const absl::Status refused = Server::Create(options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("tensor_parallel_size is " + std::to_string(gpus_ + 1)),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find(std::to_string(gpus_) + " GPU(s) are visible"),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace baton::testing
