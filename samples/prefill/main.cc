// prefill: what a request costs when its prompt is read in chunks of the
// step's token budget (DecoderModelOptions::max_tokens_per_step) beside the
// sequences that decode, the device scheduler deciding every chunk.
//
// For each batch (requests submitted together) and prompt length, on the
// host loop (graph launch + sync per step, the same batch policy) and each
// Baton engine: the time to first token, from Submit to the first token seen
// on the host (the engines' token stream, DecoderModel::ReadStream; the host
// loop's after the step that produced it), the largest and the median over
// the batch, and the whole request (new_tokens tokens each). Then the mixed
// run: a long prompt arrives while `mixed_decoders` sequences decode; their
// inter-token latency (the device's step clock) over the steps that read the
// prompt's chunks, against their steady step before it. With --budgets
// beyond the first, the 1000-token requests (batches 1 and 8) and the mixed
// run are measured at each budget on the tail-launch engine (the defaults'
// evidence).
//
// Verified: every request completes with its new_tokens tokens, the engines'
// tokens are the host loop's, and the streamed tokens are the final ones.
// --tp n splits the model across GPUs 0..n-1 (common/ranks.h); rank 0's
// stream and step clock are read. Each driver's measurements run before the
// next driver starts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/decoder_model.h"
#include "baton/device.h"
#include "baton/runtime.h"
#include "baton/server.h"
#include "baton/status.h"
#include "common/init.h"
#include "common/ranks.h"
#include "common/report.h"
#include "common/timing.h"
#include "decode_loop/host_loop.h"
#include "decode_loop/presets.h"

ABSL_FLAG(
    std::string, checkpoint, "",
    "serve this Hugging Face model directory (e.g. one scripts/checkpoints/make_checkpoint.py "
    "wrote) instead of --model");
ABSL_FLAG(std::string, model, "small", "with no --checkpoint: a synthetic preset, tiny or small");
ABSL_FLAG(std::string, prompts, "128,512,1000,2000,4000", "prompt lengths (tokens)");
ABSL_FLAG(std::string, batches, "1,8", "requests submitted together");
ABSL_FLAG(int, new_tokens, 128, "tokens each request generates (no stop token)");
ABSL_FLAG(std::string, engines, "host,tail,conditional,dp",
          "drivers: host (host graph launch + sync per step), tail, conditional, dp");
ABSL_FLAG(std::string, budgets, "768:2048",
          "budgets, each max_tokens_per_step or max_tokens_per_step:max_tokens_without_decodes "
          "(alone: the model's default for the second): the first runs everything, the others "
          "the 1000-token requests and the mixed run");
ABSL_FLAG(std::string, gemm, "auto", "projections: auto, cublaslt or gemv (Baton's own kernels)");
ABSL_FLAG(int, mixed_decoders, 16, "sequences decoding when the mixed run's prompt arrives");
ABSL_FLAG(int, mixed_prompt, 2000, "the mixed run's prompt (tokens)");
ABSL_FLAG(int, repeats, 3, "timed runs per measurement after one warm-up (medians reported)");
ABSL_FLAG(std::uint64_t, seed, 1, "weights and prompts");
ABSL_FLAG(int, tp, 1,
          "GPUs the model is split across (tensor parallelism, GPUs 0..tp-1; common/ranks.h): "
          "the host loop launches every rank, each engine runs a Runtime per rank in lockstep");

namespace baton::samples {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One timed batch of requests on one driver.
struct Timed {
  double ttft_max_ms = 0, ttft_p50_ms = 0, request_ms = 0;
  std::map<std::uint32_t, std::vector<std::int32_t>> tokens;  // by entry
};

// A driver: the host loop, or an engine through a runtime per rank
// (common/ranks.h), made and started for the driver's measurements and
// stopped after them.
struct Driver {
  std::string key, label;
  bool host = false;
  Engine engine = Engine::kTailLaunch;
  std::optional<RankRuntimes> runtimes;
  Runtime& runtime() { return runtimes->lead(); }
};

class Bench {
 public:
  Bench(DecoderModel& model, HostLoop& host, Report& report)
      : model_(model), host_(host), report_(report) {}

