// baton::Runtime: the public API of the device-driven decode loop. A step
// program's author needs this header and baton/step_kernel.cuh (StepArgs,
// finish_item, launch_step_kernel); serving the decoder model adds
// baton/decoder_model.h.
//
//   auto runtime = Runtime::Create(options);            // queue, mailbox, step state
//   runtime->RegisterStepProgram(program);               // what one step does, per bucket
//   runtime->Start(Engine::kTailLaunch);                 // the GPU drives from here on
//   runtime->Submit(items);                              // any time while running
//   runtime->Poll(completions);                          // no per-step synchronization
//   runtime->Stop();                                     // drain, report what stayed queued
//
// After Start the host never synchronizes per step: the scheduler on the device
// admits work, picks the bucket and launches each step itself. The host only
// seeds the queue, reads the completion mailbox, and relaunches an engine that
// went idle (Submit and Poll do that).
//
// Thread safety: one host thread at a time per Runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "baton/completion.h"
#include "baton/engine.h"
#include "baton/lockstep_group.h"
#include "baton/status.h"
#include "baton/step_program.h"
#include "baton/trace_event.h"
#include "baton/work_item.h"

namespace baton {

struct RuntimeOptions {
  std::uint64_t queue_capacity = 1u << 16;    // power of two
  std::uint32_t mailbox_capacity = 1u << 16;  // power of two
  // Active items per step, <= the largest bucket (any size on the
  // dynamic-parallelism engine). 0: the step program's own
  // (StepProgram::max_batch), or 64 for a program without one; a program
  // that names its own needs 0 or the same value here.
  std::uint32_t max_batch = 0;
  absl::Duration stop_timeout = absl::Seconds(10);  // how long Stop/Abort wait for the device
  // Tail-launch engine: steps per bucket graph, 1 to 8. n captures [step;
  // scheduler] n times, paying one device launch per n steps while the batch
  // stays in its bucket, for graphs n times as large (capture, upload, memory).
  std::uint32_t tail_steps_per_launch = 4;
  // Conditional engine: steps per WHILE body, 1 to 8 (the same scheme: the
  // loop condition is evaluated once per n steps while the bucket stays).
  std::uint32_t conditional_steps_per_iteration = 4;
  // Both default to 4, the fastest of 1/2/4 in launch_comparison and in
  // nearly every decode_loop scenario on an H200 (8 is faster still for tiny
  // steps). The cost: a step decided for another bucket empties the rest of
  // the graph or body (its kernels launch and return at once), so lower n
  // where the active batch changes bucket every few steps. A bucket past
  // max_batch (a step that reads a prompt's chunk) always holds one step:
  // the step after a prompt leaves it, and the kernels of an emptied chunk
  // step that cannot return early (cuBLASLt's) would run in full.
  // Device trace: a ring of this many scheduler events (0 = off, the default,
  // at no cost; else a power of two in [64, 2^24]); read with Runtime::Trace.
  std::uint32_t trace_capacity = 0;
  // Watchdog: while an engine runs, Poll returns DeadlineExceeded when no step
  // has begun for this long: never sooner, and at most a tenth of it (1 to
  // 100 ms: how often Poll reads the step counter) plus twice the span of two
  // consecutive Polls later (the read and the check each run inside a Poll).
  // absl::InfiniteDuration() turns it off. The device pays nothing: Poll reads
  // the step counter through the copy engine.
  absl::Duration watchdog_timeout = absl::Seconds(2);
  // Tensor parallelism: this runtime is rank `lockstep_rank` of the group
  // (baton/lockstep_group.h), created with that rank's GPU current. Rank 0
  // takes the work and decides every step; any other rank follows it
  // (Submit refuses; Poll never resumes it; Stop waits for rank 0's end).
  // Null: one GPU.
  std::shared_ptr<const LockstepGroup> lockstep;
  int lockstep_rank = 0;
};

struct RuntimeStats {
  std::uint64_t submitted = 0;        // items accepted by Submit
  std::uint64_t steps = 0;            // steps the device launched
  std::uint64_t admitted = 0;         // items the device took from the queue
  std::uint64_t completed = 0;        // completions handed out by Poll/Stop
  std::uint64_t device_launches = 0;  // tail launches (tail-launch engine); kernel launches,
                                      // the scheduler's own included (dynamic parallelism)
  std::uint64_t engine_launches = 0;  // host launches of an engine (start + resumes)
  std::uint64_t engine_exits = 0;
  // A paged program's page pool (StepProgram::pages), as of the read (a
  // snapshot through the copy engine): pages free, and pages the admitted
  // items reserve. Once the loop is drained, free is the whole pool again.
  std::uint32_t free_pages = 0;
  std::uint32_t reserved_pages = 0;
};

struct StopReport {
  std::vector<Completion> completions;  // finished while stopping (not yet polled)
  std::vector<WorkItem> in_flight;      // Abort only: active when the engine ended
  std::uint64_t still_queued = 0;       // submitted, never admitted
};

class Runtime {
 public:
  // InvalidArgument for options out of range (names the option and the fix).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      const RuntimeOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Once, before Start. Checks the buckets (and that a whole step fits the
  // largest), takes the batch size from the program or the options and sizes
  // the batch's device state; graphs are captured and certified when an
  // engine first starts.
  [[nodiscard]] absl::Status RegisterStepProgram(StepProgram program);

