// Tensor parallelism (baton/decoder_model.h, TensorParallelOptions): one
// model over 2 and 4 GPUs, each rank a DecoderModel holding its share of the
// weights and KV cache, driven by one host loop that decides every step and
// launches it on every rank (support/host_decode_loop.h, CreateRanks).
//
// What the split promises, checked on fresh random weights and requests:
//  - every rank chooses the same tokens and holds the same logits, bit for
//    bit (the all-reduce sums in rank order; every rank selects from the
//    same gathered row);
//  - the tokens are the model's: teacher-forced against the CPU reference of
//    the whole model in double, under the near-tie rule, on every projection
//    path the buckets take (Baton's GEMV, its wide GEMV and cuBLASLt under
//    kAuto; Baton's GEMV and GEMM under kBatonGemv), greedy and sampled;
//  - a rank whose peers never arrive gives up within the group's
//    wait_timeout and is named by CheckFaults (no GPU hang);
//  - refusals name the option and the fix.
//  - the device schedulers in lockstep (baton/lockstep_group.h) choose the
//    host loop's tokens on every rank, on the tail-launch and conditional
//    engines; a follower that aborts mid-run stops rank 0 naming it, and
//    nothing is lost;
// Skips that start with "multi-GPU:" are counted apart by the suite.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "baton/decoder_model.h"
#include "baton/lockstep_group.h"
#include "baton/peer_group.h"
#include "baton/runtime.h"
#include "kernels/decoder_weights.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/host_decode_loop.h"
#include "support/model_reference.h"
#include "support/poll.h"

namespace baton::testing {
namespace {

class DecoderTensorParallelTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudaGetDeviceCount(&gpus_), cudaSuccess);
    // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
    if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, tensor parallelism needs 2";
  }
  void TearDown() override {
    (void)cudaSetDevice(0);
    GpuTest::TearDown();
  }
  std::vector<int> Sizes() const {
    return gpus_ >= 4 ? std::vector<int>{2, 4} : std::vector<int>{2};
  }

  static std::shared_ptr<const PeerGroup> Group(int size, absl::Duration timeout) {
    PeerGroupOptions options;
    for (int d = 0; d < size; ++d) options.devices.push_back(d);
    options.max_bytes = 1u << 20;
    options.wait_timeout = timeout;
    auto group = PeerGroup::Create(options);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::shared_ptr<const PeerGroup>(std::move(*group)) : nullptr;
  }

  // The split model's options: `max_batch` rows a step at most `tokens` rows
  // (chunks), `without_decodes` rows when no request decodes, `requests`
  // entries, fresh weights.
  static DecoderModelOptions SplitOptions(std::uint32_t max_batch, std::uint32_t tokens,
                                          std::uint32_t without_decodes, std::uint32_t requests) {
    DecoderModelOptions options;
    options.config = SplitDecoderConfig();
    options.weight_seed = Rng()();
    options.max_batch = max_batch;
    options.max_tokens_per_step = tokens;
    options.max_tokens_without_decodes = without_decodes;
    options.max_requests = requests;
    return options;
  }

  // Each rank's Runtime on its GPU (the model's program over `buckets`, or its
  // own with none), the device schedulers in lockstep (rank 0 waiting up to
  // `patience` for a follower), every rank's graphs for `engine` built before
  // any loop runs (Runtime::Prepare); none started. Empty on a failure.
  static std::vector<std::unique_ptr<Runtime>> LockstepRuntimes(
      const std::vector<std::unique_ptr<DecoderModel>>& ranks, const DecoderModelOptions& options,
      const std::vector<std::uint32_t>& buckets, Engine engine, absl::Duration patience) {
    LockstepGroupOptions lockstep;
    for (const auto& rank : ranks) lockstep.devices.push_back(rank->device());
    lockstep.max_batch = options.max_batch;
    lockstep.max_tokens = options.tokens().max_rows();
    lockstep.patience = patience;
    auto steps = LockstepGroup::Create(lockstep);
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (!steps.ok()) return {};
    std::vector<std::unique_ptr<Runtime>> runtimes;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      EXPECT_EQ(cudaSetDevice(lockstep.devices[r]), cudaSuccess);
      RuntimeOptions o;
      o.lockstep = *steps;
      o.lockstep_rank = static_cast<int>(r);
      o.mailbox_capacity = 256;
      auto runtime = Runtime::Create(o);
      EXPECT_TRUE(runtime.ok()) << "rank " << r << ": " << runtime.status();
      if (!runtime.ok()) return {};
      const absl::Status ready = (*runtime)->RegisterStepProgram(
          buckets.empty() ? ranks[r]->MakeStepProgram() : ranks[r]->MakeStepProgram(buckets));
      EXPECT_TRUE(ready.ok()) << "rank " << r << ": " << ready;
      const absl::Status prepared = (*runtime)->Prepare(engine);
      EXPECT_TRUE(prepared.ok()) << "rank " << r << ": " << prepared;
      if (!ready.ok() || !prepared.ok()) return {};
      runtimes.push_back(std::move(*runtime));
    }
    return runtimes;
  }

  // One model per rank of `group`.
  static std::vector<std::unique_ptr<DecoderModel>> Ranks(DecoderModelOptions options,
                                                          std::shared_ptr<const PeerGroup> group) {
    std::vector<std::unique_ptr<DecoderModel>> models;
    for (int r = 0; r < group->ranks(); ++r) {
      options.tensor_parallel = {group, r};
      auto model = DecoderModel::Create(options);
      EXPECT_TRUE(model.ok()) << "rank " << r << ": " << model.status();
      if (!model.ok()) return {};
      models.push_back(std::move(*model));
    }
    return models;
  }

  int gpus_ = 0;
};