  // Entries [0, n) hold the batch; returns when all completed.
  absl::StatusOr<Timed> Run(Driver& d, std::uint32_t n) {
    std::vector<WorkItem> items;
    for (std::uint32_t i = 0; i < n; ++i) items.push_back(model_.WorkItemFor(i));
    std::vector<double> first(n, -1);
    std::vector<std::vector<std::int32_t>> streamed(n);
    Timed t;
    const Clock::time_point t0 = Clock::now();
    const auto watch = [&]() -> absl::Status {
      for (std::uint32_t e = 0; e < n; ++e) {
        if (first[e] >= 0) continue;
        BATON_RETURN_IF_ERROR(model_.ReadStream(e, 0, streamed[e]).status());
        if (!streamed[e].empty()) first[e] = Ms(Clock::now() - t0);
      }
      return absl::OkStatus();
    };
    std::vector<Completion> done;
    if (d.host) {
      absl::Status watched = absl::OkStatus();
      BATON_RETURN_IF_ERROR(host_.Run(items, host_.steps(), done, [&] {
        if (watched.ok()) watched = watch();
      }));
      BATON_RETURN_IF_ERROR(watched);
    } else {
      BATON_RETURN_IF_ERROR(d.runtime().Submit(items));
      std::vector<Completion> out(64);
      const Clock::time_point deadline = t0 + std::chrono::seconds(60);
      while (done.size() < n) {
        BATON_RETURN_IF_ERROR(watch());
        BATON_ASSIGN_OR_RETURN(const std::size_t k, d.runtime().Poll(absl::MakeSpan(out)));
        done.insert(done.end(), out.begin(), out.begin() + k);
        if (Clock::now() > deadline) return absl::DeadlineExceededError("60 s without finishing");
      }
    }
    t.request_ms = Ms(Clock::now() - t0);
    for (const Completion& c : done) {
      BATON_ASSIGN_OR_RETURN(t.tokens[c.id], model_.ReadGenerated(c.id, c.value));
      // A first token the watch missed (it came with the completion) is
      // seen now.
      if (first[c.id] < 0) first[c.id] = t.request_ms;
      std::vector<std::int32_t> rest = streamed[c.id];
      BATON_RETURN_IF_ERROR(model_.ReadStream(c.id, rest.size(), rest).status());
      if (rest != t.tokens[c.id])
        report_.Fail(
            absl::StrCat(d.label, ": entry ", c.id, " streamed other tokens than it generated"));
    }
    t.ttft_max_ms = *std::max_element(first.begin(), first.end());
    t.ttft_p50_ms = Percentile(first, 0.5);
    return t;
  }

 private:
  DecoderModel& model_;
  HostLoop& host_;
  Report& report_;
};

std::vector<DecodeRequest> Requests(const DecoderConfig& config, std::uint32_t n,
                                    std::uint32_t prompt, std::uint32_t new_tokens,
                                    std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<DecodeRequest> requests(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    requests[i].prompt.resize(prompt);
    for (auto& t : requests[i].prompt) t = static_cast<std::int32_t>(rng() % config.vocab);
    requests[i].max_new_tokens = new_tokens;
    requests[i].sequence_id = i;
  }
  return requests;
}

// A --budgets entry: max_tokens_per_step, and max_tokens_without_decodes
// when it names one.
struct Budget {
  std::uint32_t per_step = 0;
  std::optional<std::uint32_t> without_decodes;
};

absl::StatusOr<std::vector<Budget>> ParseBudgets(const std::string& flag) {
  std::vector<Budget> budgets;
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    Budget b;
    std::uint32_t alone = 0;
    if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &b.per_step) || b.per_step == 0 ||
        (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &alone))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budgets: '", entry,
                       "' is not N or N:M (max_tokens_per_step, optionally with "
                       "max_tokens_without_decodes), e.g. 512 or 512:2048"));
    }
    if (parts.size() == 2) b.without_decodes = alone;
    budgets.push_back(b);
  }
  if (budgets.empty()) return absl::InvalidArgumentError("--budgets: give at least one budget");
  return budgets;
}

absl::StatusOr<DecoderModelOptions> ModelOptions(const Budget& budget, std::uint32_t max_batch,
                                                 std::uint32_t context) {
  DecoderModelOptions options;
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  if (options.checkpoint.empty()) {
    BATON_ASSIGN_OR_RETURN(options.config,
                           ModelPreset(absl::GetFlag(FLAGS_model), DecoderDType::kBFloat16));
    options.config.max_context = static_cast<int>(context);
  } else {
    options.max_context = context;
  }
  options.weight_seed = absl::GetFlag(FLAGS_seed);
  options.max_batch = max_batch;
  options.max_tokens_per_step = std::max(budget.per_step, max_batch);
  if (budget.without_decodes) options.max_tokens_without_decodes = *budget.without_decodes;
  options.max_requests = max_batch;
  BATON_ASSIGN_OR_RETURN(options.gemm, ParseGemm(absl::GetFlag(FLAGS_gemm)));
  return options;
}

