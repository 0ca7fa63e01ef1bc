// A model split across GPUs 0..n-1 for the samples (--tp n): one
// DecoderModel per rank holding its slices (baton/decoder_model.h,
// TensorParallelOptions), their PeerGroup sized for the model's largest
// exchange (TensorParallelExchangeBytes), and, to run them from the device,
// one Runtime per rank with their schedulers in lockstep
// (baton/lockstep_group.h). n = 1: one model on the current GPU and one plain
// Runtime, as the samples always ran. What baton::Server does for a served
// model, for programs that time the model and runtime directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "baton/lockstep_group.h"
#include "baton/peer_group.h"
#include "baton/runtime.h"

namespace baton::samples {

struct ModelRanks {
  ModelRanks() = default;
  ModelRanks(ModelRanks&&) = default;
  ModelRanks& operator=(ModelRanks&&) = default;
  ~ModelRanks();  // each rank's model freed on its GPU

  std::shared_ptr<const PeerGroup> peers;  // null at n = 1
  std::vector<std::unique_ptr<DecoderModel>> models;
  std::vector<int> devices;

  [[nodiscard]] int size() const { return static_cast<int>(models.size()); }
  // Rank 0: its tables hold the tokens, its step clock the steps.
  [[nodiscard]] DecoderModel& lead() const { return *models[0]; }
  // Every rank's MakeStepProgram(buckets), each made on its GPU.
  [[nodiscard]] std::vector<StepProgram> Programs(const std::vector<std::uint32_t>& buckets = {});
  // Writes `requests` into every rank's table (entries 0..), each on its GPU.
  [[nodiscard]] absl::Status WriteRequests(const std::vector<DecodeRequest>& requests);
  // OK, or the PeerGroup's faults (n > 1).
  [[nodiscard]] absl::Status CheckFaults() const;
};

// Creates every rank's model at once, a thread each (each draws or reads its
// own slices). The group's exchange holds `exchange_bytes` (0: the model's
// own, TensorParallelExchangeBytes). FailedPrecondition when fewer than n
// GPUs are visible. Rank 0's GPU is current on return.
[[nodiscard]] absl::StatusOr<ModelRanks> LoadRanks(const DecoderModelOptions& options, int n,
                                                   std::size_t exchange_bytes = 0);

// One engine's runtimes over the ranks: rank r's Runtime on its GPU with its
// program (lockstep rank r of a group of their own at n > 1). Rank 0's takes
// the work. A lockstep group runs once: after Stop, make new RankRuntimes
// (a restarted group is not a path the tests cover). Runtimes of two groups
// must not be running on the same GPUs at once: building one group's graphs
// there can wait for the other's spinning followers (Runtime::Prepare).
class RankRuntimes {
 public:
  // Creates, registers and prepares every rank's runtime (`options` each).
  [[nodiscard]] static absl::StatusOr<RankRuntimes> Create(
      ModelRanks& ranks, const RuntimeOptions& options, Engine engine,
      const std::vector<std::uint32_t>& buckets = {});
  RankRuntimes(RankRuntimes&&) = default;
  RankRuntimes& operator=(RankRuntimes&&) = default;
  ~RankRuntimes();  // each destroyed on its GPU

  // The followers, then rank 0. FailedPrecondition for a second Start at n > 1.
  [[nodiscard]] absl::Status Start();
  // Rank 0 (Stop drains, Abort ends at the next step boundary), then the
  // followers (aborted if rank 0 failed); rank 0's report. At n > 1 a
  // failure names its rank.
  [[nodiscard]] absl::StatusOr<StopReport> Stop(bool abort = false);

  [[nodiscard]] Runtime& lead() const { return *runtimes_[0]; }
  [[nodiscard]] bool running() const { return runtimes_[0]->running(); }

 private:
  RankRuntimes() = default;
  std::vector<int> devices_;
  Engine engine_ = Engine::kTailLaunch;
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  bool started_ = false;
};

}  // namespace baton::samples
