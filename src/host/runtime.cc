#include "baton/runtime.h"

#include <cuda/atomic>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/bucket_table.h"
#include "baton/completion_mailbox.h"
#include "baton/conditional_builder.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/nvtx.h"
#include "baton/status.h"
#include "baton/step_graph.h"
#include "baton/trace.h"
#include "baton/work_queue.h"
#include "dp_engine.h"
#include "progress_watchdog.h"
#include "scheduler_node.h"
#include "scheduler_params.h"
#include "trace_ring.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxRuntimeBatch = 1u << 16;
constexpr std::uint32_t kMinTraceCapacity = 64;
constexpr std::uint32_t kMaxTailStepsPerLaunch = 8;
constexpr std::uint32_t kMaxTraceCapacity = 1u << 24;
// While an engine runs, Poll checks at most this often with a stream query
// whether a fault has lost the context (a fault ends the loop silently).
constexpr absl::Duration kHealthCheckPeriod = absl::Milliseconds(1);
// Trace events quoted in a watchdog or stop-timeout Status.
constexpr size_t kEventsInStatus = 8;

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

// The queue behind a runtime: the scheduler pops a warp (32 items) at a time.
WorkQueueOptions QueueOptionsFor(const RuntimeOptions& options) {
  WorkQueueOptions queue;
  queue.capacity = options.queue_capacity;
  queue.max_batch = 32;
  return queue;
}

const char* EngineName(Engine engine) {
  switch (engine) {
    case Engine::kTailLaunch:
      return "tail-launch";
    case Engine::kConditional:
      return "conditional";
    case Engine::kDynamicParallelism:
      return "dynamic-parallelism";
  }
  return "unknown";
}

}  // namespace

absl::Status ValidateRuntimeOptions(const RuntimeOptions& options) {
  if (options.queue_capacity < 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.queue_capacity ", options.queue_capacity,
                     " is below 32, the scheduler's pop batch: use a power of two >= 32"));
  }
  BATON_RETURN_IF_ERROR(WorkQueue::Validate(QueueOptionsFor(options)));
  if (!IsPowerOfTwo(options.mailbox_capacity) || options.mailbox_capacity < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.mailbox_capacity ", options.mailbox_capacity,
                     " is not a power of two >= 2: round it up to the next power of two"));
  }
  if (options.max_batch == 0 || options.max_batch > kMaxRuntimeBatch) {
    return absl::InvalidArgumentError(absl::StrCat("RuntimeOptions.max_batch ", options.max_batch,
                                                   " is outside [1, ", kMaxRuntimeBatch, "]"));
  }
  if (options.max_batch > options.mailbox_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions.mailbox_capacity ", options.mailbox_capacity, " is smaller than max_batch ",
        options.max_batch,
        ": one step can retire every active item, so the mailbox must hold at least max_batch"));
  }
  if (options.stop_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("RuntimeOptions.stop_timeout must be positive");
  }
  if (options.trace_capacity != 0 &&
      (!IsPowerOfTwo(options.trace_capacity) || options.trace_capacity < kMinTraceCapacity ||
       options.trace_capacity > kMaxTraceCapacity)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.trace_capacity ", options.trace_capacity,
                     " is neither 0 (off) nor a power of two in [", kMinTraceCapacity, ", ",
                     kMaxTraceCapacity, "]: use 0 or a power of two such as 65536"));
  }
  if (options.conditional_steps_per_iteration < 1 ||
      options.conditional_steps_per_iteration > kMaxTailStepsPerLaunch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions.conditional_steps_per_iteration is ",
        options.conditional_steps_per_iteration, "; it must be 1 to ", kMaxTailStepsPerLaunch,
        " (steps per loop body: more saves loop iterations, costs graph size)"));
  }
  if (options.tail_steps_per_launch < 1 || options.tail_steps_per_launch > kMaxTailStepsPerLaunch) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.tail_steps_per_launch is ", options.tail_steps_per_launch,
                     "; it must be 1 to ", kMaxTailStepsPerLaunch,
                     " (steps per bucket graph: more saves device launches, costs graph size)"));
  }
  if (options.watchdog_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "RuntimeOptions.watchdog_timeout must be positive: use absl::InfiniteDuration() to turn "
        "the watchdog off");
  }
  return absl::OkStatus();
}