// The mixed run on `d`: decoders decoding, then the long prompt; rows of
// step-clock durations. Returns false in `ok` when a check failed.
absl::Status MixedRun(ModelRanks& ranks, Driver& d, Report& report) {
  DecoderModel& model = ranks.lead();
  const std::uint32_t budget = model.options().max_tokens_per_step;
  const std::uint32_t decoders = absl::GetFlag(FLAGS_mixed_decoders);
  const std::uint32_t prompt = absl::GetFlag(FLAGS_mixed_prompt);
  const DecoderConfig& config = model.config();
  // Decoders: 128-token prompts generating long enough to outlast the run.
  std::vector<DecodeRequest> requests =
      Requests(config, decoders + 1, 128, 256, absl::GetFlag(FLAGS_seed) + 11);
  requests[decoders].prompt.resize(prompt, 1);
  requests[decoders].max_new_tokens = 4;
  BATON_RETURN_IF_ERROR(ranks.WriteRequests(requests));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i <= decoders; ++i) items.push_back(model.WorkItemFor(i));
  BATON_RETURN_IF_ERROR(d.runtime().Submit(absl::MakeConstSpan(items).first(decoders)));
  // Steady: every decoder has 48 tokens (its prompt long read).
  std::vector<std::vector<std::int32_t>> streamed(decoders + 1);
  std::vector<Completion> out(64);
  const auto wait_until = [&](const std::function<bool()>& done) -> absl::Status {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
    while (!done()) {
      for (std::uint32_t e = 0; e <= decoders; ++e) {
        BATON_RETURN_IF_ERROR(model.ReadStream(e, streamed[e].size(), streamed[e]).status());
      }
      BATON_ASSIGN_OR_RETURN(const std::size_t k, d.runtime().Poll(absl::MakeSpan(out)));
      (void)k;
      if (Clock::now() > deadline) return absl::DeadlineExceededError("mixed run: 30 s");
    }
    return absl::OkStatus();
  };
  BATON_RETURN_IF_ERROR(wait_until([&] {
    for (std::uint32_t e = 0; e < decoders; ++e) {
      if (streamed[e].size() < 48) return false;
    }
    return true;
  }));
  const std::uint64_t before = d.runtime().stats().steps;
  const Clock::time_point t0 = Clock::now();
  BATON_RETURN_IF_ERROR(d.runtime().Submit({&items[decoders], 1}));
  BATON_RETURN_IF_ERROR(wait_until([&] { return !streamed[decoders].empty(); }));
  const double prompt_ttft = Ms(Clock::now() - t0);
  BATON_RETURN_IF_ERROR(d.runtimes->Stop().status());  // the decoders finish
  // The prompt's admission: the first admit after `before`, bringing the batch to decoders + 1.
  BATON_ASSIGN_OR_RETURN(const std::vector<TraceEvent> events, d.runtime().Trace());
  std::uint64_t admitted = 0;
  for (const TraceEvent& e : events) {
    if (e.type == TraceEventType::kAdmit && e.step >= before && e.b == decoders + 1) {
      admitted = e.step;
      break;
    }
  }
  if (admitted == 0) return absl::InternalError("mixed run: the prompt's admission is not traced");
  const std::uint32_t per_step = std::max(budget, decoders + 1) - decoders;
  const std::uint32_t chunks = (prompt + per_step - 1) / per_step;
  // Durations of steps [admitted - 32, admitted + chunks): steady, then the chunks.
  const std::uint32_t steady_steps = 32;
  BATON_ASSIGN_OR_RETURN(
      const std::vector<std::uint64_t> ends,
      model.ReadStepEnds(admitted - steady_steps - 1, steady_steps + chunks + 1));
  std::vector<double> steady, itl;
  for (std::size_t i = 1; i < ends.size(); ++i) {
    const double ms = static_cast<double>(ends[i] - ends[i - 1]) * 1e-6;
    (i <= steady_steps ? steady : itl).push_back(ms);
  }
  const double steady_ms = Percentile(steady, 0.5);
  report.AddRow()
      .Set("kind", "mixed")
      .Set("driver", d.label)
      .Set("max_tokens_per_step", static_cast<std::int64_t>(budget))
      .Set("max_tokens_without_decodes",
           static_cast<std::int64_t>(model.options().max_tokens_without_decodes))
      .Set("decoders", static_cast<std::int64_t>(decoders))
      .Set("prompt_tokens", static_cast<std::int64_t>(prompt))
      .Set("prompt_steps", static_cast<std::int64_t>(chunks))
      .Set("steady_step_ms", steady_ms)
      .Set("itl_p50_ms", Percentile(itl, 0.5))
      .Set("itl_p99_ms", Percentile(itl, 0.99))
      .Set("itl_p99_over_steady", Percentile(itl, 0.99) / steady_ms)
      .Set("prompt_ttft_ms", prompt_ttft);
  return absl::OkStatus();
}

