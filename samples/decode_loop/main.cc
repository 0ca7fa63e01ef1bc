// decode_loop: Baton's purpose end to end. A decoder-only transformer (a
// synthetic preset, or a Hugging Face checkpoint with --checkpoint) serves a
// stream of requests with continuous batching on the GPU: requests
// go into the work queue, the device admits them into free KV-cache slots,
// runs each step with the bucket graph that fits the batch, retires finished
// sequences to the completion mailbox and admits new ones in the same step.
// The same model, requests and kernels are also driven by a host loop (graph
// launch + per-step sync, like PyTorch/vLLM-style loops); every engine must
// produce the same tokens. The dynamic-parallelism driver (dp) launches the
// same kernels from the device with the model's GEMV, so it runs with
// --gemm=gemv only.
//
// Per scenario (model x batch) it reports, for the host loop and each engine:
// step time (mean, p50, p99 from the device's step clock), orchestration
// overhead (step time minus the bound: the same schedule of steps, with the
// same buckets and batches, replayed from multi-step graphs with no per-step
// decision; HostLoop::EnqueueScheduleReplay), tokens/s, and the HBM floor
// (weight bytes / the better of the measured copy and pure-read bandwidths).
//
// --tp n splits each model across GPUs 0..n-1 (common/ranks.h): the host
// loop decides each step once and launches it on every rank; each engine
// runs a Runtime per rank, their device schedulers in lockstep, rank 0's
// taking the work. Tokens and the step clock are rank 0's; the floor is one
// rank's weights (the all-reduces' latency not included: samples/
// tensor_parallel measures it).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"
#include "baton/device.h"
#include "baton/runtime.h"
#include "baton/server.h"
#include "baton/status.h"
#include "baton/trace.h"
#include "common/bandwidth.h"
#include "common/init.h"
#include "common/ranks.h"
#include "common/report.h"
#include "common/timing.h"
#include "decode_loop/drivers.h"
#include "decode_loop/host_loop.h"
#include "decode_loop/parity_dump.h"
#include "decode_loop/presets.h"
#include "decode_loop/soak.h"
#include "decode_loop/token_diff.h"

ABSL_FLAG(std::string, models, "tiny,small",
          "comma-separated model presets: tiny (2 layers, d_model 256), small (4 layers, d_model "
          "1024); ignored with --checkpoint");
ABSL_FLAG(std::string, checkpoint, "",
          "serve this Hugging Face model directory (config.json + safetensors; Llama, Mistral, "
          "Qwen2) instead of --models");
ABSL_FLAG(int, max_context, 0,
          "with --checkpoint: the KV cache's tokens per sequence (0: --prompt_tokens + "
          "--new_tokens)");
ABSL_FLAG(std::string, parity_out, "",
          "with --checkpoint: write PREFIX.json and PREFIX.logits.f32, every driver's sequences "
          "and last-step logits, for scripts/checkpoints/parity.py (needs --requests_per_slot=1 "
          "and --temperature=0)");
ABSL_FLAG(std::string, batches, "1,32", "comma-separated concurrent sequences (max_batch)");
ABSL_FLAG(std::string, engines, "host,tail,tail2,conditional,conditional2",
          "comma-separated drivers: host (host graph launch + sync per step), tail (tail-launch "
          "engine, default steps per launch), tail2 (tail-launch engine, 2 steps per launch), "
          "conditional (conditional engine, default steps per loop iteration), conditional2 (2 "
          "steps per loop iteration), dp (dynamic-parallelism engine: the decoder's device step, "
          "whose decode projections are Baton's GEMV, so dp needs --gemm=gemv; refused otherwise)");
ABSL_FLAG(int, prompt_tokens, 512, "prompt length of every request (read in chunks of the budget)");
ABSL_FLAG(int, max_tokens_per_step, 768,
          "the model's token budget per step (DecoderModelOptions::max_tokens_per_step)");
ABSL_FLAG(int, max_chunk_tokens, 0,
          "most prompt tokens one sequence reads per step (0: the budget; 1: one per step)");
ABSL_FLAG(int, new_tokens, 128, "tokens generated per request (no stop token)");
ABSL_FLAG(int, requests_per_slot, 3, "requests per scenario = batch * this (continuous batching)");
ABSL_FLAG(std::string, gemm, "auto",
          "projections: cublaslt, gemv (Baton's batch-invariant GEMV, norms and residual adds "
          "fused in), or auto (gemv to --gemv_max_bucket, wide GEMV to the next, then cublaslt)");
