// samples/common/ranks.h: the samples' split models and their runtimes.
#include "common/ranks.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/server.h"
#include "baton/status.h"

namespace baton::samples {
namespace {

// `status` with "rank r: " before its message when the model is split
// across n > 1 ranks (OK stays OK; one GPU's messages stay as they were).
absl::Status Named(int r, int n, const absl::Status& status) {
  if (status.ok() || n == 1) return status;
  return absl::Status(status.code(), absl::StrCat("rank ", r, ": ", status.message()));
}

}  // namespace

ModelRanks::~ModelRanks() {
  for (std::size_t r = models.size(); r-- > 0;) {
    if (models[r] == nullptr) continue;
    if (r < devices.size()) (void)cudaSetDevice(devices[r]);
    models[r].reset();
  }
  if (!devices.empty()) (void)cudaSetDevice(devices[0]);
}

std::vector<StepProgram> ModelRanks::Programs(const std::vector<std::uint32_t>& buckets) {
  std::vector<StepProgram> programs;
  for (int r = 0; r < size(); ++r) {
    (void)cudaSetDevice(devices[r]);
    programs.push_back(models[r]->MakeStepProgram(buckets));
  }
  (void)cudaSetDevice(devices[0]);
  return programs;
}

absl::Status ModelRanks::WriteRequests(const std::vector<DecodeRequest>& requests) {
  for (int r = 0; r < size(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[r]));
    BATON_RETURN_IF_ERROR(Named(r, size(), models[r]->WriteRequests(0, requests)));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[0]));
  return absl::OkStatus();
}

absl::Status ModelRanks::CheckFaults() const {
  return peers == nullptr ? absl::OkStatus() : peers->CheckFaults();
}

absl::StatusOr<ModelRanks> LoadRanks(const DecoderModelOptions& options, int n,
                                     std::size_t exchange_bytes) {
  if (n < 1 || n > kMaxPeerRanks) {
    return absl::InvalidArgumentError(absl::StrCat("--tp=", n, ": use 1 to ", kMaxPeerRanks));
  }
  ModelRanks ranks;
  if (n > 1) {
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) {  // no driver or no GPU: none visible
      (void)cudaGetLastError();
      gpus = 0;
    }
    if (gpus < n) {
      return absl::FailedPreconditionError(
          absl::StrCat("--tp=", n, ": ", gpus, " GPU(s) are visible; use at most ", gpus));
    }
    PeerGroupOptions peers;
    for (int d = 0; d < n; ++d) peers.devices.push_back(d);
    if (exchange_bytes != 0) {
      peers.max_bytes = exchange_bytes;
    } else {
      BATON_ASSIGN_OR_RETURN(peers.max_bytes, TensorParallelExchangeBytes(options, n));
    }
    peers.wait_timeout = absl::Seconds(30);  // a rank loading or capturing late is no fault
    BATON_ASSIGN_OR_RETURN(ranks.peers, PeerGroup::Create(peers));
  }
  int current = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  ranks.models.resize(n);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r]() {
      statuses[r] = [&]() -> absl::Status {
        DecoderModelOptions rank = options;
        if (n > 1) rank.tensor_parallel = {ranks.peers, r};
        BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(n > 1 ? r : current));
        BATON_ASSIGN_OR_RETURN(ranks.models[r], DecoderModel::Create(rank));
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    BATON_RETURN_IF_ERROR(Named(r, n, statuses[r]));
    ranks.devices.push_back(ranks.models[r]->device());
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks.devices[0]));
  return ranks;
}

absl::StatusOr<RankRuntimes> RankRuntimes::Create(ModelRanks& ranks, const RuntimeOptions& options,
                                                  Engine engine,
                                                  const std::vector<std::uint32_t>& buckets) {
  const int n = ranks.size();
  std::shared_ptr<const LockstepGroup> lockstep;
  if (n > 1) {
    LockstepGroupOptions group = LockstepGroupOptionsFor(ranks.lead().options(), ranks.devices);
    group.patience = absl::Seconds(30);  // a rank capturing late is no fault
    BATON_ASSIGN_OR_RETURN(lockstep, LockstepGroup::Create(group));
  }
  RankRuntimes out;
  out.devices_ = ranks.devices;
  out.engine_ = engine;
  out.runtimes_.resize(n);
  for (int r = 0; r < n; ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks.devices[r]));
    RuntimeOptions o = options;
    o.lockstep = lockstep;
    o.lockstep_rank = n > 1 ? r : 0;
    BATON_ASSIGN_OR_RETURN(out.runtimes_[r], Runtime::Create(o));
    BATON_RETURN_IF_ERROR(Named(
        r, n, out.runtimes_[r]->RegisterStepProgram(ranks.models[r]->MakeStepProgram(buckets))));
    BATON_RETURN_IF_ERROR(Named(r, n, out.runtimes_[r]->Prepare(engine)));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks.devices[0]));
  return out;
}

RankRuntimes::~RankRuntimes() {
  for (std::size_t r = runtimes_.size(); r-- > 0;) {
    if (runtimes_[r] == nullptr) continue;
    (void)cudaSetDevice(devices_[r]);
    runtimes_[r].reset();
  }
  if (!devices_.empty()) (void)cudaSetDevice(devices_[0]);
}

absl::Status RankRuntimes::Start() {
  const int n = static_cast<int>(runtimes_.size());
  if (n > 1 && started_) {
    return absl::FailedPreconditionError(
        "RankRuntimes::Start: a lockstep group runs once; create new RankRuntimes");
  }
  started_ = true;
  for (int r = n - 1; r >= 0; --r) {  // rank 0 last: its first record finds every follower
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[r]));
    BATON_RETURN_IF_ERROR(Named(r, n, runtimes_[r]->Start(engine_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<StopReport> RankRuntimes::Stop(bool abort) {
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[0]));
  absl::StatusOr<StopReport> lead = abort ? runtimes_[0]->Abort() : runtimes_[0]->Stop();
  const int n = static_cast<int>(runtimes_.size());
  absl::Status status = Named(0, n, lead.status());
  // The followers end with rank 0's end; after rank 0 failed, on their own
  // abort instead of waiting for an end it may never publish (as Server::Close).
  for (int r = 1; r < n; ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[r]));
    Runtime& follower = *runtimes_[r];
    const absl::Status stopped = (lead.ok() ? follower.Stop() : follower.Abort()).status();
    if (status.ok()) status = Named(r, n, stopped);
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[0]));
  BATON_RETURN_IF_ERROR(status);
  return std::move(*lead);
}

}  // namespace baton::samples
