#include "baton/server.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"
#include "foundation/device_scope.h"
#include "foundation/enum_table.h"

namespace baton {
namespace {

// How long Poll sleeps between empty passes: a step of a 1B model lasts about
// a millisecond, so a token waits at most a tenth of a step more, for a few
// percent of one host core.
constexpr absl::Duration kPollInterval = absl::Microseconds(100);

// A tensor-parallel server's calls run on rank 0's GPU (GPU 0); a one-GPU
// server's on the caller's current GPU, as they always have.
class OnRankZero {
 public:
  explicit OnRankZero(bool tensor_parallel) {
    if (tensor_parallel) scope_.emplace(0);
  }

 private:
  std::optional<detail::DeviceScope> scope_;
};

}  // namespace

absl::StatusOr<Engine> ParseEngine(absl::string_view name) {
  for (Engine engine : {Engine::kConditional, Engine::kTailLaunch, Engine::kDynamicParallelism}) {
    if (name == EngineName(engine)) return engine;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "engine '", name, "' is not one of 'conditional', 'tail-launch', 'dynamic-parallelism'"));
}

namespace {
// The text of each DecoderGemm and DecoderDType, for both directions.
template <class E>
struct Spelling {
  E value;
  const char* name;
};
constexpr Spelling<DecoderGemm> kGemms[] = {{DecoderGemm::kAuto, "auto"},
                                            {DecoderGemm::kBatonGemv, "gemv"},
                                            {DecoderGemm::kCublasLt, "cublaslt"}};
constexpr Spelling<DecoderDType> kDTypes[] = {{DecoderDType::kBFloat16, "bfloat16"},
                                              {DecoderDType::kFloat16, "float16"}};
}  // namespace

absl::StatusOr<DecoderGemm> ParseGemm(absl::string_view name) {
  if (const auto* row = FindRowNamed(kGemms, name)) return row->value;
  return absl::InvalidArgumentError(
      absl::StrCat("gemm '", name, "' is not one of 'auto', 'gemv', 'cublaslt'"));
}

const char* GemmName(DecoderGemm gemm) {
  return ColumnOf(kGemms, gemm, &Spelling<DecoderGemm>::name, "unknown");
}

absl::StatusOr<std::optional<DecoderDType>> ParseDType(absl::string_view name) {
  if (name == "auto") return std::optional<DecoderDType>();
  if (const auto* row = FindRowNamed(kDTypes, name)) return std::optional<DecoderDType>(row->value);
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is not one of 'auto', 'bfloat16', 'float16'"));
}

const char* DTypeName(DecoderDType dtype) {
  return ColumnOf(kDTypes, dtype, &Spelling<DecoderDType>::name, "unknown");
}

absl::Status ValidateServerOptions(const ServerOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateDecoderModelOptions(options.model));
  BATON_RETURN_IF_ERROR(ValidateRuntimeOptions(options.runtime));
  if (options.runtime.max_batch != 0) {
    return absl::InvalidArgumentError(
        "RuntimeOptions.max_batch: the model's step program carries max_batch; leave it 0");
  }
  if (options.tensor_parallel_size < 1 || options.tensor_parallel_size > kMaxPeerRanks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ServerOptions.tensor_parallel_size is %d: use 1 (one GPU) to %d",
                        options.tensor_parallel_size, kMaxPeerRanks));
  }
  if (options.model.tensor_parallel.group != nullptr || options.runtime.lockstep != nullptr) {
    return absl::InvalidArgumentError(
        "ServerOptions: the server makes each rank's groups (DecoderModelOptions.tensor_parallel, "
        "RuntimeOptions.lockstep): leave them unset and set ServerOptions.tensor_parallel_size");
  }
  if (options.model.max_requests > options.runtime.queue_capacity) {
    // Every entry's item must fit the queue at once, so Submit never refuses
    // a request it has an entry for.
    return absl::InvalidArgumentError(
        absl::StrFormat("max_requests %u exceeds the work queue's capacity %u: lower max_requests",
                        options.model.max_requests, options.runtime.queue_capacity));
  }
  return absl::OkStatus();
}

LockstepGroupOptions LockstepGroupOptionsFor(const DecoderModelOptions& model,
                                             std::vector<int> devices) {
  LockstepGroupOptions options;
  options.devices = std::move(devices);
  options.max_batch = model.max_batch;
  options.max_tokens = StepRowsLimit(model.tokens(), model.max_batch);
  options.min_page_tokens = model.kv_page_tokens;
  return options;
}

// What Create makes before the server exists (a failure part-way destroys
// it: the ranks, then their groups).
struct Server::Parts {
  std::shared_ptr<const PeerGroup> peers;
  std::shared_ptr<const LockstepGroup> lockstep;
  std::vector<Rank> ranks;  // rank 0 first
};

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateServerOptions(options));
  Parts parts;
  if (options.tensor_parallel_size > 1) {
    BATON_RETURN_IF_ERROR(CreateRanks(options, parts));
  } else {
    Rank rank;
    BATON_ASSIGN_OR_RETURN(rank.model, DecoderModel::Create(options.model));
    BATON_ASSIGN_OR_RETURN(rank.runtime, Runtime::Create(options.runtime));
    BATON_RETURN_IF_ERROR(rank.runtime->RegisterStepProgram(rank.model->MakeStepProgram()));
    BATON_RETURN_IF_ERROR(rank.runtime->Start(options.engine));
    parts.ranks.push_back(std::move(rank));
  }
  return std::unique_ptr<Server>(new Server(options, std::move(parts)));
}