ABSL_FLAG(int, gemv_max_bucket, baton::DecoderModelOptions{}.auto_gemv_max_bucket,
          "--gemm=auto: the GEMV's largest bucket (auto_gemv_max_bucket)");
ABSL_FLAG(int, wide_gemv_max_bucket, baton::DecoderModelOptions{}.auto_wide_gemv_max_bucket,
          "--gemm=auto: the wide GEMV's largest bucket (at most 64; auto_wide_gemv_max_bucket)");
ABSL_FLAG(std::string, dtype, "",
          "weights and activations: fp16 or bf16 (default: fp16; --checkpoint: the checkpoint's)");
ABSL_FLAG(double, temperature, 0.0, "sampling temperature (0: greedy)");
ABSL_FLAG(int, repeats, 5, "timed runs per driver after one warm-up (medians reported)");
ABSL_FLAG(std::uint64_t, soak_steps, 0,
          "soak mode when > 0: the first --models/--batches entry served by --soak_engine for at "
          "least this many steps with continuous random submissions (e.g. 1000000), on Baton's "
          "batch-invariant GEMV (--gemm=cublaslt is refused: the token check needs it)");
ABSL_FLAG(std::uint64_t, soak_check_every, 256,
          "soak mode: the tokens of every this many requests are checked against a host-loop "
          "replay (and every other checked one repeats an earlier one with a stop token)");
ABSL_FLAG(std::string, soak_engine, "tail", "soak mode's engine: tail or conditional");
ABSL_FLAG(
    std::string, trace, "",
    "write the device trace (Chrome/Perfetto JSON) of the first scenario's first Baton engine "
    "to this file; that engine's timings then include the trace's cost");
ABSL_FLAG(std::uint64_t, seed, 1, "weights, prompts and sampling seed");
ABSL_FLAG(int, tp, 1,
          "GPUs each model is split across (tensor parallelism, GPUs 0..tp-1; common/ranks.h): "
          "every driver runs every rank, the engines' device schedulers in lockstep");

namespace baton::samples {
namespace {

struct Scenario {
  std::string model;
  std::uint32_t batch = 0;
};

// The model of a scenario: a --models preset or the --checkpoint, with the
// flags' dtype, GEMM and sampling.
absl::StatusOr<DecoderModelOptions> ModelOptionsFor(const Scenario& scenario,
                                                    std::uint32_t max_requests) {
  DecoderModelOptions options;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const DecoderDType type = dtype == "bf16" ? DecoderDType::kBFloat16 : DecoderDType::kFloat16;
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  if (options.checkpoint.empty()) {
    BATON_ASSIGN_OR_RETURN(options.config, ModelPreset(scenario.model, type));
  } else {
    if (!dtype.empty()) options.dtype = type;
    const int max_context = absl::GetFlag(FLAGS_max_context);
    options.max_context = static_cast<std::uint32_t>(
        max_context > 0 ? max_context
                        : absl::GetFlag(FLAGS_prompt_tokens) + absl::GetFlag(FLAGS_new_tokens));
  }
  options.weight_seed = absl::GetFlag(FLAGS_seed);
  options.max_batch = scenario.batch;
  options.max_tokens_per_step = static_cast<std::uint32_t>(
      std::max(absl::GetFlag(FLAGS_max_tokens_per_step), static_cast<int>(scenario.batch)));
  options.max_chunk_tokens = static_cast<std::uint32_t>(absl::GetFlag(FLAGS_max_chunk_tokens));
  options.max_requests = max_requests;
  BATON_ASSIGN_OR_RETURN(options.gemm, ParseGemm(absl::GetFlag(FLAGS_gemm)));
  options.auto_gemv_max_bucket = static_cast<std::uint32_t>(absl::GetFlag(FLAGS_gemv_max_bucket));
  options.auto_wide_gemv_max_bucket =
      static_cast<std::uint32_t>(absl::GetFlag(FLAGS_wide_gemv_max_bucket));
  options.sampling = SamplingParams{static_cast<float>(absl::GetFlag(FLAGS_temperature)),
                                    absl::GetFlag(FLAGS_seed)};
  return options;
}

absl::Status RunScenario(const Scenario& scenario, const std::vector<EngineChoice>& engines,
                         double bandwidth, bool trace, Report& report, ParityDump* parity) {
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const std::uint32_t batch = scenario.batch;
  const std::uint32_t request_count = batch * absl::GetFlag(FLAGS_requests_per_slot);
  BATON_ASSIGN_OR_RETURN(const DecoderModelOptions options,
                         ModelOptionsFor(scenario, std::max<std::uint32_t>(request_count, 2)));
  const int tp = absl::GetFlag(FLAGS_tp);
  BATON_ASSIGN_OR_RETURN(ModelRanks ranks, LoadRanks(options, tp));
  DecoderModel* const model = &ranks.lead();  // rank 0: the tokens and the step clock
  const DecoderConfig& config = model->config();
  if (parity != nullptr) {  // as the model serves the checkpoint
    parity->dtype = config.dtype;
    parity->vocab = config.vocab;
  }
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 7919 + batch);
  std::vector<DecodeRequest> requests(request_count);
  for (std::uint32_t i = 0; i < request_count; ++i) {
    requests[i].prompt.resize(absl::GetFlag(FLAGS_prompt_tokens));
    for (auto& t : requests[i].prompt) t = static_cast<std::int32_t>(rng() % config.vocab);
    requests[i].max_new_tokens = absl::GetFlag(FLAGS_new_tokens);
    requests[i].sequence_id = i;
  }
  const std::vector<StepProgram> programs = ranks.Programs();
  const StepProgram& program = programs[0];
  const std::string name =
      absl::StrCat(scenario.model, " b", batch, tp > 1 ? absl::StrCat(" tp", tp) : "");
  const double floor_us = model->weight_bytes() / bandwidth * 1e6;

