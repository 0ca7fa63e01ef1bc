// long_context: the decode step at long contexts, beside its HBM floor.
//
// For each batch and context, `batch` requests with prompts of `context`
// tokens are read (chunked prefill, a token budget per step) and generate
// long enough that every sequence decodes for about new_tokens steps after
// the last prompt was read, on each engine; the decode step's time is the
// device's step clock (DecoderModel::ReadStepEnds) over those full-batch
// steps (found in the runtime's trace), the median step of each run and the
// median over the runs. The
// floor is what the step must read once, weights and the KV cache of every
// sequence at the measured steps' mean context, over the better of two
// measured HBM bandwidths (common/bandwidth.h): floor_us. Verified: every
// request generates its new_tokens tokens and the engines agree token for
// token. --tp n splits the model across GPUs 0..n-1 (common/ranks.h: a rank's
// slices and runtime per GPU, the device schedulers in lockstep): rank 0's
// runtime takes the work and its step clock times the step; the floor is a
// rank's weights and KV share (the all-reduces' latency not included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"
#include "baton/device.h"
#include "baton/runtime.h"
#include "baton/status.h"
#include "common/bandwidth.h"
#include "common/init.h"
#include "common/ranks.h"
#include "common/report.h"
#include "common/timing.h"

ABSL_FLAG(std::string, checkpoint, "", "the Hugging Face model directory to serve (required)");
ABSL_FLAG(std::string, model, "", "the rows' model label (default: the directory's name)");
ABSL_FLAG(std::string, contexts, "1024,8192,32768", "prompt lengths (tokens)");
ABSL_FLAG(std::string, batches, "1,8", "sequences decoding together");
ABSL_FLAG(int, new_tokens, 64,
          "full-batch decode steps measured (each request generates this many after the "
          "batch's prompts were read)");
ABSL_FLAG(std::string, engines, "tail,conditional", "engines: tail, conditional, dp");
ABSL_FLAG(int, repeats, 3, "timed runs per engine after one warm-up (medians reported)");
ABSL_FLAG(std::uint64_t, seed, 1, "prompts");
ABSL_FLAG(int, tp, 1, "GPUs the model is split across (tensor parallelism; GPUs 0..tp-1)");

namespace baton::samples {
namespace {

// One run: the batch's requests submitted at once; returns the median step
// (µs) over the steps where every sequence decodes (after the last prompt
// chunk, before the first request finishes: the trace's step begins at the
// full batch in the decode bucket), and each entry's tokens.
absl::StatusOr<double> TimedRun(DecoderModel& model, Runtime& runtime, std::uint32_t batch,
                                std::map<std::uint32_t, std::vector<std::int32_t>>& tokens) {
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < batch; ++i) items.push_back(model.WorkItemFor(i));
  const std::uint64_t first_step = runtime.stats().steps;
  BATON_RETURN_IF_ERROR(runtime.Submit(items));
  std::vector<Completion> out(64), done;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (done.size() < batch) {
    BATON_ASSIGN_OR_RETURN(const std::size_t k, runtime.Poll(absl::MakeSpan(out)));
    done.insert(done.end(), out.begin(), out.begin() + k);
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("300 s without finishing the batch");
    }
  }
  for (const Completion& c : done) {
    BATON_ASSIGN_OR_RETURN(tokens[c.id], model.ReadGenerated(c.id, c.value));
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<TraceEvent> events, runtime.Trace());
  std::map<std::uint64_t, TraceEvent> begins;  // this run's steps
  std::uint64_t retired = ~std::uint64_t{0};   // the first step that finished a request
  for (const TraceEvent& e : events) {
    if (e.step < first_step) continue;
    if (e.type == TraceEventType::kStepBegin) begins[e.step] = e;
    if (e.type == TraceEventType::kStepEnd && e.a > 0)
      retired = std::min<std::uint64_t>(retired, e.step);
  }
  const auto last = begins.find(retired);
  if (last == begins.end() || last->second.a != batch) {
    return absl::InternalError("the trace holds no full-batch step finishing a request");
  }
  std::uint64_t from = retired;
  while (begins.count(from - 1) != 0 && begins[from - 1].a == batch &&
         begins[from - 1].b == last->second.b) {
    --from;
  }
  if (retired - from < 8) {
    return absl::InternalError(
        absl::StrCat("only ", retired - from + 1, " full-batch decode steps: raise --new_tokens"));
  }
  // Step s ends at ends[s - from + 1]; step `from` is measured from the end
  // of the step before it.
  BATON_ASSIGN_OR_RETURN(
      const std::vector<std::uint64_t> ends,
      model.ReadStepEnds(from - 1, static_cast<std::uint32_t>(retired - from + 2)));
  std::vector<double> us;
  for (std::size_t i = 1; i < ends.size(); ++i) {
    us.push_back(static_cast<double>(ends[i] - ends[i - 1]) * 1e-3);
  }
  return Median(us);
}

