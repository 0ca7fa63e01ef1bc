// samples/decode_loop/drivers.h: the host loop and the engines, timed.
#include "decode_loop/drivers.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/status.h"

namespace baton::samples {
namespace {

// Reads the tokens and step clock of a finished run (rank 0's tables).
absl::Status Collect(DecoderModel& model, const std::vector<Completion>& completions,
                     std::uint64_t first_step, RunResult& result) {
  for (const Completion& c : completions) {
    if (c.value == kRefusedRequest) {
      return absl::InternalError(absl::StrCat("entry ", c.id, " was refused"));
    }
    result.tokens += c.value;
    BATON_ASSIGN_OR_RETURN(result.tokens_by_entry[c.id], model.ReadGenerated(c.id, c.value));
  }
  const std::uint32_t n = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(result.steps, model.options().step_clock_size));
  BATON_ASSIGN_OR_RETURN(std::vector<std::uint64_t> ends,
                         model.ReadStepEnds(first_step + result.steps - n, n));
  for (std::size_t i = 1; i < ends.size(); ++i) {
    result.step_us.push_back(static_cast<double>(ends[i] - ends[i - 1]) * 1e-3);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<EngineChoice>> ParseEngines(const std::string& text,
                                                       const std::string& gemm, int tp) {
  std::vector<EngineChoice> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (part == "host") {
      out.push_back({"host", "host graph + sync", true});
    } else if (part == "tail") {
      out.push_back({"tail", "Baton tail-launch", false, Engine::kTailLaunch});
    } else if (part == "tail2") {
      out.push_back(
          {"tail2", "Baton tail-launch, 2 steps per launch", false, Engine::kTailLaunch, 2});
    } else if (part == "conditional2") {
      out.push_back({"conditional2", "Baton conditional, 2 steps per iteration", false,
                     Engine::kConditional, 2, 2});
    } else if (part == "conditional") {
      out.push_back({"conditional", "Baton conditional", false, Engine::kConditional});
    } else if (part == "dp") {
      out.push_back({"dp", "Baton dynamic parallelism", false, Engine::kDynamicParallelism});
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--engines: unknown driver '", part,
                       "'; use host, tail, tail2, conditional, conditional2, dp"));
    }
  }
  if (out.empty() || !out.front().host) {
    return absl::InvalidArgumentError(
        "--engines must start with host: the baseline every engine is compared against");
  }
  for (const EngineChoice& choice : out) {
    if (choice.engine == Engine::kDynamicParallelism && !choice.host && gemm != "gemv") {
      return absl::InvalidArgumentError(
          "--engines: dp runs the decoder's device step, whose projections are always Baton's "
          "GEMV, so with --gemm=cublaslt or auto its tokens would differ from the other drivers': "
          "pass "
          "--gemm=gemv, or drop dp from --engines");
    }
    if (choice.engine == Engine::kDynamicParallelism && !choice.host && tp > 1) {
      return absl::InvalidArgumentError(
          "--engines: dp runs one GPU's model (its lockstep is not measured): drop dp from "
          "--engines, or --tp=1");
    }
  }
  return out;
}

absl::StatusOr<RunResult> RunHost(ModelRanks& ranks, HostLoop& loop,
                                  const std::vector<DecodeRequest>& requests) {
  DecoderModel& model = ranks.lead();
  BATON_RETURN_IF_ERROR(ranks.WriteRequests(requests));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(model.WorkItemFor(i));
  std::vector<Completion> completions;
  RunResult result;
  const std::uint64_t first = loop.steps();
  const auto t0 = std::chrono::steady_clock::now();
  BATON_RETURN_IF_ERROR(loop.Run(items, first, completions));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.steps = loop.steps() - first;
  BATON_RETURN_IF_ERROR(ranks.CheckFaults());
  BATON_RETURN_IF_ERROR(Collect(model, completions, first, result));
  return result;
}

absl::StatusOr<RunResult> RunEngine(ModelRanks& ranks, const RuntimeOptions& options,
                                    const EngineChoice& choice,
                                    const std::vector<DecodeRequest>& requests,
                                    std::optional<RankRuntimes>& runtimes) {
  DecoderModel& model = ranks.lead();
  BATON_RETURN_IF_ERROR(ranks.WriteRequests(requests));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(model.WorkItemFor(i));
  if (ranks.size() > 1) runtimes.reset();  // the last run's group, done
  if (!runtimes.has_value()) {
    BATON_ASSIGN_OR_RETURN(RankRuntimes made, RankRuntimes::Create(ranks, options, choice.engine));
    runtimes.emplace(std::move(made));
  }
  BATON_RETURN_IF_ERROR(runtimes->Start());
  Runtime& runtime = runtimes->lead();
  const std::uint64_t first = runtime.stats().steps;
  std::vector<Completion> completions;
  std::vector<Completion> out(256);
  RunResult result;
  const auto t0 = std::chrono::steady_clock::now();
  BATON_RETURN_IF_ERROR(runtime.Submit(items));
  const auto deadline = t0 + std::chrono::seconds(120);
  while (completions.size() < requests.size()) {
    BATON_ASSIGN_OR_RETURN(const size_t n, runtime.Poll(absl::MakeSpan(out)));
    completions.insert(completions.end(), out.begin(), out.begin() + n);
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("only ", completions.size(), " of ", requests.size(), " requests in 120 s"));
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BATON_ASSIGN_OR_RETURN(StopReport report, runtimes->Stop());
  if (!report.completions.empty() || report.still_queued != 0) {
    return absl::InternalError("work left over after every request completed");
  }
  BATON_RETURN_IF_ERROR(ranks.CheckFaults());
  result.steps = runtime.stats().steps - first;
  BATON_RETURN_IF_ERROR(Collect(model, completions, first, result));
  return result;
}

}  // namespace baton::samples