  // The bound for the same work: every request is queued before the first
  // step and runs its prompt and new_tokens (no stop tokens), so the
  // schedule (the batch, rows and bucket of every step, under the batch
  // policy) is known; it is replayed with no decision and few graph
  // boundaries. A driver that ran another number of steps ran other work:
  // its overhead is not reported.
  BATON_ASSIGN_OR_RETURN(auto host_loop, HostLoop::CreateRanks(programs, ranks.devices));
  const std::uint32_t prompt = static_cast<std::uint32_t>(absl::GetFlag(FLAGS_prompt_tokens));
  const std::vector<ScheduleRun> schedule = ScheduleRuns(
      request_count, prompt, static_cast<std::uint32_t>(absl::GetFlag(FLAGS_new_tokens)), batch,
      program.tokens);
  const std::uint64_t schedule_steps = ScheduleSteps(schedule);
  // Two entries the replay's positions run: one past a 1-token prompt
  // (decoding), one whose prompt is as long as the context (reading).
  const std::uint32_t context = static_cast<std::uint32_t>(config.max_context);
  std::vector<DecodeRequest> replay(2);
  replay[0].prompt = {0};
  replay[0].max_new_tokens = context - 1;
  replay[1].prompt.assign(context - 1, 0);
  replay[1].max_new_tokens = 1;
  BATON_RETURN_IF_ERROR(ranks.WriteRequests(replay));
  BATON_RETURN_IF_ERROR(host_loop->PrepareScheduleReplay(programs, schedule, model->WorkItemFor(0),
                                                         model->WorkItemFor(1)));
  BATON_ASSIGN_OR_RETURN(TimingSummary replay_time,
                         TimeWithEvents(host_loop->stream(), 1, repeats,
                                        [&]() { return host_loop->EnqueueScheduleReplay(); }));
  const double bound_us = replay_time.median_ms * 1e3 / static_cast<double>(schedule_steps);
  report.AddRow()
      .Set("scenario", name)
      .Set("driver", "graph replays of the same steps, no decision (bound)")
      .Set("step_us", bound_us)
      .Set("hbm_floor_us", floor_us)
      .Set("steps", static_cast<std::int64_t>(schedule_steps))
      .Set("steps_per_graph", static_cast<std::int64_t>(HostLoop::kReplayStepsPerGraph));

