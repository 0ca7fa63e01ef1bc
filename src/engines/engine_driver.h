// One engine behind one small interface: what it captures and certifies, how
// it is launched from the host, what it resets after an abort, and what it
// adds to a device failure's Status. The runtime (src/runtime) owns the loop's
// device state and lifecycle and talks to engines only through this.
//
// - tail-launch (engines/tail_launch_engine.cc): one device launch per graph
//   of n steps;
// - conditional (engines/conditional_engine.cc): one host-launched
//   WHILE/SWITCH graph;
// - dynamic-parallelism (engines/dynamic_parallelism_engine.cc): the
//   program's device step.
// The two graph engines share engines/graph_engine.h.
//
// Internal.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/bucket_entry.h"
#include "baton/cuda_resources.h"
#include "baton/engine.h"
#include "baton/step_program.h"
#include "scheduler/scheduler_params.h"

namespace baton::detail {

// What the runtime hands an engine when it prepares it.
struct EngineSetup {
  // The decision's parameters: the runtime's queue, mailbox, step arguments,
  // batch book, control, counters, status and trace (no bucket table yet).
  SchedulerParams scheduler;
  std::uint32_t max_batch = 0;
  // Graph engines: steps per bucket graph (tail-launch) or loop body
  // (conditional), RuntimeOptions::tail_steps_per_launch /
  // conditional_steps_per_iteration.
  std::uint32_t steps_per_graph = 1;
  // Steps in the graph or loop body of a bucket of `size` rows:
  // steps_per_graph, but one for a bucket past max_batch. Only a step that
  // reads a prompt's chunk needs such a bucket (a token budget,
  // baton/batch_policy.h), the step after the prompt's last chunk never
  // stays in it, and the steps a bucket change empties still run the
  // kernels that cannot return early: cuBLASLt's GEMMs cost a Llama-3.2-1B
  // 512-row bucket ~1.3 ms per emptied step (H100 trace, 2026-11-25,
  // results/h100-2026-11-25-trace-tail-prompt1000-llama-3.2-1b.json).
  [[nodiscard]] std::uint32_t StepsFor(std::uint32_t size) const {
    return size > max_batch ? 1u : steps_per_graph;
  }
  // Each certified or built graph's name starts with this (Status messages).
  std::string program_name;
};

class EngineDriver {
 public:
  virtual ~EngineDriver() = default;
  // Captures, certifies and uploads what the engine runs and writes its
  // parameters to device memory (Build). Once per runtime: after a call that
  // succeeded, later calls do nothing.
  [[nodiscard]] absl::Status Prepare(const StepProgram& program, const EngineSetup& setup);
  [[nodiscard]] bool prepared() const { return prepared_; }
  // One run of the device loop, launched from the host on `stream`.
  [[nodiscard]] virtual absl::Status Launch(cudaStream_t stream) = 0;
  // Forgets any step decision the engine carried between nodes (Abort ended
  // the loop and emptied the batch).
  [[nodiscard]] virtual absl::Status Reset() { return absl::OkStatus(); }
  // Adds what this engine knows to a device failure's Status.
  [[nodiscard]] virtual absl::Status ExplainFailure(absl::Status why,
                                                    std::uint32_t /*error_word*/) const {
    return why;
  }

 private:
  [[nodiscard]] virtual absl::Status Build(const StepProgram& program,
                                           const EngineSetup& setup) = 0;
  bool prepared_ = false;
};

// A bucket table of sizes only, copied to `storage` (device memory): what
// the scheduler chooses among when it launches no bucket graph (the
// conditional engine's SWITCH runs the chosen body; the dynamic-parallelism
// step launches its own kernels). `entries` carry no graph handles.
[[nodiscard]] absl::StatusOr<DeviceBucketTable> UploadBucketSizes(
    absl::Span<const DeviceBucketEntry> entries, DeviceBuffer<DeviceBucketEntry>& storage);

[[nodiscard]] std::unique_ptr<EngineDriver> CreateEngineDriver(Engine engine);

}  // namespace baton::detail
