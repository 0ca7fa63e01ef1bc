// baton::Server: a served checkpoint's request lifecycle, written once for
// every front end (the Python package's LLM through python/src/module.cc,
// C++ programs, an HTTP server). It owns a DecoderModel and a Runtime started
// on one engine, hands out request-table entries, and turns the token stream
// and the completion mailbox into events. Plain C++ (no Python types): a
// binding releases its interpreter's lock around every call that waits.
//
//   auto server = Server::Create(options);        // checkpoint loaded, engine started
//   auto id = server->Submit(request);            // any time, also while others run
//   auto events = server->Poll(absl::Milliseconds(5));  // tokens as each step ends
//
// Submit writes the request into a free entry and queues its work item; the
// device admits it when a batch slot frees. A request's id is unique for the
// server's life (its table entry is reused once it finished). A full request table
// or work queue refuses the request (ResourceExhausted) and loses nothing.
//
// Split across GPUs (ServerOptions::tensor_parallel_size), it owns one model
// and runtime per GPU and everything above holds: a request is written into
// every rank's table, rank 0's runtime takes its work item and rank 0's
// stream and mailbox give its events.
//
// Thread safety: every public call takes the server's mutex, so Submit from
// one thread and Poll from another are safe; Poll returns each event once,
// to whichever caller polled it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "baton/completion.h"
#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "baton/lockstep_group.h"
#include "baton/peer_group.h"
#include "baton/runtime.h"

namespace baton {

struct ServerOptions {
  DecoderModelOptions model;
  RuntimeOptions runtime;
  Engine engine = Engine::kConditional;
  // GPUs the model is split across (tensor parallelism; a size that divides
  // the key/value heads): GPUs 0..n-1 of this host, one rank each, every
  // rank's DecoderModel holding its slices (DecoderModelOptions::
  // tensor_parallel, set by the server: leave it unset) and its own Runtime,
  // their device schedulers in lockstep (baton/lockstep_group.h): rank 0's
  // takes the requests and decides every step, the others follow it over
  // peer memory. The calling thread drives rank 0 alone; nothing a step does
  // waits for the host. 1: the current GPU.
  int tensor_parallel_size = 1;
};

// New tokens of one request, in order; `finished` on its last event (the
// tokens then end the generation: `generated` tokens in all). A request
// written with logprobs gets theirs, one per token, or, when they were lost
// (DecoderModel::ReadLogprobs' DataLoss: the reader fell more than
// stream_window tokens behind), `logprobs_error` says so and the rest of its
// events carry none.
struct ServerEvent {
  std::uint64_t id = 0;
  std::vector<std::int32_t> tokens;
  bool finished = false;
  std::vector<TokenLogprobs> logprobs;
  std::string logprobs_error;
};

// The LockstepGroupOptions a model of `model`'s options split across
// `devices` needs (its batch, its largest step's rows, its page size): what
// the server makes its ranks' group with (tensor_parallel_size), for
// programs that run the ranks' runtimes themselves.
[[nodiscard]] LockstepGroupOptions LockstepGroupOptionsFor(const DecoderModelOptions& model,
                                                           std::vector<int> devices);

// Checks everything that needs no GPU (the model's and the runtime's options).
[[nodiscard]] absl::Status ValidateServerOptions(const ServerOptions& options);

// The option values front ends spell as text ("conditional", "gemv",
// "bfloat16", ...), parsed once; InvalidArgument names the field, the value
// and what is accepted. An absent dtype is "auto" (the checkpoint's).
[[nodiscard]] absl::StatusOr<Engine> ParseEngine(absl::string_view name);
[[nodiscard]] absl::StatusOr<DecoderGemm> ParseGemm(absl::string_view name);
[[nodiscard]] absl::StatusOr<std::optional<DecoderDType>> ParseDType(absl::string_view name);
[[nodiscard]] const char* GemmName(DecoderGemm gemm);
[[nodiscard]] const char* DTypeName(DecoderDType dtype);

class Server {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();  // stops the engine (drains what is active)
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Validates and queues requests, all or none, in one push to the work
  // queue (so the device may admit them in the same step); returns their
  // ids. InvalidArgument for a request the model cannot run (names the
  // request and the field); ResourceExhausted when fewer entries are free
  // than requests (raise max_requests, or wait for some to finish).
  [[nodiscard]] absl::StatusOr<std::vector<std::uint64_t>> Submit(
      absl::Span<const DecodeRequest> requests);

  // Waits up to `timeout` for tokens or completions and returns them (empty
  // when none came). A device failure comes back as the runtime's Status.
  [[nodiscard]] absl::StatusOr<std::vector<ServerEvent>> Poll(absl::Duration timeout);

  // Ends request `id` at its next generated token (DecoderModel::Cancel); its
  // finished event follows. A request that already finished is left alone.
  [[nodiscard]] absl::Status Cancel(std::uint64_t id);

  // Requests submitted and not yet finished.
  [[nodiscard]] std::size_t pending() const;
  [[nodiscard]] const DecoderModel& model() const { return *model_; }
  [[nodiscard]] RuntimeStats stats() const;
  [[nodiscard]] Engine engine() const { return options_.engine; }

  // Drains the engine; later calls return FailedPrecondition.
  [[nodiscard]] absl::Status Close();

 private:
  struct Entry {
    bool busy = false;
    std::uint64_t id = 0;    // the request it holds
    std::uint32_t seen = 0;  // tokens already returned in events
    bool logprobs = false;   // its request asked, and none were lost yet
  };
  // Appends tokens [from, to)'s logprobs to the event (or the loss).
  absl::Status AddLogprobs(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                           ServerEvent& event);
  // One rank's model and runtime (tensor parallelism: rank 0 is model_ and
  // runtime_, the others followers_).
  struct Rank {
    int device = 0;
    std::unique_ptr<DecoderModel> model;
    std::unique_ptr<Runtime> runtime;
  };
  struct Parts;
  // The ranks of a tensor-parallel server, their groups made first.
  static absl::Status CreateRanks(const ServerOptions& options, Parts& parts);
  explicit Server(const ServerOptions& options, Parts parts);
  // One pass over the stream and the mailbox; appends to `events`.
  absl::Status PollOnce(std::vector<ServerEvent>& events);

  ServerOptions options_;
  // Tensor parallelism: the ranks' all-reduce and their schedulers' channel
  // (declared first: they outlive every rank).
  std::shared_ptr<const PeerGroup> peers_;
  std::shared_ptr<const LockstepGroup> lockstep_;
  std::vector<Rank> followers_;
  std::unique_ptr<DecoderModel> model_;
  std::unique_ptr<Runtime> runtime_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::vector<std::uint32_t> free_;    // free entries, lowest on top
  std::vector<std::uint32_t> active_;  // busy entries, in submission order
  std::vector<Completion> completions_;
  std::vector<std::int32_t> scratch_;
  std::uint64_t next_id_ = 1;
  bool closed_ = false;
};

}  // namespace baton