TEST_F(DecoderTensorParallelTest, EveryRankChoosesTheWholeModelsTokens) {
  const std::vector<std::uint32_t> buckets = {1, 2, 4, 8, 16, 32, 64};
  for (int size : Sizes()) {
    for (DecoderGemm gemm : {DecoderGemm::kAuto, DecoderGemm::kBatonGemv}) {
      for (float temperature : {0.0f, 1.0f}) {
        const std::string label = "TP" + std::to_string(size) +
                                  (gemm == DecoderGemm::kAuto ? ", kAuto" : ", kBatonGemv") +
                                  (temperature > 0.0f ? ", sampled" : ", greedy");
        SCOPED_TRACE(label);
        DecoderModelOptions options;
        options.config = SplitDecoderConfig();
        options.weight_seed = Rng()();
        options.max_batch = 16;  // decode buckets 1-16: the GEMV, then the wide GEMV (kAuto)
        options.max_tokens_per_step = 48;  // chunk steps of 32 and 64 rows
        options.max_tokens_without_decodes = 64;
        options.max_requests = 64;
        options.gemm = gemm;
        options.sampling = SamplingParams{temperature, Rng()()};
        auto group = Group(size, absl::Seconds(10));
        ASSERT_NE(group, nullptr);
        auto ranks = Ranks(options, group);
        ASSERT_EQ(static_cast<int>(ranks.size()), size);
        std::vector<StepProgram> programs;
        std::vector<int> devices;
        for (int r = 0; r < size; ++r) {
          programs.push_back(ranks[r]->MakeStepProgram(buckets));
          devices.push_back(ranks[r]->device());
          EXPECT_EQ(devices.back(), group->device(r));
        }
        std::vector<DecodeRequest> requests = RandomRequests(options.config, 48);
        for (DecodeRequest& r : requests) {  // long enough prompts for chunk steps too
          const std::vector<std::int32_t> more = RandomPrompt(options.config, Uniform(0, 40));
          r.prompt.insert(r.prompt.end(), more.begin(), more.end());
        }
        for (int r = 0; r < size; ++r) {
          ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
          ASSERT_TRUE(ranks[r]->WriteRequests(0, requests).ok());
        }
        BATON_ASSERT_OK_AND_ASSIGN(auto loop, HostDecodeLoop::CreateRanks(programs, devices));
        std::vector<WorkItem> items;
        for (std::uint32_t i = 0; i < requests.size(); ++i)
          items.push_back(ranks[0]->WorkItemFor(i));
        const auto started = std::chrono::steady_clock::now();
        BATON_ASSERT_OK_AND_ASSIGN(std::vector<Completion> completions, loop->Run(items));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        ASSERT_TRUE(group->CheckFaults().ok()) << group->CheckFaults();
        std::map<std::uint32_t, Outcome> outcomes;
        for (const Completion& c : completions) Account(c, requests.size(), outcomes);
        ASSERT_EQ(outcomes.size(), requests.size());
        ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
        ReadTokens(*ranks[0], requests, outcomes);
        CheckCompletionRules(outcomes, requests, label, options.max_tokens_without_decodes);

        // Every other rank generated the same tokens and holds the last
        // step's logits bit for bit.
        BATON_ASSERT_OK_AND_ASSIGN(std::vector<float> logits0, ranks[0]->ReadLogits(0));
        for (int r = 1; r < size; ++r) {
          ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
          std::map<std::uint32_t, Outcome> theirs = outcomes;
          ReadTokens(*ranks[r], requests, theirs);
          for (const auto& [entry, o] : outcomes) {
            EXPECT_EQ(theirs[entry].tokens, o.tokens) << "rank " << r << ", entry " << entry;
          }
          BATON_ASSERT_OK_AND_ASSIGN(std::vector<float> logits, ranks[r]->ReadLogits(0));
          ASSERT_EQ(logits.size(), logits0.size());
          for (std::size_t i = 0; i < logits.size(); ++i) {
            ASSERT_EQ(std::memcmp(&logits[i], &logits0[i], sizeof(float)), 0)
                << "rank " << r << ", logit " << i << ": " << logits[i] << " vs " << logits0[i];
          }
        }
        ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);

        // The whole model's tokens, teacher-forced in double.
        BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                                   GenerateDecoderWeights(options.config, options.weight_seed));
        reference::ReferenceDecoder cpu(weights);
        int ties = 0, tokens = 0;
        for (const auto& [entry, o] : outcomes) {
          ties += CheckAgainstReference(cpu, requests[entry], o.tokens, options.sampling,
                                        label + ", entry " + std::to_string(entry));
          tokens += static_cast<int>(o.tokens.size());
        }
        std::printf("  %s: %zu requests, %d tokens in %llu steps (%.2f s), %d near-ties\n",
                    label.c_str(), requests.size(), tokens,
                    static_cast<unsigned long long>(loop->steps()), seconds, ties);
        EXPECT_LE(ties, tokens / 20) << "near-ties should be rare";
      }
    }
  }
}