  const double kNotMeasured = std::numeric_limits<double>::quiet_NaN();
  double host_overhead = kNotMeasured, host_tokens_per_s = 0;
  double best_ratio = 0, worst_ratio = 1e30, best_removed = kNotMeasured;
  std::string below_bound;  // graph engines whose step beat the bound
  RunResult reference_run;
  std::map<std::string, double> tokens_per_s;
  for (const EngineChoice& choice : engines) {
    std::optional<RankRuntimes> runtimes;  // the engine's (RunEngine makes them)
    RuntimeOptions runtime_options;        // max_batch: the program's
    runtime_options.queue_capacity = 1u << 12;
    runtime_options.mailbox_capacity = 1u << 12;
    runtime_options.tail_steps_per_launch = choice.tail_steps_per_launch;
    runtime_options.conditional_steps_per_iteration = choice.conditional_steps_per_iteration;
    if (trace) runtime_options.trace_capacity = 1u << 16;
    std::vector<double> step_means, p50s, p99s, rates;
    RunResult last;
    bool same_steps = true;  // every timed run ran the bound's schedule
    for (int r = 0; r <= repeats; ++r) {
      absl::StatusOr<RunResult> run =
          choice.host ? RunHost(ranks, *host_loop, requests)
                      : RunEngine(ranks, runtime_options, choice, requests, runtimes);
      if (!run.ok()) {
        return absl::Status(run.status().code(),
                            absl::StrCat(name, ", ", choice.label, ": ", run.status().message()));
      }
      std::fprintf(stderr, "[decode_loop] %s, %s: run %d/%d, %llu steps, %.1f ms\n", name.c_str(),
                   choice.label.c_str(), r, repeats, static_cast<unsigned long long>(run->steps),
                   run->seconds * 1e3);
      if (r == 0) continue;  // warm-up (graph capture, cuBLASLt plans, first uploads)
      same_steps = same_steps && run->steps == schedule_steps;
      double sum = 0;
      for (double d : run->step_us) sum += d;
      step_means.push_back(run->step_us.empty() ? 0 : sum / run->step_us.size());
      p50s.push_back(Percentile(run->step_us, 0.5));
      p99s.push_back(Percentile(run->step_us, 0.99));
      rates.push_back(run->tokens / run->seconds);
      last = std::move(*run);
    }
    if (trace && runtimes.has_value()) {
      BATON_ASSIGN_OR_RETURN(const std::vector<TraceEvent> events, runtimes->lead().Trace());
      BATON_RETURN_IF_ERROR(WriteTraceJson(events, absl::GetFlag(FLAGS_trace)));
      report.SetParam("trace", absl::StrCat(absl::GetFlag(FLAGS_trace), " (", name, ", ",
                                            choice.label, ", ", events.size(), " events)"));
      trace = false;
    }
    if (parity != nullptr) {
      std::vector<std::vector<std::int32_t>> generated;
      for (std::uint32_t e = 0; e < request_count; ++e) {
        generated.push_back(last.tokens_by_entry[e]);
      }
      BATON_ASSIGN_OR_RETURN(std::vector<ParitySequence> sequences,
                             FinalSequences(*model, requests, generated));
      parity->runs.push_back({batch, choice.key, std::move(sequences)});
    }
    const double step_us = Median(step_means);
    const double overhead = same_steps ? step_us - bound_us : kNotMeasured;
    const double rate = Median(rates);
    tokens_per_s[choice.label] = rate;
    bool same_tokens = true;
    if (choice.host) {
      host_overhead = overhead;
      host_tokens_per_s = rate;
      reference_run = last;
    } else {
      const std::string difference =
          DescribeTokenDifference(reference_run.tokens_by_entry, last.tokens_by_entry);
      same_tokens = difference.empty();
      if (!same_tokens) {
        report.Fail(absl::StrCat(name, ": ", choice.label,
                                 " generated different tokens from the host loop: ", difference));
      }
    }
    if (last.tokens_by_entry.size() != request_count) {
      report.Fail(absl::StrCat(name, ": ", choice.label, " completed ", last.tokens_by_entry.size(),
                               " of ", request_count, " requests"));
    }
    // The dynamic-parallelism engine is the fallback, slow by nature: the
    // targets are the graph engines'.
    const double removed = choice.host || !(host_overhead > 0)
                               ? kNotMeasured
                               : 100.0 * (1.0 - overhead / host_overhead);
    if (!choice.host && choice.engine != Engine::kDynamicParallelism) {
      best_ratio = std::max(best_ratio, rate / host_tokens_per_s);
      worst_ratio = std::min(worst_ratio, rate / host_tokens_per_s);
      // An engine off the schedule (NaN) takes no part unless all are.
      if (std::isnan(best_removed) || removed > best_removed) best_removed = removed;
      if (overhead < 0) {
        absl::StrAppend(&below_bound, below_bound.empty() ? "" : ", ", choice.label);
      }
    }
    if (!same_steps) {
      report.SetParam(absl::StrCat("off schedule ", name, ", ", choice.label),
                      absl::StrCat("a timed run took other than the bound's ", schedule_steps,
                                   " steps (the last: ", last.steps, "): no overhead reported"));
    }
    Row& row = report.AddRow();
    row.Set("scenario", name)
        .Set("driver", choice.label)
        .Set("step_us", step_us)
        .Set("p50_us", Median(p50s))
        .Set("p99_us", Median(p99s))
        .Set("overhead_us", overhead)
        .Set("tokens_per_s", rate)
        .Set("vs_host", host_tokens_per_s > 0 ? rate / host_tokens_per_s : 1.0)
        .Set("overhead_removed_pct", choice.host ? 0.0 : removed)
        .Set("steps", static_cast<std::int64_t>(last.steps))
        .Set("same_tokens", same_tokens);
  }
  if (!below_bound.empty()) {
    report.SetParam(absl::StrCat("below bound ", name),
                    absl::StrCat(below_bound,
                                 ": faster than the bound (timing noise, or the bound "
                                 "is not one); overhead percentages not meaningful"));
  }
  // The targets, stated beside the measurement (a miss is reported,
  // not a failure: correctness decides Passed).
  if (best_ratio > 0) {
    std::string target;
    if (scenario.model == "small" && batch == 1) {
      if (!below_bound.empty()) {
        target = absl::StrCat("not evaluated: ", below_bound,
                              " ran faster than the bound (timing noise, or the bound is not one)");
      } else if (std::isnan(best_removed)) {
        target = "not evaluated: the host loop or the engines ran off the bound's schedule";
      } else {
        target = absl::StrFormat(
            "best engine removes %.0f%% of the host loop's overhead (target >= 70%%): %s",
            best_removed, best_removed >= 70 ? "met" : "missed");
      }
    } else if (scenario.model == "tiny" && batch == 1) {
      target = absl::StrFormat("best engine %.2fx the host loop's tokens/s (target >= 1.25x): %s",
                               best_ratio, best_ratio >= 1.25 ? "met" : "missed");
    } else if (batch >= 32) {
      target = absl::StrFormat("slowest engine %.2fx the host loop's tokens/s (target >= 1x): %s",
                               worst_ratio, worst_ratio >= 1.0 ? "met" : "missed");
    }
    if (!target.empty()) report.SetParam(absl::StrCat("target ", name), target);
  }
  return absl::OkStatus();
}

absl::Status Run(Report& report) {
  const int tp = absl::GetFlag(FLAGS_tp);
  // (--tp out of range: LoadRanks refuses it, naming the range)
  if (tp > 1 && absl::GetFlag(FLAGS_soak_steps) > 0) {
    return absl::InvalidArgumentError(
        "--soak_steps runs one GPU's model: drop --tp, or run the soak without it");
  }
  BATON_ASSIGN_OR_RETURN(std::vector<EngineChoice> engines,
                         ParseEngines(absl::GetFlag(FLAGS_engines), absl::GetFlag(FLAGS_gemm), tp));
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  std::vector<std::string> models =
      absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  if (!checkpoint.empty()) {
    // The directory's last component names the scenarios.
    std::string dir = checkpoint;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    models = {dir.substr(dir.find_last_of('/') + 1)};
  }
  std::vector<Scenario> scenarios;
  for (const std::string& model : models) {
    for (absl::string_view b :
         absl::StrSplit(absl::GetFlag(FLAGS_batches), ',', absl::SkipEmpty())) {
      std::uint32_t batch = 0;
      if (!absl::SimpleAtoi(b, &batch) || batch == 0 || batch > 256) {
        return absl::InvalidArgumentError(
            absl::StrCat("--batches: '", b, "' is not a batch size in [1, 256]"));
      }
      scenarios.push_back({model, batch});
    }
  }
  const std::string gemm = absl::GetFlag(FLAGS_gemm), dtype = absl::GetFlag(FLAGS_dtype);
  BATON_RETURN_IF_ERROR(ParseGemm(gemm).status());
  if (!dtype.empty() && dtype != "fp16" && dtype != "bf16") {
    return absl::InvalidArgumentError("--dtype must be fp16 or bf16");
  }
  if (absl::GetFlag(FLAGS_repeats) < 1 || absl::GetFlag(FLAGS_prompt_tokens) < 1 ||
      absl::GetFlag(FLAGS_new_tokens) < 2 || absl::GetFlag(FLAGS_requests_per_slot) < 1 ||
      absl::GetFlag(FLAGS_max_context) < 0) {
    return absl::InvalidArgumentError(
        "--repeats, --prompt_tokens, --requests_per_slot must be >= 1, --new_tokens >= 2 and "
        "--max_context >= 0");
  }
  const std::string parity_out = absl::GetFlag(FLAGS_parity_out);
  if (!parity_out.empty() &&
      (checkpoint.empty() || absl::GetFlag(FLAGS_requests_per_slot) != 1 ||
       absl::GetFlag(FLAGS_temperature) != 0.0 || absl::GetFlag(FLAGS_soak_steps) > 0)) {
    return absl::InvalidArgumentError(
        "--parity_out needs --checkpoint (transformers reads it), --requests_per_slot=1 (every "
        "sequence's final logits come from the same last step), --temperature=0 (greedy) and "
        "no --soak_steps");
  }
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"gemm", gemm},
           {"dtype", dtype.empty() ? (checkpoint.empty() ? "fp16" : "checkpoint's") : dtype},
           {"engines", absl::GetFlag(FLAGS_engines)}}) {
    report.SetParam(key, value);
  }
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::int64_t>>{
           {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens)},
           {"gemv_max_bucket", absl::GetFlag(FLAGS_gemv_max_bucket)},
           {"wide_gemv_max_bucket", absl::GetFlag(FLAGS_wide_gemv_max_bucket)},
           {"new_tokens", absl::GetFlag(FLAGS_new_tokens)},
           {"requests_per_slot", absl::GetFlag(FLAGS_requests_per_slot)},
           {"repeats", absl::GetFlag(FLAGS_repeats)},
           {"tp", tp}}) {
    report.SetParam(key, value);
  }
  report.SetParam("temperature", absl::GetFlag(FLAGS_temperature));
  if (!checkpoint.empty()) report.SetParam("checkpoint", checkpoint);
  if (absl::GetFlag(FLAGS_soak_steps) > 0) {
    SoakOptions soak;
    BATON_ASSIGN_OR_RETURN(soak.model,
                           ModelOptionsFor(scenarios.front(), 4 * scenarios.front().batch));
    soak.engine = absl::GetFlag(FLAGS_soak_engine) == "conditional" ? Engine::kConditional
                                                                    : Engine::kTailLaunch;
    soak.steps = absl::GetFlag(FLAGS_soak_steps);
    soak.seed = absl::GetFlag(FLAGS_seed);
    soak.check_every = absl::GetFlag(FLAGS_soak_check_every);
    // The check replays requests in other batches: only the GEMV gives the
    // same tokens there (auto would run cuBLASLt above bucket 8).
    if (gemm == "cublaslt" || soak.check_every < 1) {
      return absl::InvalidArgumentError(
          "--soak_steps runs Baton's batch-invariant GEMV, which the token check needs: drop "
          "--gemm=cublaslt; --soak_check_every must be >= 1");
    }
    soak.model.gemm = DecoderGemm::kBatonGemv;
    // Steps of at most max_batch rows run Baton's GEMV and fused attention,
    // which compute every row alike however prompts are chunked: the check's
    // replays in other batches must give the same bits (README, "Tokens and
    // chunking").
    soak.model.max_tokens_per_step = soak.model.max_batch;
    report.SetParam("soak_gemm", "gemv");
    report.SetParam("soak_model", scenarios.front().model);
    report.SetParam("soak_batch", static_cast<std::int64_t>(soak.model.max_batch));
    return RunSoak(soak, report);
  }
  BATON_ASSIGN_OR_RETURN(Stream stream, CreateStream());
  BATON_ASSIGN_OR_RETURN(const HbmBandwidth hbm, MeasureHbmBandwidth(stream.get()));
  report.SetParam("copy_bandwidth_GBps", hbm.copy_bytes_per_s * 1e-9);
  report.SetParam("read_bandwidth_GBps", hbm.read_bytes_per_s * 1e-9);
  const double bandwidth = hbm.best();
  ParityDump parity;
  parity.checkpoint = checkpoint;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    BATON_RETURN_IF_ERROR(RunScenario(scenarios[i], engines, bandwidth,
                                      i == 0 && !absl::GetFlag(FLAGS_trace).empty(), report,
                                      parity_out.empty() ? nullptr : &parity));
  }
  if (parity_out.empty()) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(WriteParityDump(parity_out, parity));
  report.SetParam("parity_out", parity_out);
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "decode_loop",
      "Serves requests with a small decoder-only transformer, continuously batched on the GPU, "
      "driven by a host loop (graph launch + sync per step) and by each Baton engine; reports "
      "step time, orchestration overhead, tokens/s and whether every driver produced the same "
      "tokens. Needs an H100/H200.",
      baton::samples::Run);
}