absl::Status Run(Report& report) {
  BATON_ASSIGN_OR_RETURN(const auto prompts,
                         ParsePositiveList(absl::GetFlag(FLAGS_prompts), "prompts"));
  BATON_ASSIGN_OR_RETURN(const auto batches,
                         ParsePositiveList(absl::GetFlag(FLAGS_batches), "batches"));
  BATON_ASSIGN_OR_RETURN(const std::vector<Budget> budgets,
                         ParseBudgets(absl::GetFlag(FLAGS_budgets)));
  const std::uint32_t new_tokens = absl::GetFlag(FLAGS_new_tokens);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int tp = absl::GetFlag(FLAGS_tp);
  // (--tp out of range: LoadRanks refuses it, naming the range)
  const std::uint32_t decoders = absl::GetFlag(FLAGS_mixed_decoders);
  const std::uint32_t mixed_prompt = absl::GetFlag(FLAGS_mixed_prompt);
  if (new_tokens < 1 || repeats < 1 || absl::GetFlag(FLAGS_mixed_decoders) < 1) {
    return absl::InvalidArgumentError("--new_tokens, --repeats, --mixed_decoders must be >= 1");
  }
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  const std::uint32_t max_batch =
      std::max(*std::max_element(batches.begin(), batches.end()), decoders + 1);
  const std::uint32_t longest =
      std::max(*std::max_element(prompts.begin(), prompts.end()), mixed_prompt);
  const std::uint32_t context = std::max(longest + new_tokens, 128u + 256u);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"gemm", absl::GetFlag(FLAGS_gemm)},
           {"engines", absl::GetFlag(FLAGS_engines)},
           {"model", absl::GetFlag(FLAGS_checkpoint).empty() ? absl::GetFlag(FLAGS_model)
                                                             : absl::GetFlag(FLAGS_checkpoint)}}) {
    report.SetParam(key, value);
  }
  report.SetParam("new_tokens", static_cast<std::int64_t>(new_tokens));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));
  report.SetParam("tp", static_cast<std::int64_t>(tp));
  report.SetParam("max_batch", static_cast<std::int64_t>(max_batch));
  report.SetParam("timing",
                  "host clock from Submit (or the host loop's start) to the first token "
                  "read from the token stream, and to the last completion; medians of "
                  "the repeats");
  for (std::size_t b = 0; b < budgets.size(); ++b) {
    BATON_ASSIGN_OR_RETURN(const DecoderModelOptions options,
                           ModelOptions(budgets[b], max_batch, context));
    const std::uint32_t budget = options.max_tokens_per_step;
    const std::uint32_t alone = options.max_tokens_without_decodes;
    BATON_ASSIGN_OR_RETURN(ModelRanks ranks, LoadRanks(options, tp));
    DecoderModel* const model = &ranks.lead();  // rank 0: tokens, stream, step clock
    if (b == 0) {
      report.SetParam("weight_bytes", static_cast<std::int64_t>(model->weight_bytes()));
      report.SetParam("context_limit", model->info().context_limit);
    }
    BATON_ASSIGN_OR_RETURN(auto host, HostLoop::CreateRanks(ranks.Programs(), ranks.devices));
    std::vector<Driver> drivers;
    for (absl::string_view key :
         absl::StrSplit(absl::GetFlag(FLAGS_engines), ',', absl::SkipEmpty())) {
      Driver d;
      d.key = std::string(key);
      if (key == "host") {
        d.host = true;
        d.label = "Baton host loop";
      } else if (key == "tail" || key == "conditional" || key == "dp") {
        d.engine = key == "tail" ? Engine::kTailLaunch
                   : key == "dp" ? Engine::kDynamicParallelism
                                 : Engine::kConditional;
        d.label = key == "tail" ? "Baton tail-launch"
                  : key == "dp" ? "Baton dynamic parallelism"
                                : "Baton conditional";
        if (key == "dp" && tp > 1) {
          return absl::InvalidArgumentError(
              "--engines: dp runs one GPU's model (its lockstep is not measured): drop dp, or "
              "--tp=1");
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--engines: unknown driver '", key, "'"));
      }
      drivers.push_back(std::move(d));
    }
    Bench bench(*model, *host, report);
    // The first driver's tokens, by (batch, prompt).
    std::map<std::pair<std::uint32_t, std::uint32_t>,
             std::map<std::uint32_t, std::vector<std::int32_t>>>
        reference;
    // One driver at a time: two lockstep groups must not run on the same
    // GPUs at once (common/ranks.h).
    for (Driver& d : drivers) {
      if (b > 0 && d.key != "tail") continue;
      if (!d.host) {
        RuntimeOptions runtime_options;  // max_batch: the program's
        runtime_options.trace_capacity = 1u << 16;
        BATON_ASSIGN_OR_RETURN(RankRuntimes runtimes,
                               RankRuntimes::Create(ranks, runtime_options, d.engine));
        d.runtimes.emplace(std::move(runtimes));
        BATON_RETURN_IF_ERROR(d.runtimes->Start());
      }
      for (std::uint32_t batch : batches) {
        for (std::uint32_t prompt : prompts) {
          if (b > 0 && prompt != 1000) continue;  // the sweep's requests
          const std::vector<DecodeRequest> requests = Requests(
              model->config(), batch, prompt, new_tokens, absl::GetFlag(FLAGS_seed) + prompt);
          std::vector<double> ttft, p50, request;
          Timed last;
          for (int r = 0; r <= repeats; ++r) {
            BATON_RETURN_IF_ERROR(ranks.WriteRequests(requests));
            BATON_ASSIGN_OR_RETURN(last, bench.Run(d, batch));
            if (r == 0) continue;  // warm-up: first launches, cuBLASLt's first use
            ttft.push_back(last.ttft_max_ms);
            p50.push_back(last.ttft_p50_ms);
            request.push_back(last.request_ms);
          }
          BATON_RETURN_IF_ERROR(ranks.CheckFaults());
          bool same = true;
          for (const auto& [entry, tokens] : last.tokens)
            same = same && tokens.size() == new_tokens;
          if (!same) report.Fail(absl::StrCat(d.label, ": a request ended early"));
          // The dynamic-parallelism engine runs Baton's own kernels: the
          // others' tokens only with --gemm=gemv.
          const bool comparable = d.key != "dp" || absl::GetFlag(FLAGS_gemm) == "gemv";
          auto& expected = reference[{batch, prompt}];
          if (expected.empty()) {
            expected = last.tokens;
          } else if (comparable && last.tokens != expected) {
            same = false;
            report.Fail(absl::StrCat(d.label, ", batch ", batch, ", prompt ", prompt,
                                     ": other tokens than ", drivers.front().label));
          }
          report.AddRow()
              .Set("kind", "request")
              .Set("driver", d.label)
              .Set("max_tokens_per_step", static_cast<std::int64_t>(budget))
              .Set("max_tokens_without_decodes", static_cast<std::int64_t>(alone))
              .Set("batch", static_cast<std::int64_t>(batch))
              .Set("prompt_tokens", static_cast<std::int64_t>(prompt))
              .Set("new_tokens", static_cast<std::int64_t>(new_tokens))
              .Set("ttft_ms", Percentile(ttft, 0.5))
              .Set("ttft_p50_ms", Percentile(p50, 0.5))
              .Set("request_ms", Percentile(request, 0.5))
              .Set("same_tokens", same);
          std::fprintf(stderr, "[prefill] budget %u:%u, %s, b%u, prompt %u: ttft %.2f ms\n", budget,
                       alone, d.label.c_str(), batch, prompt, Percentile(ttft, 0.5));
        }
      }
      if (d.key == "tail") BATON_RETURN_IF_ERROR(MixedRun(ranks, d, report));
      if (d.runtimes.has_value() && d.runtimes->running()) {
        BATON_RETURN_IF_ERROR(d.runtimes->Stop().status());
      }
      d.runtimes.reset();
      BATON_RETURN_IF_ERROR(ranks.CheckFaults());
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "prefill",
      "Time to first token and whole requests with prompts read in chunks of the step's token "
      "budget, on the host loop and each Baton engine, and decode latency while a long prompt "
      "is read beside them. Needs an H100/H200.",
      baton::samples::Run);
}
