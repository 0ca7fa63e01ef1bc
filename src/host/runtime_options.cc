// The runtime's option checks: pure, CPU-testable (runtime_test.cc).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "baton/bucket_table.h"
#include "baton/runtime.h"
#include "baton/status.h"
#include "baton/work_queue.h"
#include "engines/program_checks.h"
#include "loop_state.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxRuntimeBatch = 1u << 16;
constexpr std::uint32_t kMinTraceCapacity = 64;
constexpr std::uint32_t kMaxStepsPerGraph = 8;
constexpr std::uint32_t kMaxTraceCapacity = 1u << 24;

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

}  // namespace

absl::Status ValidateRuntimeOptions(const RuntimeOptions& options) {
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
  BATON_RETURN_IF_ERROR(detail::ValidateDeviceStep(program, options.max_batch));
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

}  // namespace baton