// The device schedulers in lockstep (baton/lockstep_group.h): each rank a
// Runtime on its GPU, rank 0 deciding every step on the device and the others
// following it, on the tail-launch and conditional engines. Every request
// submitted before the start, so the schedule is the one a host loop deciding
// for every rank replays: the same steps, buckets and bits, so exactly the
// host loop's tokens (whose tokens the test above checks against the CPU
// reference), on every rank.
TEST_F(DecoderTensorParallelTest, DeviceSchedulersInLockstepChooseTheHostLoopsTokens) {
  const std::vector<std::uint32_t> buckets = {1, 2, 4, 8, 16, 32, 64};  // steps of up to 64 rows
  for (int size : Sizes()) {
    for (Engine engine : {Engine::kTailLaunch, Engine::kConditional}) {
      const std::string label = "TP" + std::to_string(size) + ", " + EngineName(engine);
      SCOPED_TRACE(label);
      DecoderModelOptions options = SplitOptions(16, 48, 64, 64);
      options.sampling = SamplingParams{1.0f, Rng()()};
      std::vector<DecodeRequest> requests = RandomRequests(options.config, 40);
      for (DecodeRequest& r : requests) {
        const std::vector<std::int32_t> more = RandomPrompt(options.config, Uniform(0, 40));
        r.prompt.insert(r.prompt.end(), more.begin(), more.end());
      }
      std::vector<WorkItem> items;
      // Each run gets fresh ranks (the same weights), each rank every request.
      const auto make_ranks = [&](std::shared_ptr<const PeerGroup> group) {
        auto ranks = Ranks(options, group);
        for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
          EXPECT_EQ(cudaSetDevice(ranks[r]->device()), cudaSuccess);
          EXPECT_TRUE(ranks[r]->WriteRequests(0, requests).ok());
        }
        items.clear();
        for (std::uint32_t i = 0; i < requests.size(); ++i) {
          items.push_back(ranks.empty() ? WorkItem{} : ranks[0]->WorkItemFor(i));
        }
        return ranks;
      };
      // The host loop's tokens.
      auto host_group = Group(size, absl::Seconds(10));
      ASSERT_NE(host_group, nullptr);
      auto host_ranks = make_ranks(host_group);
      ASSERT_EQ(static_cast<int>(host_ranks.size()), size);
      std::vector<StepProgram> programs;
      std::vector<int> devices;
      for (auto& rank : host_ranks) {
        programs.push_back(rank->MakeStepProgram(buckets));
        devices.push_back(rank->device());
      }
      BATON_ASSERT_OK_AND_ASSIGN(auto loop, HostDecodeLoop::CreateRanks(programs, devices));
      BATON_ASSERT_OK_AND_ASSIGN(std::vector<Completion> host_done, loop->Run(items));
      std::map<std::uint32_t, Outcome> host;
      for (const Completion& c : host_done) Account(c, requests.size(), host);
      ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
      ReadTokens(*host_ranks[0], requests, host);

      // The device schedulers in lockstep.
      auto group = Group(size, absl::Seconds(10));
      ASSERT_NE(group, nullptr);
      auto ranks = make_ranks(group);
      ASSERT_EQ(static_cast<int>(ranks.size()), size);
      auto runtimes = LockstepRuntimes(ranks, options, buckets, engine, absl::Seconds(5));
      ASSERT_EQ(static_cast<int>(runtimes.size()), size);
      for (int r = 1; r < size; ++r) {
        ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
        BATON_ASSERT_OK(runtimes[r]->Start(engine));
      }
      ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
      BATON_ASSERT_OK(runtimes[0]->Submit(items));
      BATON_ASSERT_OK(runtimes[0]->Start(engine));
      std::map<std::uint32_t, Outcome> device;
      const Polled polled =
          PollCompletions(*runtimes[0], requests.size(), {std::chrono::seconds(60), 64},
                          [&](const Completion& c) { Account(c, requests.size(), device); });
      BATON_ASSERT_OK(polled.failure);
      ASSERT_EQ(polled.completions, requests.size());
      BATON_ASSERT_OK(runtimes[0]->Stop().status());
      for (int r = 1; r < size; ++r) {
        ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
        BATON_ASSERT_OK(runtimes[r]->Stop().status());
      }
      ASSERT_TRUE(group->CheckFaults().ok()) << group->CheckFaults();
      for (int r = 0; r < size; ++r) {
        ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
        std::map<std::uint32_t, Outcome> theirs = device;
        ReadTokens(*ranks[r], requests, theirs);
        for (const auto& [entry, o] : host) {
          ASSERT_EQ(theirs[entry].tokens, o.tokens) << "rank " << r << ", entry " << entry;
        }
      }
      ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
      std::printf("  %s: %zu requests, the host loop's tokens on every rank (%llu steps)\n",
                  label.c_str(), requests.size(),
                  static_cast<unsigned long long>(runtimes[0]->stats().steps));
      for (int r = size - 1; r >= 0; --r) {  // followers last out: each on its own GPU
        ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
        runtimes[r].reset();
      }
      ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
    }
  }
}

