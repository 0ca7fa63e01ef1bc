// The runtime's lifecycle: create, register a program, start an engine,
// submit, poll, stop or abort, and a failure reported once. The loop's device
// state is loop_state.h's, watching it loop_monitor.h's, and each engine's
// graphs and launches its driver's (engines/engine_driver.h).
#include "baton/runtime.h"

#include <array>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/status.h"
#include "engines/engine_driver.h"
#include "engines/program_checks.h"
#include "foundation/nvtx.h"
#include "lockstep_group_impl.h"
#include "loop_monitor.h"
#include "loop_state.h"
#include "scheduler/lockstep_record.h"

namespace baton {

class Runtime::Impl {
 public:
  enum class State { kCreated, kReady, kRunning, kStopped, kFailed };

  absl::Status Init(const RuntimeOptions& options) {
    options_ = options;
    BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
    if (options.lockstep != nullptr) {
      int device = -1;
      BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
      const int want = options.lockstep->device(options.lockstep_rank);
      if (device != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Runtime::Create: lockstep rank ", options.lockstep_rank, " runs on GPU ", want,
            " (LockstepGroupOptions.devices) but GPU ", device, " is current: call cudaSetDevice(",
            want, ") before creating its runtime"));
      }
    }
    BATON_ASSIGN_OR_RETURN(loop_, detail::LoopState::Create(options));
    monitor_ = std::make_unique<detail::LoopMonitor>(loop_.get(), options.watchdog_timeout);
    return absl::OkStatus();
  }

  absl::Status RegisterStepProgram(StepProgram program) {
    if (state_ != State::kCreated) {
      return absl::FailedPreconditionError(
          "RegisterStepProgram: a step program is already registered (one per Runtime)");
    }
    BATON_RETURN_IF_ERROR(ValidateStepProgram(program, options_));
    BATON_ASSIGN_OR_RETURN(const std::uint32_t max_batch, EffectiveMaxBatch(program, options_));
    if (options_.lockstep != nullptr) {
      const std::uint32_t rows = StepRowsLimit(program.tokens, max_batch);
      if (detail::lockstep_record_words(max_batch, rows, program.pages) >
          options_.lockstep->record_words()) {
        const LockstepGroupOptions& g = options_.lockstep->options();
        return absl::InvalidArgumentError(absl::StrCat(
            "step program '", program.name, "': a step of ", max_batch, " items and up to ", rows,
            " rows (pages of ", program.pages.page_tokens,
            " tokens) needs lockstep records larger than the group's (LockstepGroupOptions "
            "max_batch ",
            g.max_batch, ", max_tokens ", g.max_tokens, ", min_page_tokens ", g.min_page_tokens,
            "): create the group with this program's sizes"));
      }
    }
    BATON_RETURN_IF_ERROR(loop_->AttachBatch(max_batch, program.tokens, program.pages));
    program_ = std::move(program);
    state_ = State::kReady;
    return absl::OkStatus();
  }

  absl::Status Prepare(Engine engine) {
    const NvtxRange range("Prepare");
    if (state_ == State::kRunning) {
      if (engine == engine_) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("Prepare: the ", EngineName(engine_), " engine is running; building the ",
                       EngineName(engine),
                       " engine's graphs would wait for the GPU's running loop: Prepare "
                       "before Start, or Stop first"));
    }
    return Checked("Prepare", PrepareEngine(engine, "Prepare"));
  }

  absl::Status Start(Engine engine) {
    const NvtxRange range("Start");
    return Checked("Start", StartEngine(engine));
  }

  absl::Status Submit(absl::Span<const WorkItem> items) {
    const NvtxRange range("Submit");
    if (state_ == State::kFailed) return FailedEarlier("Submit");
    if (follower()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Submit: this runtime is lockstep rank ", options_.lockstep_rank,
                       ", which runs rank 0's steps: submit work to rank 0's runtime"));
    }
    if (state_ == State::kStopped) {
      return absl::FailedPreconditionError(
          "Submit after Stop/Abort: the runtime is stopped; Start it again first (items still "
          "queued resume then)");
    }
    BATON_RETURN_IF_ERROR(detail::ValidatePagedItems(program_, items));
    size_t accepted = 0;
    const absl::Status seeded = loop_->queue().Seed(items, &accepted);
    submitted_ += accepted;
    if (state_ == State::kRunning) BATON_RETURN_IF_ERROR(Checked("Submit", Resume()));
    return seeded;
  }

  absl::StatusOr<size_t> Poll(absl::Span<Completion> out) {
    const NvtxRange range("Poll");
    if (state_ == State::kFailed) return FailedEarlier("Poll");
    BATON_RETURN_IF_ERROR(Checked("Poll", Observe()));
    // Before taking completions: a Status must not swallow any.
    BATON_RETURN_IF_ERROR(Watch("Poll", /*check_stall=*/true));
    const size_t n = loop_->mailbox().Poll(out);
    completed_ += n;
    if (state_ == State::kRunning) BATON_RETURN_IF_ERROR(Checked("Poll", Resume()));
    return n;
  }

  absl::StatusOr<StopReport> Stop() {
    const NvtxRange range("Stop");
    return CheckedEnd("Stop", /*abort=*/false);
  }
  absl::StatusOr<StopReport> Abort() {
    const NvtxRange range("Abort");
    return CheckedEnd("Abort", /*abort=*/true);
  }

  absl::StatusOr<std::vector<TraceEvent>> Trace(size_t max_events) const {
    if (!loop_->trace().enabled()) {
      return absl::FailedPreconditionError(
          "Trace: the device trace is off: set RuntimeOptions.trace_capacity (e.g. 65536) when "
          "creating the runtime");
    }
    if (monitor_->context_lost()) return FailedEarlier("Trace");
    return loop_->trace().Snapshot(loop_->control_stream(), max_events);
  }

  RuntimeStats stats() const {
    RuntimeStats stats;
    stats.submitted = submitted_;
    stats.completed = completed_;
    stats.engine_launches = engine_launches_;
    const absl::StatusOr<detail::SchedulerCounters> counters = loop_->ReadCounters();
    if (counters.ok()) {
      stats.steps = counters->steps;
      stats.admitted = counters->admitted;
      stats.device_launches = counters->device_launches;
      stats.engine_exits = counters->exits;
    }
    const absl::StatusOr<detail::BatchCounts> counts = loop_->ReadBatchCounts();
    if (counts.ok()) {
      stats.free_pages = counts->free_pages;
      stats.reserved_pages = counts->reserved_pages;
    }
    return stats;
  }

  bool running() const { return state_ == State::kRunning; }
  cudaStream_t stream() const { return loop_->launch_stream(); }

  // Best effort on destruction: never free memory a running loop still uses.
  void Shutdown() {
    if (loop_ == nullptr) return;
    if (state_ == State::kRunning) (void)End(/*abort=*/true);
    // A follower still waiting for rank 0 (whose loop failed or never ended)
    // leaves on its own abort, so nothing below waits for it forever.
    if (follower()) {
      detail::SchedulerControl leave;
      leave.abort = 1;
      (void)loop_->WriteControl(leave);
    }
    (void)cudaStreamSynchronize(loop_->launch_stream());
    (void)cudaStreamSynchronize(loop_->control_stream());
    MarkEnded();
  }

 private:
  absl::Status StartEngine(Engine engine) {
    if (state_ == State::kRunning) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Start: the ", EngineName(engine_), " engine is already running: Stop it first"));
    }
    BATON_RETURN_IF_ERROR(PrepareEngine(engine, "Start"));  // (refuses kCreated and kFailed)
    BATON_RETURN_IF_ERROR(loop_->WriteControl(detail::SchedulerControl{}));
    engine_ = engine;
    state_ = State::kRunning;
    if (options_.lockstep != nullptr) {
      options_.lockstep->impl().SetRunning(options_.lockstep_rank, true);
    }
    return LaunchEngine();
  }

  // Captures, certifies and uploads `engine`'s graphs once (the driver's
  // Prepare). In a lockstep group that shares a GPU, refused while another
  // rank's loop runs there: instantiating a graph can wait for the GPU's
  // running kernels (a conditional graph's does: H200, 2026-11-28, rank 0's
  // Start hung in ConditionalGraphBuilder::Build behind a follower's waiting
  // scheduler), and a follower's loop runs until rank 0 ends it.
  absl::Status PrepareEngine(Engine engine, absl::string_view op) {
    switch (state_) {
      case State::kCreated:
        return absl::FailedPreconditionError(
            absl::StrCat(op, ": no step program registered: call RegisterStepProgram first"));
      case State::kFailed:
        return FailedEarlier(op);
      default:
        break;
    }
    if (engine != Engine::kTailLaunch && engine != Engine::kConditional &&
        engine != Engine::kDynamicParallelism) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": unknown engine"));
    }
    BATON_RETURN_IF_ERROR(detail::CheckProgramFitsEngine(program_, loop_->max_batch(), engine));
    std::unique_ptr<detail::EngineDriver>& driver = drivers_[static_cast<int>(engine)];
    if (driver != nullptr && driver->prepared()) return absl::OkStatus();
    if (options_.lockstep != nullptr) {
      const int device = options_.lockstep->device(options_.lockstep_rank);
      const int busy = options_.lockstep->impl().RunningRankOn(device, options_.lockstep_rank);
      if (busy >= 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            op, ": lockstep rank ", options_.lockstep_rank, " would build the ", EngineName(engine),
            " engine's graphs on GPU ", device, ", where rank ", busy,
            "'s loop runs; building them waits for that loop, which waits for this rank: call "
            "Runtime::Prepare(engine) on every rank that shares a GPU before starting any"));
      }
    }
    if (driver == nullptr) driver = detail::CreateEngineDriver(engine);
    detail::EngineSetup setup;
    setup.scheduler = loop_->scheduler_params();
    setup.max_batch = loop_->max_batch();
    setup.steps_per_graph = engine == Engine::kTailLaunch
                                ? options_.tail_steps_per_launch
                                : options_.conditional_steps_per_iteration;
    setup.program_name = program_.name;
    return driver->Prepare(program_, setup);
  }

  detail::EngineDriver& driver() { return *drivers_[static_cast<int>(engine_)]; }

  // This rank's loop has ended (the group's running mark, PrepareEngine).
  void MarkEnded() {
    if (options_.lockstep != nullptr) {
      options_.lockstep->impl().SetRunning(options_.lockstep_rank, false);
    }
  }

  absl::Status LaunchEngine() {
    BATON_RETURN_IF_ERROR(loop_->ClearLockstepEnd());  // (stream-ordered before the launch)
    BATON_RETURN_IF_ERROR(driver().Launch(loop_->launch_stream()));
    ++engine_launches_;
    engine_active_ = true;
    monitor_->Armed(absl::Now());
    return absl::OkStatus();
  }

  // Reads the exit epoch the device publishes; on a new exit records why.
  absl::Status Observe() {
    const std::uint64_t exits = loop_->exits();
    if (exits == exits_seen_) return absl::OkStatus();
    exits_seen_ = exits;
    engine_active_ = exits_seen_ < engine_launches_;
    const detail::EngineStatus& status = loop_->status();
    last_exit_ = static_cast<EngineExit>(status.reason);
    if (last_exit_ != EngineExit::kError) return absl::OkStatus();
    // Wait for the launch to finish so a CUDA error, if any, is the one reported.
    const cudaError_t sync = cudaStreamSynchronize(loop_->launch_stream());
    if (IsStickyCudaError(sync)) return Fail(monitor_->ContextLost("Poll", engine_, sync));
    absl::Status why =
        DeviceErrorStatus(status.error_word, absl::StrCat(EngineName(engine_), " engine"));
    if (why.ok()) why = CudaStatus(sync, "the engine's graph launch", __FILE__, __LINE__);
    if (why.ok()) why = loop_->queue().CheckDeviceError();
    if (why.ok()) why = absl::InternalError("the engine reported a device error");
    return Fail(driver().ExplainFailure(std::move(why), status.error_word));
  }

  absl::Status Fail(absl::Status why) {
    failure_ = why;
    state_ = State::kFailed;
    return why;
  }

  // What every call gets after the failure was reported once.
  absl::Status FailedEarlier(absl::string_view op) const {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": the runtime failed earlier and refuses further use; the failure was: ",
                     failure_.message()));
  }

  // A failed call may be the first to see a lost context: report that
  // instead of the raw CUDA error it got.
  absl::Status Checked(absl::string_view op, absl::Status status) {
    if (status.ok() || state_ == State::kFailed) return status;
    const cudaError_t error = cudaStreamQuery(loop_->control_stream());
    if (IsStickyCudaError(error)) return Fail(monitor_->ContextLost(op, engine_, error));
    return status;
  }

  absl::StatusOr<StopReport> CheckedEnd(absl::string_view op, bool abort) {
    absl::StatusOr<StopReport> report = End(abort);
    if (!report.ok()) return Checked(op, report.status());
    return report;
  }

  // A tensor-parallel rank other than 0, or rank 0 (RuntimeOptions::lockstep).
  bool follower() const { return options_.lockstep != nullptr && options_.lockstep_rank > 0; }
  bool leader() const { return options_.lockstep != nullptr && options_.lockstep_rank == 0; }

  // The monitor's checks while an engine runs (loop_monitor.h). A follower
  // waits for rank 0's steps as long as rank 0 idles: rank 0's watchdog
  // watches the group's steps.
  absl::Status Watch(absl::string_view op, bool check_stall) {
    if (follower()) check_stall = false;
    if (state_ != State::kRunning || !engine_active_) return absl::OkStatus();
    absl::Status status = monitor_->Watch(op, engine_, check_stall);
    if (monitor_->context_lost()) return Fail(std::move(status));
    return status;
  }

  // Work the device has not finished, as of its last exit.
  std::uint64_t PendingAtLastExit() const {
    return (submitted_ - loop_->status().admitted) + loop_->status().batch;
  }

  // Relaunches an engine that ended idle or parked while work is pending.
  absl::Status Resume() {
    BATON_RETURN_IF_ERROR(Observe());
    // A follower's loop ends only when rank 0's does: nothing to resume.
    if (engine_active_ || state_ != State::kRunning || follower()) return absl::OkStatus();
    if (last_exit_ == EngineExit::kMailboxFull || PendingAtLastExit() > 0) return LaunchEngine();
    return absl::OkStatus();
  }

  absl::StatusOr<StopReport> End(bool abort) {
    const char* op = abort ? "Abort" : "Stop";
    if (state_ == State::kFailed) {
      // After a device failure the loop has ended; Abort still hands back
      // what it held (unless the context itself is gone, which the reads
      // below then report).
      if (!abort || engine_active_ || monitor_->context_lost()) return FailedEarlier(op);
      StopReport report;
      BATON_RETURN_IF_ERROR(Collect(/*abort=*/true, report));
      return report;
    }
    if (state_ != State::kRunning) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": no engine is running"));
    }
    detail::SchedulerControl control;
    control.stop = abort ? 0 : 1;
    control.abort = abort ? 1 : 0;
    BATON_RETURN_IF_ERROR(loop_->WriteControl(control));
    StopReport report;
    std::vector<Completion> chunk(1024);
    const absl::Time deadline = absl::Now() + options_.stop_timeout;
    for (;;) {
      BATON_RETURN_IF_ERROR(Observe());
      BATON_RETURN_IF_ERROR(Watch(op, /*check_stall=*/false));
      const size_t n = loop_->mailbox().Poll(absl::MakeSpan(chunk));
      completed_ += n;
      report.completions.insert(report.completions.end(), chunk.begin(), chunk.begin() + n);
      if (!engine_active_) {
        // A follower ends when rank 0 ends it, whatever the exit. Rank 0 of
        // a lockstep group ends only by deciding it (drained or aborted),
        // which publishes the end to its followers: after an idle exit it
        // runs once more, with stop or abort set.
        const bool ended = last_exit_ == EngineExit::kDrained || last_exit_ == EngineExit::kAborted;
        const bool finished =
            follower() ||
            (leader() ? ended
                      : abort || ended ||
                            (last_exit_ == EngineExit::kIdle && loop_->status().batch == 0));
        if (finished) break;
        // Parked on a full mailbox or ended idle with active work: run again
        // (with stop set it admits nothing new) until drained.
        BATON_RETURN_IF_ERROR(LaunchEngine());
      }
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            op, ": the ", EngineName(engine_), " engine did not end within ",
            absl::FormatDuration(options_.stop_timeout),
            " (last exit: ", EngineExitName(last_exit_), "); a step kernel may be stuck in ",
            monitor_->StepDescription(), ".", monitor_->RecentEvents())));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(loop_->launch_stream()));
    BATON_RETURN_IF_ERROR(Collect(abort, report));
    if (abort) {
      BATON_RETURN_IF_ERROR(loop_->ResetBatch());
      for (const auto& prepared : drivers_) {
        if (prepared != nullptr) BATON_RETURN_IF_ERROR(prepared->Reset());
      }
    }
    BATON_RETURN_IF_ERROR(loop_->WriteControl(detail::SchedulerControl{}));
    state_ = State::kStopped;
    MarkEnded();
    return report;
  }

  // Once the loop has ended: the completions not yet polled, the active items
  // (for an abort) and how many submitted items were never admitted.
  absl::Status Collect(bool abort, StopReport& report) {
    std::vector<Completion> chunk(1024);
    for (size_t n; (n = loop_->mailbox().Poll(absl::MakeSpan(chunk))) > 0;) {
      completed_ += n;
      report.completions.insert(report.completions.end(), chunk.begin(), chunk.begin() + n);
    }
    if (abort) {
      BATON_ASSIGN_OR_RETURN(report.in_flight, loop_->ReadActiveItems());
    }
    BATON_ASSIGN_OR_RETURN(const detail::SchedulerCounters counters, loop_->ReadCounters());
    report.still_queued = submitted_ - counters.admitted;
    return absl::OkStatus();
  }

  RuntimeOptions options_;
  State state_ = State::kCreated;
  absl::Status failure_;
  StepProgram program_;
  Engine engine_ = Engine::kTailLaunch;
  std::unique_ptr<detail::LoopState> loop_;
  std::unique_ptr<detail::LoopMonitor> monitor_;
  std::array<std::unique_ptr<detail::EngineDriver>, 3> drivers_;  // by Engine, made on first Start

  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::uint64_t engine_launches_ = 0;
  std::uint64_t exits_seen_ = 0;
  bool engine_active_ = false;
  EngineExit last_exit_ = EngineExit::kIdle;
};

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateRuntimeOptions(options));
  auto impl = std::make_unique<Impl>();
  BATON_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() {
  if (impl_ != nullptr) impl_->Shutdown();
}

absl::Status Runtime::RegisterStepProgram(StepProgram program) {
  return impl_->RegisterStepProgram(std::move(program));
}
absl::Status Runtime::Prepare(Engine engine) { return impl_->Prepare(engine); }
absl::Status Runtime::Start(Engine engine) { return impl_->Start(engine); }
absl::Status Runtime::Submit(absl::Span<const WorkItem> items) { return impl_->Submit(items); }
absl::StatusOr<size_t> Runtime::Poll(absl::Span<Completion> out) { return impl_->Poll(out); }
absl::StatusOr<StopReport> Runtime::Stop() { return impl_->Stop(); }
absl::StatusOr<StopReport> Runtime::Abort() { return impl_->Abort(); }
absl::StatusOr<std::vector<TraceEvent>> Runtime::Trace(size_t max_events) const {
  return impl_->Trace(max_events);
}
RuntimeStats Runtime::stats() const { return impl_->stats(); }
bool Runtime::running() const { return impl_->running(); }
cudaStream_t Runtime::stream() const { return impl_->stream(); }

}  // namespace baton
