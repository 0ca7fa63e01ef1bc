#include "decode_loop/soak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/bucket_table.h"
#include "baton/runtime.h"
#include "baton/status.h"
#include "decode_loop/soak_check.h"

namespace baton::samples {
namespace {

struct Window {
  double p50_us = 0;
  double p99_us = 0;
  std::size_t steps = 0;
};

// The step clock holds the end stamps of the last step_clock_size steps
// (slot = step % size); sorted, consecutive stamps are consecutive steps.
absl::StatusOr<Window> StepWindow(const DecoderModel& model) {
  BATON_ASSIGN_OR_RETURN(std::vector<std::uint64_t> stamps,
                         model.ReadStepEnds(0, model.options().step_clock_size));
  stamps.erase(std::remove(stamps.begin(), stamps.end(), 0u), stamps.end());
  std::sort(stamps.begin(), stamps.end());
  std::vector<double> gaps;
  for (std::size_t i = 1; i < stamps.size(); ++i)
    gaps.push_back((stamps[i] - stamps[i - 1]) * 1e-3);
  Window w;
  w.steps = gaps.size();
  if (gaps.empty()) return w;
  std::sort(gaps.begin(), gaps.end());
  w.p50_us = gaps[gaps.size() / 2];
  w.p99_us = gaps[std::min(gaps.size() - 1, gaps.size() * 99 / 100)];
  return w;
}

double DeviceUsedMiB() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return static_cast<double>(total - free) / (1 << 20);
}

}  // namespace

