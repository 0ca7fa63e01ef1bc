#include "support/decoder_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "baton/runtime.h"
#include "baton/trace_event.h"
#include "support/decode_reference.h"
#include "support/poll.h"
#include "support/test_seed.h"

namespace baton::testing {

DecoderConfig TinyDecoderConfig(DecoderDType dtype) {
  DecoderConfig c;
  c.layers = 2;
  c.d_model = 128;
  c.heads = 4;
  c.head_dim = 32;
  c.ffn = 256;
  c.vocab = 512;
  c.max_context = 64;
  c.dtype = dtype;
  return c;
}

DecoderConfig GroupedDecoderConfig(DecoderDType dtype) {
  DecoderConfig c = TinyDecoderConfig(dtype);
  c.max_context = 512;
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.qkv_bias = true;
  c.rope.scaling = RopeScalingType::kLlama3;
  c.rope.factor = 8.0f;
  c.rope.original_max_position_embeddings = 128;
  return c;
}

DecoderConfig SplitDecoderConfig() {
  DecoderConfig c = TinyDecoderConfig(DecoderDType::kBFloat16);
  c.heads = 8;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.qkv_bias = true;
  c.o_bias = true;
  c.max_context = 128;
  return c;
}

namespace {

// The decoder tests share Rng() without a fixture of their own, so this
// listener does what a fixture would: each test draws from the start of the
// seed's sequence (a failed test replays alone, with --gtest_filter), and a
// failed test names the seed.
class SeedEachTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { Rng().seed(TestSeed()); }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::printf("[ seed     ] %s.%s: %s\n", info.test_suite_name(), info.name(),
                  TestSeedNote().c_str());
    }
  }
};

}  // namespace

std::mt19937_64& Rng() {
  static std::mt19937_64 rng = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new SeedEachTest);  // gtest owns it
    return std::mt19937_64(TestSeed());
  }();
  return rng;
}

int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(Rng()); }

std::vector<std::int32_t> RandomPrompt(const DecoderConfig& config, int length) {
  std::vector<std::int32_t> prompt(length);
  for (auto& t : prompt) t = Uniform(0, config.vocab - 1);
  return prompt;
}

std::vector<DecodeRequest> RandomRequests(const DecoderConfig& config, std::size_t count) {
  std::vector<DecodeRequest> requests(count);
  for (std::size_t i = 0; i < count; ++i) {
    requests[i].prompt = RandomPrompt(config, Uniform(1, 16));
    requests[i].max_new_tokens = Uniform(1, 40);
    // Zero to three stop tokens (Llama 3 instruct stops on any of three).
    const int stops = Uniform(0, 3);
    for (int k = 0; k < stops; ++k) requests[i].stop_tokens.push_back(Uniform(0, config.vocab - 1));
    requests[i].sequence_id = i;
  }
  return requests;
}

std::vector<DecodeRequest> RandomKeyedRequests(const DecoderConfig& config, std::size_t count,
                                               int min_prompt, int max_prompt, int min_new,
                                               int max_new) {
  std::vector<DecodeRequest> requests(count);
  for (DecodeRequest& r : requests) {
    r.prompt = RandomPrompt(config, Uniform(min_prompt, max_prompt));
    r.max_new_tokens = Uniform(min_new, max_new);
    r.sequence_id = Rng()();
  }
  return requests;
}

std::map<std::uint32_t, Outcome> RunAtOnce(DecoderModel& model, Engine engine,
                                           const std::vector<DecodeRequest>& requests) {
  RunOptions run;
  run.engine = engine;
  run.chunk = requests.size();
  return RunRequests(model, requests, run).outcomes;
}