absl::Status Run(Report& report) {
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  if (checkpoint.empty()) return absl::InvalidArgumentError("--checkpoint is required");
  std::string label = absl::GetFlag(FLAGS_model);
  if (label.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(checkpoint, '/', absl::SkipEmpty());
    label = parts.empty() ? checkpoint : parts.back();
  }
  BATON_ASSIGN_OR_RETURN(const auto contexts,
                         ParsePositiveList(absl::GetFlag(FLAGS_contexts), "contexts"));
  BATON_ASSIGN_OR_RETURN(const auto batches,
                         ParsePositiveList(absl::GetFlag(FLAGS_batches), "batches"));
  const int new_tokens = absl::GetFlag(FLAGS_new_tokens);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (new_tokens < 8) return absl::InvalidArgumentError("--new_tokens: at least 8");
  // (--tp out of range: LoadRanks refuses it, naming the range)
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  BATON_ASSIGN_OR_RETURN(auto stream, CreateStream());
  BATON_ASSIGN_OR_RETURN(const HbmBandwidth hbm, MeasureHbmBandwidth(stream.get()));
  report.SetParam("model", label);
  report.SetParam("new_tokens", static_cast<std::int64_t>(new_tokens));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));
  report.SetParam("tp", static_cast<std::int64_t>(tp));
  report.SetParam("hbm_read_gbps", hbm.read_bytes_per_s * 1e-9);
  report.SetParam("hbm_copy_gbps", hbm.copy_bytes_per_s * 1e-9);
  report.SetParam("timing",
                  "device step clock over the decode-only steps after every prompt was read; "
                  "median step per run, median of the runs");
  for (const std::uint32_t batch : batches) {
    for (const std::uint32_t context : contexts) {
      DecoderModelOptions options;
      options.checkpoint = checkpoint;
      options.max_batch = batch;
      options.max_requests = batch;
      // Prompts are read a budget per step; each request generates enough
      // to decode beside all of them for new_tokens steps.
      const std::uint32_t prompt_steps =
          (batch * context + options.max_tokens_per_step - 1) / options.max_tokens_per_step;
      const std::uint32_t generated = new_tokens + prompt_steps;
      options.max_context = context + generated;
      BATON_ASSIGN_OR_RETURN(ModelRanks ranks, LoadRanks(options, tp));
      DecoderModel* const model = ranks.models[0].get();
      const DecoderConfig& c = model->config();
      std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) + context);
      std::vector<DecodeRequest> requests(batch);
      for (std::uint32_t i = 0; i < batch; ++i) {
        requests[i].prompt.resize(context);
        for (auto& t : requests[i].prompt) t = static_cast<std::int32_t>(rng() % c.vocab);
        requests[i].max_new_tokens = generated;
        requests[i].sequence_id = i;
      }
      // The floor at the measured steps' context (the prompt plus what the
      // sequences generated while the others' prompts were read, about).
      const double mean_context = context + prompt_steps / 2.0 + new_tokens / 2.0;
      const double kv_bytes = static_cast<double>(batch) * mean_context * c.layers * 2.0 *
                              c.kv_width() / tp * sizeof(std::uint16_t);
      const double floor_us =
          (static_cast<double>(model->weight_bytes()) + kv_bytes) / hbm.best() * 1e6;
      std::map<std::uint32_t, std::vector<std::int32_t>> reference;
      std::string reference_label;
      for (absl::string_view key :
           absl::StrSplit(absl::GetFlag(FLAGS_engines), ',', absl::SkipEmpty())) {
        const Engine engine = key == "tail" ? Engine::kTailLaunch
                              : key == "dp" ? Engine::kDynamicParallelism
                                            : Engine::kConditional;
        if (key != "tail" && key != "dp" && key != "conditional") {
          return absl::InvalidArgumentError(absl::StrCat("--engines: unknown engine '", key, "'"));
        }
        RuntimeOptions runtime_options;  // max_batch: the program's
        runtime_options.trace_capacity = 1u << 16;
        if (engine == Engine::kDynamicParallelism && tp > 1) {
          return absl::InvalidArgumentError(
              "--engines: dp runs one GPU's model (its lockstep is not measured): drop dp, or "
              "--tp=1");
        }
        BATON_ASSIGN_OR_RETURN(RankRuntimes runtimes,
                               RankRuntimes::Create(ranks, runtime_options, engine));
        BATON_RETURN_IF_ERROR(runtimes.Start());
        std::vector<double> us;
        std::map<std::uint32_t, std::vector<std::int32_t>> tokens;
        for (int r = 0; r <= repeats; ++r) {
          BATON_RETURN_IF_ERROR(ranks.WriteRequests(requests));
          tokens.clear();
          BATON_ASSIGN_OR_RETURN(const double step_us,
                                 TimedRun(*model, runtimes.lead(), batch, tokens));
          if (r > 0) us.push_back(step_us);  // run 0 warms up
        }
        BATON_RETURN_IF_ERROR(runtimes.Stop().status());
        BATON_RETURN_IF_ERROR(ranks.CheckFaults());
        const std::string driver = absl::StrCat("Baton ", key);
        bool complete = tokens.size() == batch;
        for (const auto& [entry, t] : tokens) complete = complete && t.size() == generated;
        if (!complete) report.Fail(absl::StrCat(driver, ": a request ended early"));
        if (reference.empty()) {
          reference = tokens;
          reference_label = driver;
        } else if (key != "dp" && tokens != reference) {  // dp: Baton's GEMM, not cuBLASLt
          report.Fail(absl::StrCat(driver, ", batch ", batch, ", context ", context,
                                   ": other tokens than ", reference_label));
        }
        const double step_us = Median(us);
        report.AddRow()
            .Set("model", label)
            .Set("tp", static_cast<std::int64_t>(tp))
            .Set("batch", static_cast<std::int64_t>(batch))
            .Set("context", static_cast<std::int64_t>(context))
            .Set("driver", driver)
            .Set("us_per_step", step_us)
            .Set("floor_us", floor_us)
            .Set("over_floor", step_us / floor_us)
            .Set("kv_pool_pages", static_cast<std::int64_t>(model->info().kv_pool_pages));
        std::fprintf(stderr, "[long_context] b%u, context %u, %s: %.1f us/step (floor %.1f)\n",
                     batch, context, driver.c_str(), step_us, floor_us);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "long_context",
      "The decode step at long contexts (prompts read in chunks first) on each engine, beside "
      "the step's HBM floor (weights + KV cache read once). Needs an H100/H200 and a checkpoint.",
      baton::samples::Run);
}