// A fault injected on one rank while the device schedulers run in lockstep:
// rank 1 aborts mid-run (its loop leaves at its next step boundary, though
// rank 0 keeps publishing). Rank 0, which may be inside a step's all-reduce
// waiting for rank 1, gives up within the PeerGroup's wait_timeout, then
// finds the channel's fault: its Poll reports Aborted naming rank 1 within
// a bound, and its Abort hands back every request that did not complete.
TEST_F(DecoderTensorParallelTest, AFollowerAbortingMidRunStopsRankZeroNamingItAndLosesNothing) {
  constexpr int kSize = 2;
  DecoderModelOptions options = SplitOptions(16, 48, 64, 64);
  auto group = Group(kSize, absl::Milliseconds(500));
  ASSERT_NE(group, nullptr);
  auto ranks = Ranks(options, group);
  ASSERT_EQ(static_cast<int>(ranks.size()), kSize);
  // More requests than a batch holds, so work is queued when the fault comes.
  const std::vector<DecodeRequest> requests = RandomRequests(options.config, 48);
  std::vector<int> devices;
  for (auto& rank : ranks) {
    ASSERT_EQ(cudaSetDevice(rank->device()), cudaSuccess);
    ASSERT_TRUE(rank->WriteRequests(0, requests).ok());
    devices.push_back(rank->device());
  }
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(ranks[0]->WorkItemFor(i));
  auto runtimes = LockstepRuntimes(ranks, options, {}, Engine::kTailLaunch, absl::Seconds(1));
  ASSERT_EQ(static_cast<int>(runtimes.size()), kSize);
  ASSERT_EQ(cudaSetDevice(devices[1]), cudaSuccess);
  BATON_ASSERT_OK(runtimes[1]->Start(Engine::kTailLaunch));
  ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
  BATON_ASSERT_OK(runtimes[0]->Submit(items));
  BATON_ASSERT_OK(runtimes[0]->Start(Engine::kTailLaunch));
  // A few steps first.
  std::size_t completed = 0;
  const auto counted = [&completed](const Completion&) { ++completed; };
  BATON_ASSERT_OK(PollUntil(
      *runtimes[0], [&] { return runtimes[0]->stats().steps >= 8; }, counted));
  ASSERT_EQ(cudaSetDevice(devices[1]), cudaSuccess);
  const auto injected = std::chrono::steady_clock::now();
  BATON_ASSERT_OK(runtimes[1]->Abort().status());
  ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
  absl::Status failure;
  const Deadline deadline(std::chrono::seconds(20));
  std::vector<Completion> out(64);
  while (failure.ok() && !deadline.passed()) {
    const absl::StatusOr<std::size_t> n = runtimes[0]->Poll(absl::MakeSpan(out));
    if (n.ok()) completed += *n;
    if (!n.ok()) failure = n.status();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - injected).count();
  EXPECT_EQ(failure.code(), absl::StatusCode::kAborted) << failure;
  EXPECT_NE(failure.message().find("rank 1"), absl::string_view::npos) << failure;
  // At most a step, the all-reduce's wait_timeout and rank 0's patience.
  EXPECT_LT(seconds, 0.5 + 1.0 + 2.0) << failure;
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtimes[0]->Abort());
  EXPECT_EQ(completed + report.completions.size() + report.in_flight.size() + report.still_queued,
            items.size())
      << "requests lost: " << completed << " completed, " << report.in_flight.size()
      << " in flight, " << report.still_queued << " queued";
  EXPECT_LT(completed + report.completions.size(), items.size()) << "the fault came after the end";
  std::printf(
      "  fault on rank 1: rank 0 stopped %.3f s later naming it; %zu completed, %zu in "
      "flight, %llu queued\n",
      seconds, completed + report.completions.size(), report.in_flight.size(),
      static_cast<unsigned long long>(report.still_queued));
  for (int r = kSize - 1; r >= 0; --r) {
    ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
    runtimes[r].reset();
  }
  ASSERT_EQ(cudaSetDevice(devices[0]), cudaSuccess);
}