absl::Status RunSoak(const SoakOptions& options, Report& report) {
  const std::uint32_t batch = options.model.max_batch;
  const std::uint32_t entries = options.model.max_requests;
  if (entries < 2 * batch) {
    return absl::InvalidArgumentError("soak: max_requests must be at least 2 * max_batch");
  }
  if (options.model.gemm != DecoderGemm::kBatonGemv || options.check_every < 1) {
    return absl::InvalidArgumentError(
        "soak: the token check needs the batch-invariant GEMV (DecoderGemm::kBatonGemv) and "
        "check_every >= 1");
  }
  const double memory_start = DeviceUsedMiB();
  BATON_ASSIGN_OR_RETURN(auto model, DecoderModel::Create(options.model));
  RuntimeOptions runtime_options;  // max_batch: the program's
  runtime_options.queue_capacity = 1u << 14;
  runtime_options.mailbox_capacity = 1u << 14;
  // Far below the 2 s default, so a false alarm in a million steps would show
  // (Poll returns DeadlineExceeded, which ends the soak as a failure).
  runtime_options.watchdog_timeout = absl::Milliseconds(250);
  BATON_ASSIGN_OR_RETURN(auto runtime, Runtime::Create(runtime_options));
  BATON_RETURN_IF_ERROR(runtime->RegisterStepProgram(model->MakeStepProgram()));

  const DecoderConfig& config = model->config();
  std::mt19937_64 rng(options.seed);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  std::vector<DecodeRequest> live(entries);  // what each outstanding entry asked for
  std::vector<bool> outstanding(entries, false);
  std::uint64_t submitted = 0, completed = 0, tokens = 0, bad = 0, sequence = 0;
  SoakChecker checker(options.check_every, entries);
  auto refill = [&](std::uint32_t entry) -> absl::Status {
    DecodeRequest r;
    r.prompt.resize(uniform(1, options.max_prompt));
    for (auto& t : r.prompt) t = static_cast<std::int32_t>(uniform(0, config.vocab - 1));
    const std::uint32_t room = static_cast<std::uint32_t>(config.max_context - r.prompt.size());
    r.max_new_tokens = uniform(1, std::min(options.max_new, room));
    // Zero to three stop tokens, any of which ends the request.
    for (std::uint32_t k = uniform(0, 3); k > 0; --k) {
      r.stop_tokens.push_back(static_cast<std::int32_t>(uniform(0, config.vocab - 1)));
    }
    // Per-request sampling beside the model's default, so that positions of
    // one batch select tokens differently: a quarter greedy, a quarter
    // sampled with a seed of their own.
    const std::uint32_t mode = uniform(0, 3);
    if (mode == 0) r.sampling = SamplingParams{0.0f, 0};
    if (mode == 1) r.sampling = SamplingParams{0.7f, rng()};
    r.sequence_id = sequence++;
    checker.OnSubmit(submitted, entry, rng, r);
    BATON_RETURN_IF_ERROR(model->WriteRequests(entry, {r}));
    live[entry] = std::move(r);
    outstanding[entry] = true;
    const WorkItem item = model->WorkItemFor(entry);
    BATON_RETURN_IF_ERROR(runtime->Submit({&item, 1}));
    ++submitted;
    return absl::OkStatus();
  };

  BATON_RETURN_IF_ERROR(runtime->Start(options.engine));
  for (std::uint32_t e = 0; e < entries; ++e) BATON_RETURN_IF_ERROR(refill(e));
  const double memory_running = DeviceUsedMiB();
  std::vector<Completion> out(1024);
  Window first;
  bool have_first = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_progress = t0, last_check = t0;
  std::uint64_t steps = 0;
  for (;;) {
    BATON_ASSIGN_OR_RETURN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
    for (size_t i = 0; i < n; ++i) {
      const Completion& c = out[i];
      if (c.id >= entries || !outstanding[c.id]) {
        ++bad;  // a phantom or a second completion
        continue;
      }
      outstanding[c.id] = false;
      ++completed;
      const DecodeRequest& r = live[c.id];
      if (c.value == 0 || c.value > r.max_new_tokens || c.steps != r.prompt.size() + c.value - 1) {
        ++bad;
        checker.Forget(c.id);
      } else {
        tokens += c.value;
        if (checker.Wants(c.id)) {
          BATON_ASSIGN_OR_RETURN(std::vector<std::int32_t> got,
                                 model->ReadGenerated(c.id, c.value));
          checker.OnComplete(c.id, std::move(got));
        } else if (c.value < r.max_new_tokens) {
          // Ended early: only on its stop token.
          BATON_ASSIGN_OR_RETURN(std::vector<std::int32_t> got,
                                 model->ReadGenerated(c.id, c.value));
          if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), got.back()) ==
              r.stop_tokens.end()) {
            ++bad;
          }
        }
      }
      if (steps < options.steps) BATON_RETURN_IF_ERROR(refill(c.id));
    }
    const auto now = std::chrono::steady_clock::now();
    if (n == 0 || now - last_check > std::chrono::milliseconds(100)) {
      steps = runtime->stats().steps;
      last_check = now;
      if (!have_first && steps > options.model.step_clock_size + 1024) {
        BATON_ASSIGN_OR_RETURN(first, StepWindow(*model));
        have_first = true;
      }
      if (now - last_progress > std::chrono::seconds(5)) {
        std::fprintf(stderr, "[decode_loop] soak: %llu steps, %llu completed, %llu in flight\n",
                     static_cast<unsigned long long>(steps),
                     static_cast<unsigned long long>(completed),
                     static_cast<unsigned long long>(submitted - completed));
        last_progress = now;
      }
    }
    if (steps >= options.steps && completed == submitted) break;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BATON_ASSIGN_OR_RETURN(const Window last, StepWindow(*model));
  BATON_ASSIGN_OR_RETURN(StopReport stop, runtime->Stop());
  const RuntimeStats stats = runtime->stats();
  const double memory_end = DeviceUsedMiB();
  const std::uint64_t drained = stop.completions.size() + stop.still_queued;
  const std::uint64_t lost = submitted - completed - drained;
  // The engine has stopped: the model is free for the reference loop.
  const auto replay_start = std::chrono::steady_clock::now();
  BATON_RETURN_IF_ERROR(checker.Replay(*model));
  const double replay_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - replay_start).count();

  report.SetParam("soak_watchdog_timeout_ms", static_cast<std::int64_t>(250));
  report.SetParam("soak_seed", static_cast<std::int64_t>(options.seed));
  report.SetParam("soak_check_every", static_cast<std::int64_t>(options.check_every));
  report.SetParam("soak_check_replay_s", replay_seconds);
  report.SetParam("soak_engine",
                  options.engine == Engine::kTailLaunch ? "tail-launch" : "conditional");
  report.AddRow()
      .Set("scenario", "soak")
      .Set("steps", static_cast<std::int64_t>(stats.steps))
      .Set("seconds", seconds)
      .Set("submitted", static_cast<std::int64_t>(submitted))
      .Set("completed", static_cast<std::int64_t>(completed))
      .Set("drained", static_cast<std::int64_t>(drained))
      .Set("lost", static_cast<std::int64_t>(lost))
      .Set("bad_completions", static_cast<std::int64_t>(bad))
      .Set("tokens", static_cast<std::int64_t>(tokens))
      .Set("checked", static_cast<std::int64_t>(checker.checked()))
      .Set("checked_stop_repeats", static_cast<std::int64_t>(checker.repeats()))
      .Set("checked_tokens", static_cast<std::int64_t>(checker.tokens()))
      .Set("mismatched", static_cast<std::int64_t>(checker.mismatched()))
      .Set("first_p50_us", first.p50_us)
      .Set("first_p99_us", first.p99_us)
      .Set("last_p50_us", last.p50_us)
      .Set("last_p99_us", last.p99_us)
      .Set("mem_start_MiB", memory_running)
      .Set("mem_end_MiB", memory_end)
      .Set("mem_before_model_MiB", memory_start);
  if (stats.steps < options.steps) {
    report.Fail(absl::StrCat("soak ran ", stats.steps, " steps, fewer than ", options.steps));
  }
  if (lost != 0 || bad != 0 || stats.submitted != stats.completed + stop.still_queued) {
    report.Fail(absl::StrCat("soak: ", lost, " lost, ", bad, " bad or duplicate completions"));
  }
  if (checker.mismatched() != 0) {
    std::string examples;
    for (const std::string& example : checker.examples()) absl::StrAppend(&examples, "; ", example);
    report.Fail(absl::StrCat("soak: ", checker.mismatched(), " of ", checker.checked(),
                             " checked requests generated wrong tokens", examples));
  }
  if (checker.checked() == 0) report.Fail("soak: no request was checked");
  if (memory_end > memory_running + 1.0) {
    report.Fail(
        absl::StrCat("soak: device memory grew from ", memory_running, " to ", memory_end, " MiB"));
  }
  return absl::OkStatus();
}

}  // namespace baton::samples