RunResult RunRequests(DecoderModel& model, const std::vector<DecodeRequest>& requests,
                      const RunOptions& run) {
  RunResult result;
  RuntimeOptions options;
  options.max_batch = run.max_batch;  // 0: the program's (the model's)
  options.queue_capacity = 4096;
  options.mailbox_capacity = 256;
  if (run.trace) options.trace_capacity = 1u << 16;
  auto runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  if (!runtime.ok()) return result;
  const absl::Status registered =
      (*runtime)->RegisterStepProgram(model.MakeStepProgram(run.buckets));
  EXPECT_TRUE(registered.ok()) << registered;
  EXPECT_TRUE(model.WriteRequests(0, requests).ok());
  std::size_t submitted = 0;
  if (run.submit_before_start && registered.ok()) {
    std::vector<WorkItem> items;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      items.push_back(model.WorkItemFor(static_cast<std::uint32_t>(i)));
    }
    const absl::Status s = (*runtime)->Submit(items);
    EXPECT_TRUE(s.ok()) << s;
    submitted = items.size();
  }
  const absl::Status started = (*runtime)->Start(run.engine);
  EXPECT_TRUE(started.ok()) << started;
  if (!registered.ok() || !started.ok()) return result;
  const char* label = EngineName(run.engine);
  // Submits the next chunk while the loop runs.
  const auto submit_chunk = [&] {
    if (submitted >= requests.size()) return;
    std::vector<WorkItem> items;
    for (std::size_t i = submitted; i < std::min(requests.size(), submitted + run.chunk); ++i) {
      items.push_back(model.WorkItemFor(static_cast<std::uint32_t>(i)));
    }
    const absl::Status s = (*runtime)->Submit(items);
    EXPECT_TRUE(s.ok()) << s;
    submitted += items.size();
  };
  const Polled polled =
      PollCompletions(**runtime, requests.size(), {std::chrono::seconds(60), 64, submit_chunk},
                      [&](const Completion& c) { Account(c, requests.size(), result.outcomes); });
  EXPECT_TRUE(polled.failure.ok()) << label << ": " << polled.failure;
  EXPECT_EQ(polled.completions, requests.size()) << label << ": completions missing";
  result.stats = (*runtime)->stats();
  auto report = (*runtime)->Stop();
  EXPECT_TRUE(report.ok()) << report.status();
  if (run.trace) {
    auto events = (*runtime)->Trace();
    EXPECT_TRUE(events.ok()) << events.status();
    if (events.ok()) {
      for (const TraceEvent& e : *events) {
        if (e.type == TraceEventType::kStepBegin) {
          result.max_batch_seen = std::max(result.max_batch_seen, e.a);
        }
      }
    }
  }
  ReadTokens(model, requests, result.outcomes);
  return result;
}

RunResult RunOnHostLoop(DecoderModel& model, HostDecodeLoop& loop,
                        const std::vector<DecodeRequest>& requests) {
  RunResult result;
  const absl::Status written = model.WriteRequests(0, requests);
  EXPECT_TRUE(written.ok()) << written;
  if (!written.ok()) return result;
  std::vector<WorkItem> items(requests.size());
  for (std::uint32_t i = 0; i < items.size(); ++i) items[i] = model.WorkItemFor(i);
  const absl::StatusOr<std::vector<Completion>> completions = loop.Run(items);
  EXPECT_TRUE(completions.ok()) << "host loop: " << completions.status();
  if (!completions.ok()) return result;
  for (const Completion& c : *completions) Account(c, requests.size(), result.outcomes);
  ReadTokens(model, requests, result.outcomes);
  return result;
}

void Account(const Completion& c, std::size_t requests,
             std::map<std::uint32_t, Outcome>& outcomes) {
  EXPECT_LT(c.id, requests) << "phantom completion";
  Outcome& o = outcomes[c.id];
  o.value = c.value;
  o.steps = c.steps;
  EXPECT_EQ(++o.completions, 1) << "entry " << c.id << " completed twice";
  EXPECT_EQ(c.status, static_cast<std::uint32_t>(CompletionStatus::kCompleted));
}

void ReadTokens(const DecoderModel& model, const std::vector<DecodeRequest>& requests,
                std::map<std::uint32_t, Outcome>& outcomes) {
  for (auto& [entry, o] : outcomes) {
    if (entry >= requests.size() || o.value == kRefusedRequest ||
        o.value > requests[entry].max_new_tokens) {
      continue;
    }
    auto tokens = model.ReadGenerated(entry, o.value);
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    if (tokens.ok()) o.tokens = *tokens;
  }
}

std::uint32_t StepsOf(std::size_t prompt, std::uint32_t value, std::uint32_t chunk) {
  return static_cast<std::uint32_t>((prompt + chunk - 1) / chunk) + value - 1;
}