TEST_F(DecoderTensorParallelTest, ARankWhosePeersNeverComeFaultsInsteadOfHanging) {
  DecoderModelOptions options = SplitOptions(4, 16, 0, 8);
  options.gemm = DecoderGemm::kBatonGemv;
  auto group = Group(2, absl::Milliseconds(200));
  ASSERT_NE(group, nullptr);
  auto ranks = Ranks(options, group);
  ASSERT_EQ(ranks.size(), 2u);
  // Rank 0 runs alone: its loop never launches rank 1.
  ASSERT_EQ(cudaSetDevice(ranks[0]->device()), cudaSuccess);
  const std::vector<DecodeRequest> requests = RandomRequests(options.config, 4);
  ASSERT_TRUE(ranks[0]->WriteRequests(0, requests).ok());
  BATON_ASSERT_OK_AND_ASSIGN(
      auto loop, HostDecodeLoop::CreateRanks({ranks[0]->MakeStepProgram({1, 2, 4, 8, 16})},
                                             {ranks[0]->device()}));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(ranks[0]->WorkItemFor(i));
  const auto started = std::chrono::steady_clock::now();
  const auto run = loop->Run(items);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_TRUE(run.ok()) << run.status();
  // One wait gives up; every later exchange of the faulted rank returns at once.
  EXPECT_LT(seconds, 5.0) << "the faulted rank kept waiting";
  const absl::Status faults = group->CheckFaults();
  EXPECT_EQ(faults.code(), absl::StatusCode::kInternal) << faults;
  EXPECT_TRUE(absl::StrContains(faults.message(), "rank(s) 0 gave up")) << faults;
  std::printf("  rank 0 alone: %zu requests ran to their end in %.2f s, then: %s\n",
              requests.size(), seconds, std::string(faults.message()).c_str());
}