  // Captures, certifies and uploads `engine`'s graphs now instead of at its
  // first Start (which then only launches). Instantiating a graph can wait for
  // the GPU's running kernels (a conditional graph's does), so lockstep ranks
  // that share a GPU Prepare before any of them starts: Prepare and Start
  // refuse (FailedPrecondition) to build graphs while another rank's loop runs
  // on this rank's GPU. FailedPrecondition also while another engine runs, and
  // as Start for a program the engine cannot run. Once per engine; later calls
  // do nothing.
  [[nodiscard]] absl::Status Prepare(Engine engine);

  // Starts the device loop with `engine`. FailedPrecondition when already
  // running, when no program is registered, after a device failure, when the
  // program cannot run on `engine` (the dynamic-parallelism engine without a
  // device step; a graph engine without enqueue/buckets or with max_batch
  // above the largest bucket).
  [[nodiscard]] absl::Status Start(Engine engine);

  // Seeds the queue (before the first Start or while running). ResourceExhausted
  // when the queue is full, saying how many were accepted (a prefix); nothing
  // is dropped. FailedPrecondition after Stop/Abort until the next Start.
  [[nodiscard]] absl::Status Submit(absl::Span<const WorkItem> items);

  // Copies up to out.size() completions into `out` and returns how many;
  // resumes an engine that went idle or parked with work pending. A device
  // failure comes back here as a Status: a device error word once (its
  // code), a fault that poisoned the CUDA context once (Internal, saying the
  // process must restart); after either, every call returns
  // FailedPrecondition naming it. The watchdog's DeadlineExceeded (no step
  // began within RuntimeOptions.watchdog_timeout) takes no completions and
  // leaves the runtime running: call Abort to get the in-flight items back.
  [[nodiscard]] absl::StatusOr<size_t> Poll(absl::Span<Completion> out);

  // Drain: admit nothing new, let every active item finish, then end the
  // loop. The report holds the completions not yet polled and how many items
  // stayed queued (they remain queued; Start resumes them).
  [[nodiscard]] absl::StatusOr<StopReport> Stop();

  // Ends the loop at the next step boundary; active items come back in
  // report.in_flight (their slots are freed), queued ones stay queued. After a
  // device failure (Poll returned its Status) Abort still hands back the
  // completions not yet polled, the in-flight items and the queued count, so
  // no work is lost; the runtime stays failed.
  [[nodiscard]] absl::StatusOr<StopReport> Abort();

  // The newest device trace events (at most `max_events`, 0 = all the ring
  // holds), oldest first. Copied while the loop runs (events being
  // overwritten during the copy are left out) or after it ended; write them
  // out with baton::WriteTraceJson (baton/trace.h). FailedPrecondition when
  // RuntimeOptions.trace_capacity is 0.
  [[nodiscard]] absl::StatusOr<std::vector<TraceEvent>> Trace(size_t max_events = 0) const;

  [[nodiscard]] RuntimeStats stats() const;
  [[nodiscard]] bool running() const;

  // The stream the engines are launched on. Work recorded on it after a
  // launch (Start, or a resume in Submit/Poll) runs once that engine run has
  // ended, tail launches included: record events on it to time the device
  // loop, or order your own work after it.
  [[nodiscard]] cudaStream_t stream() const;

  class Impl;

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Pure option checks (CPU-testable).
[[nodiscard]] absl::Status ValidateRuntimeOptions(const RuntimeOptions& options);
[[nodiscard]] absl::Status ValidateStepProgram(const StepProgram& program,
                                               const RuntimeOptions& options);
// The batch size a runtime created with `options` runs `program` at:
// InvalidArgument when the two name different ones.
[[nodiscard]] absl::StatusOr<std::uint32_t> EffectiveMaxBatch(const StepProgram& program,
                                                              const RuntimeOptions& options);

}  // namespace baton