int CheckCompletionRules(const std::map<std::uint32_t, Outcome>& outcomes,
                         const std::vector<DecodeRequest>& requests, const std::string& label,
                         std::uint32_t chunk, bool never_waits) {
  EXPECT_EQ(outcomes.size(), requests.size()) << label;
  int stopped = 0;
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    const auto it = outcomes.find(e);
    if (it == outcomes.end()) {
      ADD_FAILURE() << label << ": entry " << e << " never completed";
      continue;
    }
    const Outcome& o = it->second;
    const DecodeRequest& q = requests[e];
    EXPECT_GE(o.value, 1u) << label << " entry " << e;
    EXPECT_LE(o.value, q.max_new_tokens) << label << " entry " << e;
    EXPECT_EQ(o.tokens.size(), o.value) << label << " entry " << e;
    if (o.value >= 1) {
      EXPECT_GE(o.steps, StepsOf(q.prompt.size(), o.value, chunk)) << label << " entry " << e;
      if (never_waits) {
        EXPECT_EQ(o.steps, StepsOf(q.prompt.size(), o.value, chunk)) << label << " entry " << e;
      }
    }
    if (o.value < 1 || o.tokens.size() != o.value) continue;
    // It stopped exactly at its limit or at its first stop token (any of them).
    const auto first_stop = std::find_first_of(o.tokens.begin(), o.tokens.end(),
                                               q.stop_tokens.begin(), q.stop_tokens.end());
    if (o.value < q.max_new_tokens) {
      EXPECT_EQ(first_stop, o.tokens.end() - 1) << label << " entry " << e;
      ++stopped;
    } else {
      EXPECT_TRUE(first_stop == o.tokens.end() || first_stop == o.tokens.end() - 1)
          << label << " entry " << e;
    }
  }
  return stopped;
}

int CheckAgainstReference(reference::StepReference& ref, const DecodeRequest& request,
                          const std::vector<std::int32_t>& tokens, const SamplingParams& sampling,
                          const std::string& what) {
  constexpr double kTieMargin = 0.05;  // logits have unit scale; 1e-2 relative error allows this
  ref.Reset();
  std::vector<float> logits;
  for (std::int32_t t : request.prompt) logits = ref.Step(t);
  int ties = 0;
  const SamplingParams used = request.sampling.value_or(sampling);
  // The penalties and min_tokens from their definitions (baton/decoder_config.h,
  // vLLM's apply_penalties and min_tokens), in double: the repetition
  // penalty on every token of the prompt or generated so far, then the
  // frequency and presence penalties on the generated ones; the stop tokens
  // out of reach before min_tokens. (The device stores the adjusted logit in
  // the logits' 16-bit type: within the tie margin of these.)
  std::map<int, int> generated;
  std::set<int> seen(request.prompt.begin(), request.prompt.end());
  for (std::size_t g = 0; g < tokens.size(); ++g) {
    const int vocab = static_cast<int>(logits.size());
    std::vector<float> adjusted = logits;
    for (const int t : seen) {
      double x = adjusted[t];
      x = x > 0.0 ? x / used.repetition_penalty : x * used.repetition_penalty;
      const auto n = generated.find(t);
      if (n != generated.end()) x -= used.frequency_penalty * n->second + used.presence_penalty;
      adjusted[t] = static_cast<float>(x);
    }
    if (g < used.min_tokens) {
      for (const std::int32_t s : request.stop_tokens) adjusted[s] = -INFINITY;
    }
    std::vector<double> scores(adjusted.begin(), adjusted.end());
    if (used.temperature > 0.0f) {
      scores = reference::SampleScores(adjusted.data(), vocab, used.temperature, used.seed,
                                       request.sequence_id, static_cast<std::uint32_t>(g));
    }
    const int best =
        static_cast<int>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    const int got = tokens[g];
    if (got != best) {
      EXPECT_TRUE(got >= 0 && got < vocab && scores[got] >= scores[best] - kTieMargin)
          << what << " token " << g << ": device " << got << " (score "
          << (got >= 0 && got < vocab ? scores[got] : 0.0) << "), reference " << best << " (score "
          << scores[best] << ")";
      ++ties;
    }
    if (got >= 0 && got < vocab) {
      ++generated[got];
      seen.insert(got);
    }
    if (g + 1 < tokens.size()) logits = ref.Step(got);
  }
  return ties;
}

}  // namespace baton::testing