TEST_F(DecoderTensorParallelTest, RefusalsNameTheOptionAndTheFix) {
  DecoderModelOptions options;
  options.config = SplitDecoderConfig();
  options.max_batch = 4;
  options.max_tokens_per_step = 16;
  options.max_tokens_without_decodes = 0;
  options.max_requests = 4;
  auto group = Group(2, absl::Seconds(5));
  ASSERT_NE(group, nullptr);

  options.tensor_parallel = {group, 2};
  auto rank = DecoderModel::Create(options);
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(rank.status().message(), "tensor_parallel.rank is 2"))
      << rank.status();

  DecoderModelOptions mqa = options;  // one key/value head does not split
  mqa.config.kv_heads = 1;
  mqa.tensor_parallel = {group, 0};
  auto split = DecoderModel::Create(mqa);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(split.status().message(), "key/value heads (1) do not divide"))
      << split.status();

  PeerGroupOptions small;
  small.devices = {0, 1};
  small.max_bytes = 1024;  // 16 rows of 128 need 4096 bytes
  BATON_ASSERT_OK_AND_ASSIGN(std::unique_ptr<PeerGroup> tiny, PeerGroup::Create(small));
  DecoderModelOptions staged = options;
  staged.tensor_parallel = {std::shared_ptr<const PeerGroup>(std::move(tiny)), 0};
  auto bytes = DecoderModel::Create(staged);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bytes.status().message(), "PeerGroupOptions::max_bytes >= "))
      << bytes.status();

  // A rank's steps run on its own GPU only.
  options.tensor_parallel = {group, 1};
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  EXPECT_EQ(model->device(), group->device(1));
  ASSERT_EQ(cudaSetDevice(group->device(0)), cudaSuccess);
  StepContext ctx;
  ctx.bucket_size = 1;
  ctx.args.max_batch = options.max_batch;
  const absl::Status wrong = model->EnqueueStep(ctx, nullptr);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(wrong.message(), "cudaSetDevice(model->device())")) << wrong;
}

}  // namespace
}  // namespace baton::testing