// One thread makes every rank: its model (its slices of the weights) and its
// runtime, every rank's graphs built before any loop runs (Runtime::Prepare),
// then the followers started and rank 0 last.
absl::Status Server::CreateRanks(const ServerOptions& options, Parts& parts) {
  const int n = options.tensor_parallel_size;
  int gpus = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&gpus));
  if (gpus < n) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "ServerOptions.tensor_parallel_size is %d, but %d GPU(s) are visible: use at most %d, or "
        "make more visible (CUDA_VISIBLE_DEVICES)",
        n, gpus, gpus));
  }
  std::vector<int> devices(n);
  std::iota(devices.begin(), devices.end(), 0);
  PeerGroupOptions peers;
  peers.devices = devices;
  BATON_ASSIGN_OR_RETURN(peers.max_bytes, TensorParallelExchangeBytes(options.model, n));
  BATON_ASSIGN_OR_RETURN(parts.peers, PeerGroup::Create(peers));
  BATON_ASSIGN_OR_RETURN(parts.lockstep,
                         LockstepGroup::Create(LockstepGroupOptionsFor(options.model, devices)));
  for (int r = 0; r < n; ++r) {
    const detail::DeviceScope scope(devices[r]);
    BATON_CUDA_RETURN_IF_ERROR(scope.status());
    DecoderModelOptions model = options.model;
    model.tensor_parallel = {parts.peers, r};
    if (options.model.load_progress) {
      // One bar for every rank's share (each about 1/n of the weights).
      model.load_progress = [progress = options.model.load_progress, r, n](std::uint64_t done,
                                                                           std::uint64_t total) {
        progress(std::uint64_t(r) * total + done, std::uint64_t(n) * total);
      };
    }
    Rank rank;
    rank.device = devices[r];
    BATON_ASSIGN_OR_RETURN(rank.model, DecoderModel::Create(model));
    RuntimeOptions runtime = options.runtime;
    runtime.lockstep = parts.lockstep;
    runtime.lockstep_rank = r;
    BATON_ASSIGN_OR_RETURN(rank.runtime, Runtime::Create(runtime));
    BATON_RETURN_IF_ERROR(rank.runtime->RegisterStepProgram(rank.model->MakeStepProgram()));
    BATON_RETURN_IF_ERROR(rank.runtime->Prepare(options.engine));
    parts.ranks.push_back(std::move(rank));
  }
  for (int r = n - 1; r >= 0; --r) {
    const detail::DeviceScope scope(devices[r]);
    BATON_CUDA_RETURN_IF_ERROR(scope.status());
    BATON_RETURN_IF_ERROR(parts.ranks[r].runtime->Start(options.engine));
  }
  return absl::OkStatus();
}

Server::Server(const ServerOptions& options, Parts parts)
    : options_(options),
      peers_(std::move(parts.peers)),
      lockstep_(std::move(parts.lockstep)),
      followers_(std::make_move_iterator(parts.ranks.begin() + 1),
                 std::make_move_iterator(parts.ranks.end())),
      model_(std::move(parts.ranks[0].model)),
      runtime_(std::move(parts.ranks[0].runtime)),
      entries_(options.model.max_requests),
      completions_(std::min<std::size_t>(options.model.max_requests, 4096)) {
  free_.reserve(entries_.size());
  for (std::uint32_t e = static_cast<std::uint32_t>(entries_.size()); e-- > 0;) free_.push_back(e);
}

Server::~Server() { (void)Close(); }

absl::StatusOr<std::vector<std::uint64_t>> Server::Submit(
    absl::Span<const DecodeRequest> requests) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return absl::FailedPreconditionError("Server::Submit: the server was closed");
  const OnRankZero device(!followers_.empty());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const absl::Status valid = model_->ValidateRequest(requests[i]);
    if (!valid.ok()) {
      return absl::Status(valid.code(), absl::StrFormat("request %u of %u: %s", i, requests.size(),
                                                        valid.message()));
    }
  }
  if (requests.size() > free_.size()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%u requests submitted, %u of the %u request entries free (the rest hold unfinished "
        "requests): wait for some to finish, or raise max_requests",
        requests.size(), free_.size(), options_.model.max_requests));
  }
  std::vector<WorkItem> items;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::uint32_t entry = free_[free_.size() - 1 - i];
    BATON_RETURN_IF_ERROR(model_->WriteRequests(entry, {&requests[i], 1}));
    // Every rank holds every request (its prompt, limits and sampling): a
    // step runs the same positions on all of them.
    for (const Rank& rank : followers_) {
      const detail::DeviceScope scope(rank.device);
      BATON_CUDA_RETURN_IF_ERROR(scope.status());
      BATON_RETURN_IF_ERROR(rank.model->WriteRequests(entry, {&requests[i], 1}));
    }
    items.push_back(model_->WorkItemFor(entry));
  }
  // Every free entry's item fits the queue (ValidateServerOptions), so this
  // refuses only after a device failure, and then takes nothing.
  BATON_RETURN_IF_ERROR(runtime_->Submit(items));
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const WorkItem& item = items[i];
    free_.pop_back();
    entries_[item.id] = Entry{true, next_id_, 0, requests[i].logprobs >= 0};
    active_.push_back(item.id);
    ids.push_back(next_id_++);
  }
  return ids;
}

