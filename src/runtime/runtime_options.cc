// The runtime's option checks: pure, CPU-testable (runtime_test.cc).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "baton/batch_policy.h"
#include "baton/bucket_table.h"
#include "baton/runtime.h"
#include "baton/status.h"
#include "baton/work_queue.h"
#include "engines/program_checks.h"
#include "loop_state.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxRuntimeBatch = 1u << 16;
constexpr std::uint32_t kDefaultMaxBatch = 64;  // for a program that names none
constexpr std::uint32_t kMinTraceCapacity = 64;
constexpr std::uint32_t kMaxStepsPerGraph = 8;
constexpr std::uint32_t kMaxTraceCapacity = 1u << 24;

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

absl::Status CheckMailboxHoldsBatch(const RuntimeOptions& options, std::uint32_t max_batch) {
  if (max_batch > options.mailbox_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions.mailbox_capacity ", options.mailbox_capacity, " is smaller than max_batch ",
        max_batch,
        ": one step can retire every active item, so the mailbox must hold at least max_batch"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::uint32_t> EffectiveMaxBatch(const StepProgram& program,
                                                const RuntimeOptions& options) {
  if (program.max_batch > kMaxRuntimeBatch) {
    return absl::InvalidArgumentError(absl::StrCat("step program '", program.name,
                                                   "': StepProgram::max_batch ", program.max_batch,
                                                   " is outside [0, ", kMaxRuntimeBatch, "]"));
  }
  if (program.max_batch != 0 && options.max_batch != 0 && program.max_batch != options.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "' runs ", program.max_batch,
                     " items at a time (StepProgram::max_batch) but RuntimeOptions.max_batch is ",
                     options.max_batch,
                     ": leave RuntimeOptions.max_batch 0 (the program's) or make them equal"));
  }
  if (program.max_batch != 0) return program.max_batch;
  return options.max_batch != 0 ? options.max_batch : kDefaultMaxBatch;
}

absl::Status ValidateRuntimeOptions(const RuntimeOptions& options) {
  if (options.lockstep == nullptr && options.lockstep_rank != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.lockstep_rank is ", options.lockstep_rank,
                     " without a group: set RuntimeOptions.lockstep or leave the rank 0"));
  }
  if (options.lockstep != nullptr &&
      (options.lockstep_rank < 0 || options.lockstep_rank >= options.lockstep->ranks())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions.lockstep_rank is ", options.lockstep_rank, "; the group has ",
        options.lockstep->ranks(), " ranks: use one in [0, ", options.lockstep->ranks(), ")"));
  }
  if (options.queue_capacity < 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.queue_capacity ", options.queue_capacity,
                     " is below 32, the scheduler's pop batch: use a power of two >= 32"));
  }
  BATON_RETURN_IF_ERROR(WorkQueue::Validate(detail::QueueOptionsFor(options)));
  if (!IsPowerOfTwo(options.mailbox_capacity) || options.mailbox_capacity < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.mailbox_capacity ", options.mailbox_capacity,
                     " is not a power of two >= 2: round it up to the next power of two"));
  }
  if (options.max_batch > kMaxRuntimeBatch) {
    return absl::InvalidArgumentError(absl::StrCat("RuntimeOptions.max_batch ", options.max_batch,
                                                   " is outside [0, ", kMaxRuntimeBatch,
                                                   "] (0: the step program's own)"));
  }
  BATON_RETURN_IF_ERROR(CheckMailboxHoldsBatch(options, options.max_batch));
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
      options.conditional_steps_per_iteration > kMaxStepsPerGraph) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions.conditional_steps_per_iteration is ",
        options.conditional_steps_per_iteration, "; it must be 1 to ", kMaxStepsPerGraph,
        " (steps per loop body: more saves loop iterations, costs graph size)"));
  }
  if (options.tail_steps_per_launch < 1 || options.tail_steps_per_launch > kMaxStepsPerGraph) {
    return absl::InvalidArgumentError(
        absl::StrCat("RuntimeOptions.tail_steps_per_launch is ", options.tail_steps_per_launch,
                     "; it must be 1 to ", kMaxStepsPerGraph,
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
  const bool device_step = program.device_step.present();
  BATON_ASSIGN_OR_RETURN(const std::uint32_t max_batch, EffectiveMaxBatch(program, options));
  BATON_RETURN_IF_ERROR(CheckMailboxHoldsBatch(options, max_batch));
  BATON_RETURN_IF_ERROR(detail::ValidateDeviceStep(program, max_batch));
  BATON_RETURN_IF_ERROR(detail::ValidateTokenPolicy(program, max_batch));
  BATON_RETURN_IF_ERROR(detail::ValidatePagePolicy(program));
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
  const std::uint32_t rows = StepRowsLimit(program.tokens, max_batch);
  if (program.buckets.back() < rows && !device_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name, "': the largest bucket (", program.buckets.back(),
        ") is smaller than a whole step (", rows,
        program.tokens.budgeted() ? " rows: StepProgram::tokens.max_rows()" : ": max_batch",
        "): add a bucket of at least ", rows, " or lower it"));
  }
  return absl::OkStatus();
}

}  // namespace baton
