// Which engines a step program can start on (internal; the runtime calls
// these from ValidateStepProgram and Start). A device step changes the
// answer: it needs no graphs and serves batches above every bucket.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "baton/bucket_entry.h"
#include "baton/engine.h"
#include "baton/step_program.h"

namespace baton::detail {

// Part of ValidateStepProgram: the device step, if any, is well formed and
// serves `max_batch` (RuntimeOptions::max_batch).
[[nodiscard]] absl::Status ValidateDeviceStep(const StepProgram& program, std::uint32_t max_batch);

// Part of ValidateStepProgram: the token policy fits the batch (a budget
// holds every decoding item's token).
[[nodiscard]] absl::Status ValidateTokenPolicy(const StepProgram& program, std::uint32_t max_batch);

// Part of ValidateStepProgram: a paged program's page policy is usable.
[[nodiscard]] absl::Status ValidatePagePolicy(const StepProgram& program);

// At Submit: every item of a paged program declares a token bound its
// reserve can hold (InvalidArgument naming the first that does not).
[[nodiscard]] absl::Status ValidatePagedItems(const StepProgram& program,
                                              absl::Span<const WorkItem> items);

// At Start: FailedPrecondition (naming what to set) when `program` cannot run
// on `engine`.
[[nodiscard]] absl::Status CheckProgramFitsEngine(const StepProgram& program,
                                                  std::uint32_t max_batch, Engine engine);

// The sizes the dynamic-parallelism scheduler chooses among: the program's
// buckets, plus StepRowsLimit when it lies above them all (a step outside
// every bucket still runs: the grids follow the actual step). No graph
// handles.
[[nodiscard]] std::vector<DeviceBucketEntry> DynamicParallelismSizes(const StepProgram& program,
                                                                     std::uint32_t max_batch);

}  // namespace baton::detail