absl::Status Server::PollOnce(std::vector<ServerEvent>& events) {
  for (const std::uint32_t entry : active_) {
    Entry& state = entries_[entry];
    scratch_.clear();
    BATON_ASSIGN_OR_RETURN(const std::uint32_t next,
                           model_->ReadStream(entry, state.seen, scratch_));
    if (next > state.seen) {
      ServerEvent event;
      event.id = state.id;
      event.tokens = scratch_;
      BATON_RETURN_IF_ERROR(AddLogprobs(entry, state.seen, next, event));
      events.push_back(std::move(event));
      state.seen = next;
    }
  }
  BATON_ASSIGN_OR_RETURN(const std::size_t n, runtime_->Poll(absl::MakeSpan(completions_)));
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t entry = completions_[k].id;
    const std::uint32_t count = completions_[k].value;
    if (entry >= entries_.size() || !entries_[entry].busy || count == kRefusedRequest) {
      return absl::InternalError(absl::StrFormat(
          "Server::Poll: the device completed entry %u (value %u), which this server did not "
          "submit or the model refused",
          entry, count));
    }
    Entry& state = entries_[entry];
    ServerEvent done;
    done.id = state.id;
    done.finished = true;
    if (count > state.seen) {
      // The table holds the final tokens; the stream may not have shown the
      // last ones yet.
      BATON_ASSIGN_OR_RETURN(auto tokens, model_->ReadGenerated(entry, count));
      done.tokens.assign(tokens.begin() + state.seen, tokens.end());
      BATON_RETURN_IF_ERROR(AddLogprobs(entry, state.seen, count, done));
    }
    events.push_back(std::move(done));
    state = Entry{};
    active_.erase(std::find(active_.begin(), active_.end(), entry));
    free_.push_back(entry);
  }
  return absl::OkStatus();
}

absl::Status Server::AddLogprobs(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                                 ServerEvent& event) {
  Entry& state = entries_[entry];
  if (!state.logprobs) return absl::OkStatus();
  const absl::Status read = model_->ReadLogprobs(entry, from, to, event.logprobs);
  if (read.ok()) return read;
  if (read.code() != absl::StatusCode::kDataLoss) return read;
  // The request's own loss, not the server's: it is told, the others go on.
  event.logprobs.clear();
  event.logprobs_error = std::string(read.message());
  state.logprobs = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ServerEvent>> Server::Poll(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<ServerEvent> events;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) return absl::FailedPreconditionError("Server::Poll: the server was closed");
      const OnRankZero device(!followers_.empty());
      BATON_RETURN_IF_ERROR(PollOnce(events));
      if (!events.empty() || active_.empty()) return events;
    }
    if (absl::Now() >= deadline) return events;
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(kPollInterval));
  }
}

absl::Status Server::Cancel(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return absl::FailedPreconditionError("Server::Cancel: the server was closed");
  // Rank 0's flag alone: its scheduler retires the request, and the
  // followers run only the steps rank 0 publishes.
  const OnRankZero device(!followers_.empty());
  for (const std::uint32_t entry : active_) {
    if (entries_[entry].id == id) return model_->Cancel(entry);
  }
  return absl::OkStatus();
}

std::size_t Server::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_.size();
}

RuntimeStats Server::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const OnRankZero device(!followers_.empty());
  return runtime_->stats();
}

absl::Status Server::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return absl::OkStatus();
  closed_ = true;
  // Requests still running are given up: Abort ends the loop at the next step
  // boundary rather than generating tokens nobody will read.
  absl::Status status;
  {
    const OnRankZero device(!followers_.empty());
    status = (active_.empty() ? runtime_->Stop() : runtime_->Abort()).status();
  }
  // Followers end with rank 0's end; after a failure of rank 0's they leave
  // on their own abort instead of waiting for it.
  for (std::size_t f = 0; f < followers_.size(); ++f) {
    const detail::DeviceScope scope(followers_[f].device);
    Runtime& follower = *followers_[f].runtime;
    const absl::Status ended = (status.ok() ? follower.Stop() : follower.Abort()).status();
    if (status.ok() && !ended.ok()) {
      status = absl::Status(ended.code(), absl::StrCat("rank ", f + 1, ": ", ended.message()));
    }
  }
  return status;
}

}  // namespace baton