absl::Status ValidateStepProgram(const StepProgram& program, const RuntimeOptions& options) {
  // A device step lets the program run on the dynamic-parallelism engine
  // alone (no graphs) and above its largest bucket; the graph engines check
  // what they need when they start (detail::CheckProgramFitsEngine).
  const bool device_step = program.device_step.kind != DeviceStepKind::kNone;
  BATON_RETURN_IF_ERROR(detail::ValidateDeviceStep(program, options));
  if (!program.enqueue && !device_step) {
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "' has no enqueue function"));
  }
  if (device_step && program.buckets.empty()) return absl::OkStatus();
  const absl::Status sizes = ValidateBucketSizes(program.buckets);
  if (!sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "': ", sizes.message()));
  }
  if (program.buckets.back() < options.max_batch && !device_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name, "': the largest bucket (", program.buckets.back(),
        ") is smaller than RuntimeOptions.max_batch (", options.max_batch,
        "): add a bucket of at least ", options.max_batch, " or lower max_batch"));
  }
  return absl::OkStatus();
}

class Runtime::Impl {
 public:
  enum class State { kCreated, kReady, kRunning, kStopped, kFailed };

  absl::Status Init(const RuntimeOptions& options) {
    options_ = options;
    BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
    BATON_ASSIGN_OR_RETURN(queue_, WorkQueue::Create(QueueOptionsFor(options)));
    BATON_ASSIGN_OR_RETURN(mailbox_, CompletionMailbox::Create(options.mailbox_capacity));
    BATON_ASSIGN_OR_RETURN(launch_stream_, CreateStream());
    BATON_ASSIGN_OR_RETURN(control_stream_, CreateStream());
    const std::uint32_t n = options.max_batch;
    BATON_ASSIGN_OR_RETURN(header_, DeviceBuffer<StepHeader>::Create(1));
    BATON_ASSIGN_OR_RETURN(items_, DeviceBuffer<WorkItem>::Create(n));
    BATON_ASSIGN_OR_RETURN(words_, DeviceBuffer<std::uint32_t>::Create(4 * size_t{n}));
    BATON_ASSIGN_OR_RETURN(counts_, DeviceBuffer<detail::BatchCounts>::Create(1));
    BATON_ASSIGN_OR_RETURN(free_slots_, DeviceBuffer<std::uint32_t>::Create(n));
    BATON_ASSIGN_OR_RETURN(retired_, DeviceBuffer<Completion>::Create(n));
    BATON_ASSIGN_OR_RETURN(control_, DeviceBuffer<detail::SchedulerControl>::Create(1));
    BATON_ASSIGN_OR_RETURN(counters_, DeviceBuffer<detail::SchedulerCounters>::Create(1));
    BATON_ASSIGN_OR_RETURN(params_, DeviceBuffer<detail::SchedulerParams>::Create(3));
    BATON_ASSIGN_OR_RETURN(status_, MappedHostBuffer<detail::EngineStatus>::Create(1));
    BATON_ASSIGN_OR_RETURN(control_staging_, MappedHostBuffer<detail::SchedulerControl>::Create(1));
    BATON_ASSIGN_OR_RETURN(trace_, detail::DeviceTraceRing::Create(options.trace_capacity));
    watchdog_ = detail::ProgressWatchdog(options.watchdog_timeout);
    // A tenth of the timeout keeps the detection delay near the timeout
    // while costing Poll one small copy per period at most.
    progress_period_ =
        std::clamp(options.watchdog_timeout / 10, absl::Milliseconds(1), absl::Milliseconds(100));
    *status_.host() = detail::EngineStatus{};
    *control_staging_.host() = detail::SchedulerControl{};
    BATON_RETURN_IF_ERROR(header_.Fill(0));
    BATON_RETURN_IF_ERROR(words_.Fill(0));
    // Every position holds an invalid item until one is admitted there, so a
    // copy of the batch never reads uninitialized memory (compute-sanitizer
    // initcheck does not see admissions made by device-launched schedulers).
    BATON_RETURN_IF_ERROR(items_.Fill(0xFF));
    const detail::SchedulerCounters counters{};
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(counters_.data(), &counters, sizeof(counters), cudaMemcpyHostToDevice));
    BATON_RETURN_IF_ERROR(ResetBatch());
    BATON_RETURN_IF_ERROR(WriteControl(detail::SchedulerControl{}));
    return absl::OkStatus();
  }

  absl::Status RegisterStepProgram(StepProgram program) {
    if (state_ != State::kCreated) {
      return absl::FailedPreconditionError(
          "RegisterStepProgram: a step program is already registered (one per Runtime)");
    }
    BATON_RETURN_IF_ERROR(ValidateStepProgram(program, options_));
    program_ = std::move(program);
    state_ = State::kReady;
    return absl::OkStatus();
  }

  absl::Status Start(Engine engine) { return Checked("Start", StartEngine(engine)); }

  absl::Status StartEngine(Engine engine) {
    switch (state_) {
      case State::kCreated:
        return absl::FailedPreconditionError(
            "Start: no step program registered: call RegisterStepProgram first");
      case State::kRunning:
        return absl::FailedPreconditionError(absl::StrCat(
            "Start: the ", EngineName(engine_), " engine is already running: Stop it first"));
      case State::kFailed:
        return FailedEarlier("Start");
      default:
        break;
    }
    if (engine != Engine::kTailLaunch && engine != Engine::kConditional &&
        engine != Engine::kDynamicParallelism) {
      return absl::InvalidArgumentError("Start: unknown engine");
    }
    BATON_RETURN_IF_ERROR(detail::CheckProgramFitsEngine(program_, options_, engine));
    BATON_RETURN_IF_ERROR(PrepareEngine(engine));
    BATON_RETURN_IF_ERROR(WriteControl(detail::SchedulerControl{}));
    engine_ = engine;
    state_ = State::kRunning;
    return LaunchEngine();
  }

  absl::Status Submit(absl::Span<const WorkItem> items) {
    if (state_ == State::kFailed) return FailedEarlier("Submit");
    if (state_ == State::kStopped) {
      return absl::FailedPreconditionError(
          "Submit after Stop/Abort: the runtime is stopped; Start it again first (items still "
          "queued resume then)");
    }
    size_t accepted = 0;
    const absl::Status seeded = queue_.Seed(items, &accepted);
    submitted_ += accepted;
    if (state_ == State::kRunning) BATON_RETURN_IF_ERROR(Checked("Submit", Resume()));
    return seeded;
  }

  absl::StatusOr<size_t> Poll(absl::Span<Completion> out) {
    if (state_ == State::kFailed) return FailedEarlier("Poll");
    BATON_RETURN_IF_ERROR(Checked("Poll", Observe()));
    // Before taking completions: a Status must not swallow any.
    BATON_RETURN_IF_ERROR(Watch("Poll", /*check_stall=*/true));
    const size_t n = mailbox_.Poll(out);
    completed_ += n;
    if (state_ == State::kRunning) BATON_RETURN_IF_ERROR(Checked("Poll", Resume()));
    return n;
  }

  absl::StatusOr<StopReport> Stop() { return CheckedEnd("Stop", /*abort=*/false); }
  absl::StatusOr<StopReport> Abort() { return CheckedEnd("Abort", /*abort=*/true); }

  absl::StatusOr<std::vector<TraceEvent>> Trace(size_t max_events) const {
    if (!trace_.enabled()) {
      return absl::FailedPreconditionError(
          "Trace: the device trace is off: set RuntimeOptions.trace_capacity (e.g. 65536) when "
          "creating the runtime");
    }
    if (context_lost_) return FailedEarlier("Trace");
    return trace_.Snapshot(control_stream_.get(), max_events);
  }

  RuntimeStats stats() const {
    RuntimeStats stats;
    stats.submitted = submitted_;
    stats.completed = completed_;
    stats.engine_launches = engine_launches_;
    detail::SchedulerCounters counters{};
    // A snapshot through the copy engine: no SM is needed and the loop keeps running.
    if (cudaMemcpyAsync(&counters, counters_.data(), sizeof(counters), cudaMemcpyDeviceToHost,
                        control_stream_.get()) == cudaSuccess &&
        cudaStreamSynchronize(control_stream_.get()) == cudaSuccess) {
      stats.steps = counters.steps;
      stats.admitted = counters.admitted;
      stats.device_launches = counters.device_launches;
      stats.engine_exits = counters.exits;
    }
    return stats;
  }

  bool running() const { return state_ == State::kRunning; }
  cudaStream_t stream() const { return launch_stream_.get(); }

  // Best effort on destruction: never free memory a running loop still uses.
  void Shutdown() {
    if (state_ == State::kRunning) (void)End(/*abort=*/true);
    (void)cudaStreamSynchronize(launch_stream_.get());
    (void)cudaStreamSynchronize(control_stream_.get());
  }

 private:
  StepArgs args() const {
    StepArgs args;
    args.header = header_.data();
    args.items = items_.data();
    args.slots = words_.data();
    args.item_steps = words_.data() + options_.max_batch;
    args.finished = words_.data() + 2 * size_t{options_.max_batch};
    args.results = words_.data() + 3 * size_t{options_.max_batch};
    args.max_batch = options_.max_batch;
    return args;
  }

  detail::SchedulerParams BaseParams() const {
    detail::SchedulerParams params;
    params.queue = queue_.device_view();
    params.mailbox = mailbox_.device_view();
    params.args = args();
    params.book = detail::BatchBook{counts_.data(), free_slots_.data(), retired_.data()};
    params.control = control_.data();
    params.counters = counters_.data();
    params.status = status_.device();
    params.observers.trace = trace_.view();
    return params;
  }

  const detail::SchedulerParams* ParamsFor(Engine engine) const {
    return params_.data() + static_cast<int>(engine);
  }

  absl::Status WriteParams(Engine engine, const detail::SchedulerParams& params) {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(params_.data() + static_cast<int>(engine), &params,
                                          sizeof(params), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  // Every slot free, nothing active (at creation and after Abort).
  absl::Status ResetBatch() {
    std::vector<std::uint32_t> free(options_.max_batch);
    for (std::uint32_t i = 0; i < options_.max_batch; ++i) free[i] = options_.max_batch - 1 - i;
    BATON_RETURN_IF_ERROR(free_slots_.CopyFrom(free));
    const detail::BatchCounts counts{0, options_.max_batch};
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(counts_.data(), &counts, sizeof(counts), cudaMemcpyHostToDevice));
    const std::uint32_t zero = 0;
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(&counters_.data()->step_pending, &zero, sizeof(zero), cudaMemcpyHostToDevice));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(&counters_.data()->decision_carried, &zero, sizeof(zero),
                                          cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  // Host -> device control through the copy engine, so it lands while the
  // loop runs without needing an SM or a PCIe read per step on the device.
  absl::Status WriteControl(const detail::SchedulerControl& control) {
    *control_staging_.host() = control;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(control_.data(), control_staging_.host(),
                                               sizeof(control), cudaMemcpyHostToDevice,
                                               control_stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(control_stream_.get()));
    return absl::OkStatus();
  }

  absl::Status PrepareEngine(Engine engine) {
    if (engine == Engine::kDynamicParallelism) return PrepareDynamicParallelismEngine();
    const NvtxRange range(engine == Engine::kTailLaunch ? "PrepareTailLaunchEngine"
                                                        : "PrepareConditionalEngine");
    const detail::SchedulerParams* params = ParamsFor(engine);
    BATON_ASSIGN_OR_RETURN(Stream capture, CreateStream());
    if (engine == Engine::kTailLaunch) {
      if (bucket_table_.has_value()) return absl::OkStatus();
      std::vector<BucketGraph> graphs;
      // With n steps per launch a bucket graph is [step; inner; step; ...;
      // scheduler]: one device launch per n steps while the batch stays in
      // the bucket (an inner node empties the following steps otherwise).
      const std::uint32_t steps_per_launch = options_.tail_steps_per_launch;
      for (std::uint32_t b = 0; b < program_.buckets.size(); ++b) {
        const std::uint32_t size = program_.buckets[b];
        const StepContext context{size, args()};
        CertifyOptions certify;
        certify.name = absl::StrCat(program_.name, " (bucket ", size, ", tail-launch engine)");
        BATON_ASSIGN_OR_RETURN(
            DeviceGraph graph,
            CaptureDeviceGraph(
                capture.get(),
                [&](cudaStream_t stream) -> absl::Status {
                  BATON_RETURN_IF_ERROR(program_.enqueue(context, stream));
                  for (std::uint32_t k = 1; k < steps_per_launch; ++k) {
                    BATON_RETURN_IF_ERROR(detail::CaptureTailInnerNode(params, stream, b));
                    BATON_RETURN_IF_ERROR(program_.enqueue(context, stream));
                  }
                  return detail::CaptureSchedulerNode(engine, params, stream,
                                                      detail::ConditionalRole::kLoop, 0,
                                                      /*after_inner=*/steps_per_launch > 1);
                },
                certify));
        graphs.push_back(BucketGraph{size, std::move(graph)});
      }
      BATON_ASSIGN_OR_RETURN(BucketTable table,
                             BucketTable::Create(std::move(graphs), capture.get()));
      CertifyOptions certify;
      certify.name = "tail-launch engine bootstrap";
      BATON_ASSIGN_OR_RETURN(DeviceGraph bootstrap, CaptureDeviceGraph(
                                                        capture.get(),
                                                        [&](cudaStream_t stream) {
                                                          return detail::CaptureSchedulerNode(
                                                              engine, params, stream);
                                                        },
                                                        certify));
      detail::SchedulerParams written = BaseParams();
      written.buckets = table.device_table();
      BATON_RETURN_IF_ERROR(WriteParams(engine, written));
      bucket_table_.emplace(std::move(table));
      bootstrap_.emplace(std::move(bootstrap));
      return absl::OkStatus();
    }

    if (conditional_.has_value()) return absl::OkStatus();
    // The conditional engine's scheduler only needs the bucket sizes to choose
    // with; its entries carry no graph handle because it launches nothing.
    std::vector<DeviceBucketEntry> entries;
    for (std::uint32_t size : program_.buckets) entries.push_back({nullptr, size, 0});
    BATON_ASSIGN_OR_RETURN(conditional_sizes_,
                           DeviceBuffer<DeviceBucketEntry>::Create(entries.size()));
    BATON_RETURN_IF_ERROR(conditional_sizes_.CopyFrom(entries));

    BATON_ASSIGN_OR_RETURN(
        ConditionalGraphBuilder builder,
        ConditionalGraphBuilder::Create(absl::StrCat(program_.name, " (conditional engine)")));
    // A loop body holds conditional_steps_per_iteration steps: [step; inner;
    // step; ...; scheduler], so the WHILE is re-evaluated once per n steps
    // (an inner node empties the body's later steps when the next step belongs
    // to another bucket, as in the tail-launch engine's graphs).
    const std::uint32_t steps_per_iteration = options_.conditional_steps_per_iteration;
    auto scheduler = [&](GraphSection& section, detail::ConditionalRole role,
                         std::uint32_t body_bucket, bool after_inner = false) {
      return section.Capture([&](cudaStream_t stream) {
        return detail::CaptureSchedulerNode(engine, params, stream, role, body_bucket, after_inner);
      });
    };
    auto step = [&](GraphSection& section, std::uint32_t bucket) {
      const StepContext context{program_.buckets[bucket], args()};
      return section.Capture(
          [&](cudaStream_t stream) { return program_.enqueue(context, stream); });
    };
    // The steps of one loop body and the inner nodes between them.
    auto body_steps = [&](GraphSection& section, std::uint32_t bucket) -> absl::Status {
      BATON_RETURN_IF_ERROR(step(section, bucket));
      for (std::uint32_t k = 1; k < steps_per_iteration; ++k) {
        BATON_RETURN_IF_ERROR(section.Capture([&](cudaStream_t stream) {
          return detail::CaptureTailInnerNode(params, stream, bucket);
        }));
        BATON_RETURN_IF_ERROR(step(section, bucket));
      }
      return absl::OkStatus();
    };
    const bool after_inner = steps_per_iteration > 1;
    cudaGraphConditionalHandle while_handle = 0;
    cudaGraphConditionalHandle switch_handle = 0;
    const std::uint32_t bucket_count = static_cast<std::uint32_t>(program_.buckets.size());
    std::vector<cudaGraphConditionalHandle> stay_handles(bucket_count, 0);
    if (bucket_count == 1) {
      // One bucket needs no SWITCH (a conditional level costs several us per
      // step): decide once before the loop, then each iteration runs the step
      // and decides the next one, so a stop never runs a stale step.
      //   [scheduler] -> WHILE(continue) { step; scheduler }
      BATON_ASSIGN_OR_RETURN(while_handle, builder.root().CreateHandle(/*default_value=*/0));
      BATON_RETURN_IF_ERROR(scheduler(builder.root(), detail::ConditionalRole::kLoop, 0));
      BATON_RETURN_IF_ERROR(builder.root().While(while_handle, [&](GraphSection& loop) {
        BATON_RETURN_IF_ERROR(body_steps(loop, 0));
        return scheduler(loop, detail::ConditionalRole::kLoop, 0, after_inner);
      }));
    } else {
      // Several buckets: the SWITCH is entered only when the bucket changes;
      // while it stays, each bucket loops in its own inner WHILE.
      //   WHILE(continue) { outer scheduler; SWITCH(bucket) {
      //     b: [step_b; inner scheduler; WHILE(stay_b) { step_b; inner scheduler }] } }
      BATON_ASSIGN_OR_RETURN(while_handle, builder.root().CreateHandle(/*default_value=*/1));
      BATON_RETURN_IF_ERROR(builder.root().While(while_handle, [&](GraphSection& loop) {
        BATON_ASSIGN_OR_RETURN(switch_handle, loop.CreateHandle(detail::kNoBucket));
        BATON_RETURN_IF_ERROR(scheduler(loop, detail::ConditionalRole::kOuter, 0));
        std::vector<SectionFiller> bodies;
        for (std::uint32_t b = 0; b < bucket_count; ++b) {
          bodies.push_back([&, b](GraphSection& body) -> absl::Status {
            BATON_ASSIGN_OR_RETURN(stay_handles[b], body.CreateHandle(/*default_value=*/0));
            BATON_RETURN_IF_ERROR(step(body, b));
            BATON_RETURN_IF_ERROR(scheduler(body, detail::ConditionalRole::kInner, b));
            return body.While(stay_handles[b], [&](GraphSection& inner) {
              BATON_RETURN_IF_ERROR(body_steps(inner, b));
              return scheduler(inner, detail::ConditionalRole::kInner, b, after_inner);
            });
          });
        }
        return loop.Switch(switch_handle, bodies);
      }));
    }
    BATON_ASSIGN_OR_RETURN(stay_handles_,
                           DeviceBuffer<cudaGraphConditionalHandle>::Create(bucket_count));
    BATON_RETURN_IF_ERROR(stay_handles_.CopyFrom(stay_handles));
    BATON_ASSIGN_OR_RETURN(ConditionalGraph graph, builder.Build(capture.get()));
    detail::SchedulerParams written = BaseParams();
    written.buckets =
        DeviceBucketTable{conditional_sizes_.data(), static_cast<std::uint32_t>(entries.size())};
    written.while_handle = while_handle;
    written.switch_handle = switch_handle;
    written.stay_handles = stay_handles_.data();
    BATON_RETURN_IF_ERROR(WriteParams(engine, written));
    conditional_.emplace(std::move(graph));
    return absl::OkStatus();
  }

  // Nothing to capture: the scheduler only needs the sizes to choose with.
  absl::Status PrepareDynamicParallelismEngine() {
    if (dp_sizes_.size() > 0) return absl::OkStatus();
    const std::vector<DeviceBucketEntry> entries =
        detail::DynamicParallelismBuckets(program_, options_.max_batch);
    BATON_ASSIGN_OR_RETURN(dp_sizes_, DeviceBuffer<DeviceBucketEntry>::Create(entries.size()));
    BATON_RETURN_IF_ERROR(dp_sizes_.CopyFrom(entries));
    detail::SchedulerParams written = BaseParams();
    written.buckets =
        DeviceBucketTable{dp_sizes_.data(), static_cast<std::uint32_t>(entries.size())};
    return WriteParams(Engine::kDynamicParallelism, written);
  }

  absl::Status LaunchEngine() {
    if (engine_ == Engine::kDynamicParallelism) {
      BATON_RETURN_IF_ERROR(detail::LaunchDynamicParallelismEngine(
          ParamsFor(engine_), program_.device_step, launch_stream_.get()));
    } else if (engine_ == Engine::kTailLaunch) {
      BATON_RETURN_IF_ERROR(bootstrap_->Launch(launch_stream_.get()));
    } else {
      BATON_RETURN_IF_ERROR(conditional_->Launch(launch_stream_.get()));
    }
    ++engine_launches_;
    engine_active_ = true;
    watchdog_.Arm(absl::Now(), seen_steps_);
    return absl::OkStatus();
  }

  // Reads the exit epoch the device publishes; on a new exit records why.
  absl::Status Observe() {
    const std::uint64_t exits =
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(status_.host()->exits)
            .load(cuda::std::memory_order_acquire);
    if (exits == exits_seen_) return absl::OkStatus();
    exits_seen_ = exits;
    engine_active_ = exits_seen_ < engine_launches_;
    last_exit_ = static_cast<EngineExit>(status_.host()->reason);
    if (last_exit_ == EngineExit::kError) {
      // Wait for the launch to finish so a CUDA error, if any, is the one reported.
      const cudaError_t sync = cudaStreamSynchronize(launch_stream_.get());
      if (IsStickyCudaError(sync)) return ContextLost("Poll", sync);
      absl::Status why = DeviceErrorStatus(status_.host()->error_word,
                                           absl::StrCat(EngineName(engine_), " engine"));
      if (why.ok()) why = CudaStatus(sync, "the engine's graph launch", __FILE__, __LINE__);
      if (why.ok()) why = queue_.CheckDeviceError();
      if (why.ok()) why = absl::InternalError("the engine reported a device error");
      if (engine_ == Engine::kDynamicParallelism) {
        why = detail::ExplainDynamicParallelismFailure(std::move(why), status_.host()->error_word);
      }
      return Fail(std::move(why));
    }
    return absl::OkStatus();
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

  // The watchdog's progress: the scheduler's step counter, read through the
  // copy engine (no SM is needed, the loop keeps running, and the device
  // pays nothing for being watched).
  void ReadProgress() {
    unsigned long long steps = 0;
    if (cudaMemcpyAsync(&steps, &counters_.data()->steps, sizeof(steps), cudaMemcpyDeviceToHost,
                        control_stream_.get()) == cudaSuccess &&
        cudaStreamSynchronize(control_stream_.get()) == cudaSuccess) {
      seen_steps_ = steps;
    }
  }

  // The step the loop is in, for messages, as of the host's last look.
  std::string StepDescription() const {
    return absl::StrCat("step ", seen_steps_ == 0 ? 0 : seen_steps_ - 1,
                        " (the last one the host saw begin)");
  }

  // The newest trace events as lines for a Status, or how to get them.
  std::string RecentEvents() const {
    if (!trace_.enabled()) {
      return " Set RuntimeOptions.trace_capacity to see the scheduler's last events here.";
    }
    const absl::StatusOr<std::vector<TraceEvent>> events =
        trace_.Snapshot(control_stream_.get(), kEventsInStatus);
    if (!events.ok() || events->empty()) return " No trace events could be read.";
    std::string text = " Last trace events:";
    for (const TraceEvent& event : *events) {
      absl::StrAppend(&text, "\n  ", FormatTraceEvent(event, events->front().time_ns));
    }
    return text;
  }

  // A fault (trap, illegal address, ...) poisons the process's CUDA context:
  // report it once, clearly, then refuse further use.
  absl::Status ContextLost(absl::string_view op, cudaError_t error) {
    context_lost_ = true;
    return Fail(absl::Status(
        CudaErrorCode(error),
        absl::StrCat(op, ": the ", EngineName(engine_),
                     " engine's device loop hit a sticky CUDA "
                     "error, ",
                     cudaGetErrorName(error), " (", cudaGetErrorString(error),
                     "), during or after ", StepDescription(),
                     ": a step kernel trapped or faulted (e.g. an out-of-bounds access). The CUDA "
                     "context of this process is lost and every later CUDA call in it fails: "
                     "destroy the Runtime and restart the process (compute-sanitizer memcheck "
                     "names the faulting kernel).")));
  }

  // A failed call may be the first to see a lost context: report that
  // instead of the raw CUDA error it got.
  absl::Status Checked(absl::string_view op, absl::Status status) {
    if (status.ok() || state_ == State::kFailed) return status;
    const cudaError_t error = cudaStreamQuery(control_stream_.get());
    if (IsStickyCudaError(error)) return ContextLost(op, error);
    return status;
  }

  absl::StatusOr<StopReport> CheckedEnd(absl::string_view op, bool abort) {
    absl::StatusOr<StopReport> report = End(abort);
    if (!report.ok()) return Checked(op, report.status());
    return report;
  }

  // While an engine runs: a context lost to a fault (checked once the
  // progress word has been still for a moment), and with `check_stall` the
  // watchdog.
  absl::Status Watch(absl::string_view op, bool check_stall) {
    if (state_ != State::kRunning || !engine_active_) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now - last_health_check_ >= kHealthCheckPeriod) {
      last_health_check_ = now;
      const cudaError_t error = cudaStreamQuery(launch_stream_.get());
      if (IsStickyCudaError(error)) return ContextLost(op, error);
    }
    if (!check_stall || !watchdog_.enabled()) return absl::OkStatus();
    if (now - last_progress_read_ >= progress_period_) {
      last_progress_read_ = now;
      ReadProgress();
    }
    const absl::Duration still = watchdog_.StillFor(now, seen_steps_);
    if (still <= watchdog_.timeout()) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(
        op, ": watchdog: the ", EngineName(engine_), " engine made no progress for ",
        absl::FormatDuration(still), " (RuntimeOptions.watchdog_timeout ",
        absl::FormatDuration(watchdog_.timeout()), "): ", StepDescription(),
        " has not finished, so a step kernel may be stuck or spinning. Call Abort() to end the "
        "loop at the next step boundary and get the in-flight items back (it waits up to "
        "RuntimeOptions.stop_timeout); if the step never ends, the process must exit.",
        RecentEvents()));
  }

  // Work the device has not finished, as of its last exit.
  std::uint64_t PendingAtLastExit() const {
    return (submitted_ - status_.host()->admitted) + status_.host()->batch;
  }

  // Relaunches an engine that ended idle or parked while work is pending.
  absl::Status Resume() {
    BATON_RETURN_IF_ERROR(Observe());
    if (engine_active_ || state_ != State::kRunning) return absl::OkStatus();
    if (last_exit_ == EngineExit::kMailboxFull || PendingAtLastExit() > 0) return LaunchEngine();
    return absl::OkStatus();
  }

  absl::StatusOr<StopReport> End(bool abort) {
    if (state_ == State::kFailed) {
      // After a device failure the loop has ended; Abort still hands back
      // what it held (unless the context itself is gone, which the reads
      // below then report).
      if (!abort || engine_active_ || context_lost_) return FailedEarlier(abort ? "Abort" : "Stop");
      StopReport report;
      BATON_RETURN_IF_ERROR(Collect(/*abort=*/true, report));
      return report;
    }
    if (state_ != State::kRunning) {
      return absl::FailedPreconditionError(
          absl::StrCat(abort ? "Abort" : "Stop", ": no engine is running"));
    }
    detail::SchedulerControl control;
    control.stop = abort ? 0 : 1;
    control.abort = abort ? 1 : 0;
    BATON_RETURN_IF_ERROR(WriteControl(control));
    StopReport report;
    std::vector<Completion> chunk(1024);
    const absl::Time deadline = absl::Now() + options_.stop_timeout;
    for (;;) {
      BATON_RETURN_IF_ERROR(Observe());
      BATON_RETURN_IF_ERROR(Watch(abort ? "Abort" : "Stop", /*check_stall=*/false));
      const size_t n = mailbox_.Poll(absl::MakeSpan(chunk));
      completed_ += n;
      report.completions.insert(report.completions.end(), chunk.begin(), chunk.begin() + n);
      if (!engine_active_) {
        const bool finished = abort || last_exit_ == EngineExit::kDrained ||
                              (last_exit_ == EngineExit::kIdle && status_.host()->batch == 0);
        if (finished) break;
        // Parked on a full mailbox or ended idle with active work: run again
        // (with stop set it admits nothing new) until drained.
        BATON_RETURN_IF_ERROR(LaunchEngine());
      }
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            abort ? "Abort" : "Stop", ": the ", EngineName(engine_), " engine did not end within ",
            absl::FormatDuration(options_.stop_timeout),
            " (last exit: ", EngineExitName(last_exit_), "); a step kernel may be stuck in ",
            StepDescription(), ".", RecentEvents())));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(launch_stream_.get()));
    BATON_RETURN_IF_ERROR(Collect(abort, report));
    if (abort) BATON_RETURN_IF_ERROR(ResetBatch());
    BATON_RETURN_IF_ERROR(WriteControl(detail::SchedulerControl{}));
    state_ = State::kStopped;
    return report;
  }

  // Once the loop has ended: the completions not yet polled, the active items
  // (for an abort) and how many submitted items were never admitted.
  absl::Status Collect(bool abort, StopReport& report) {
    std::vector<Completion> chunk(1024);
    for (size_t n; (n = mailbox_.Poll(absl::MakeSpan(chunk))) > 0;) {
      completed_ += n;
      report.completions.insert(report.completions.end(), chunk.begin(), chunk.begin() + n);
    }
    if (abort) {
      detail::BatchCounts counts{};
      BATON_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(&counts, counts_.data(), sizeof(counts), cudaMemcpyDeviceToHost));
      report.in_flight.resize(counts.batch);
      if (counts.batch > 0) {
        BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(report.in_flight.data(), items_.data(),
                                              counts.batch * sizeof(WorkItem),
                                              cudaMemcpyDeviceToHost));
      }
    }
    detail::SchedulerCounters counters{};
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(&counters, counters_.data(), sizeof(counters), cudaMemcpyDeviceToHost));
    report.still_queued = submitted_ - counters.admitted;
    return absl::OkStatus();
  }

  RuntimeOptions options_;
  State state_ = State::kCreated;
  absl::Status failure_;
  StepProgram program_;
  Engine engine_ = Engine::kTailLaunch;

  WorkQueue queue_;
  CompletionMailbox mailbox_;
  Stream launch_stream_;
  Stream control_stream_;
  DeviceBuffer<StepHeader> header_;
  DeviceBuffer<WorkItem> items_;
  DeviceBuffer<std::uint32_t> words_;  // slots, item_steps, finished, results
  DeviceBuffer<detail::BatchCounts> counts_;
  DeviceBuffer<std::uint32_t> free_slots_;
  DeviceBuffer<Completion> retired_;
  DeviceBuffer<detail::SchedulerControl> control_;
  DeviceBuffer<detail::SchedulerCounters> counters_;
  DeviceBuffer<detail::SchedulerParams> params_;  // one per engine
  MappedHostBuffer<detail::EngineStatus> status_;
  MappedHostBuffer<detail::SchedulerControl> control_staging_;
  DeviceBuffer<DeviceBucketEntry> conditional_sizes_;
  DeviceBuffer<cudaGraphConditionalHandle> stay_handles_;  // multi-bucket conditional engine
  DeviceBuffer<DeviceBucketEntry> dp_sizes_;               // dynamic-parallelism engine
  std::optional<BucketTable> bucket_table_;
  std::optional<DeviceGraph> bootstrap_;
  std::optional<ConditionalGraph> conditional_;
  detail::DeviceTraceRing trace_;
  detail::ProgressWatchdog watchdog_;
  absl::Duration progress_period_;
  absl::Time last_progress_read_ = absl::InfinitePast();
  std::uint64_t seen_steps_ = 0;  // steps launched, as of the last read
  absl::Time last_health_check_ = absl::InfinitePast();
  bool context_lost_ = false;

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
