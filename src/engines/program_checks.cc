#include "engines/program_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "baton/batch_policy.h"

namespace baton::detail {

absl::Status ValidateDeviceStep(const StepProgram& program, std::uint32_t max_batch) {
  const DeviceStepProgram& step = program.device_step;
  if (!step.present()) return absl::OkStatus();
  if (step.launch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name,
        "': device_step.launch is null: take the whole DeviceStepProgram from the library that "
        "provides the device step (e.g. DecoderModel::MakeStepProgram)"));
  }
  if (step.params == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name,
        "': device_step.params is null: point it at the step's parameters in device memory"));
  }
  if (step.max_batch != 0 && step.max_batch < max_batch) {
    const std::string fix =
        step.max_batch_option != nullptr
            ? absl::StrCat("set ", step.max_batch_option, " = ", max_batch,
                           " or lower RuntimeOptions.max_batch")
            : absl::StrCat("build the device step for ", max_batch, " or lower max_batch");
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "': its device step serves batches up to ",
                     step.max_batch, " but RuntimeOptions.max_batch is ", max_batch, ": ", fix));
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenPolicy(const StepProgram& program, std::uint32_t max_batch) {
  const TokenPolicy& tokens = program.tokens;
  if (tokens.budgeted() && tokens.max_tokens_per_step < max_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name, "': StepProgram::tokens.max_tokens_per_step (",
        tokens.max_tokens_per_step, ") is below max_batch (", max_batch,
        "): a step must hold one token of every decoding item; raise the budget to at least ",
        max_batch, " or lower max_batch"));
  }
  if (!tokens.budgeted() &&
      (tokens.max_chunk_tokens != 0 || tokens.max_tokens_without_decodes != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name, "': StepProgram::tokens.",
        tokens.max_chunk_tokens != 0 ? "max_chunk_tokens" : "max_tokens_without_decodes", " is ",
        tokens.max_chunk_tokens != 0 ? tokens.max_chunk_tokens : tokens.max_tokens_without_decodes,
        " without a token budget: set tokens.max_tokens_per_step too, or leave it 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePagePolicy(const StepProgram& program) {
  const PagePolicy& pages = program.pages;
  if (!pages.paged()) return absl::OkStatus();
  const auto refuse = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "': StepProgram::pages.", what));
  };
  if ((pages.page_tokens & (pages.page_tokens - 1)) != 0) {
    return refuse(absl::StrCat("page_tokens is ", pages.page_tokens,
                               ": pages hold a power of two of tokens (e.g. 64), or 0 for none"));
  }
  if (pages.pool_pages == 0 || pages.pages_per_slot == 0) {
    return refuse(absl::StrCat("pool_pages is ", pages.pool_pages, " and pages_per_slot ",
                               pages.pages_per_slot,
                               ": a paged program needs at least one of each"));
  }
  if (pages.page_table == nullptr) {
    return refuse(
        "page_table is null: point it at the program's [max_batch][pages_per_slot] "
        "table in device memory");
  }
  return absl::OkStatus();
}

absl::Status ValidatePagedItems(const StepProgram& program, absl::Span<const WorkItem> items) {
  const PagePolicy& pages = program.pages;
  if (!pages.paged()) return absl::OkStatus();
  const std::uint32_t limit =
      pages.pool_pages < pages.pages_per_slot ? pages.pool_pages : pages.pages_per_slot;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::uint32_t bound = ItemTokenBound(items[i]);
    const std::uint32_t need = PagesFor(pages, bound);
    if (bound == 0 || need > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Submit: item ", i, " (id ", items[i].id, ") of step program '", program.name,
          "' declares a token bound of ", bound,
          " (its payload's high 32 bits): a paged program's "
          "items need a bound of 1 to ",
          std::uint64_t{limit} * pages.page_tokens, " tokens (", limit, " pages of ",
          pages.page_tokens,
          ", the smaller of StepProgram::pages.pool_pages and pages_per_slot); nothing was "
          "submitted"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckProgramFitsEngine(const StepProgram& program, std::uint32_t max_batch,
                                    Engine engine) {
  if (engine == Engine::kDynamicParallelism) {
    if (!program.device_step.is_valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Start(Engine::kDynamicParallelism): step program '", program.name,
          "' has no device step: set StepProgram::device_step to a device step program (e.g. "
          "from DecoderModel::MakeStepProgram); device code can launch only kernels linked into "
          "the same device link as Baton's dynamic-parallelism scheduler"));
    }
    return absl::OkStatus();
  }
  const char* name = engine == Engine::kTailLaunch ? "kTailLaunch" : "kConditional";
  if (!program.enqueue || program.buckets.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Start(Engine::", name, "): step program '", program.name,
        "' has no enqueue function or no buckets, so it has no graphs: give both, or start "
        "Engine::kDynamicParallelism"));
  }
  const std::uint32_t rows = StepRowsLimit(program.tokens, max_batch);
  if (program.buckets.back() < rows) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Start(Engine::", name, "): step program '", program.name, "': the largest bucket (",
        program.buckets.back(), ") is smaller than a whole step (", rows,
        program.tokens.budgeted() ? " rows: StepProgram::tokens.max_rows()"
                                  : ": RuntimeOptions.max_batch",
        "), so some steps fit no graph: add a bucket of at least ", rows,
        " or start Engine::kDynamicParallelism (its grids follow the actual step)"));
  }
  return absl::OkStatus();
}

std::vector<DeviceBucketEntry> DynamicParallelismSizes(const StepProgram& program,
                                                       std::uint32_t max_batch) {
  std::vector<DeviceBucketEntry> entries;
  for (std::uint32_t size : program.buckets) entries.push_back({nullptr, size, 0});
  const std::uint32_t rows = StepRowsLimit(program.tokens, max_batch);
  if (program.buckets.empty() || program.buckets.back() < rows) {
    entries.push_back({nullptr, rows, 0});
  }
  return entries;
}

}  // namespace baton::detail
