// Prompts read in chunks (issue 23), end to end on the GPU:
//  - The last step's logits of prompts of 1 to 300 tokens, read in chunks of
//    a 64-row budget beside nothing else, against the CPU reference
//    (support/model_reference.h), for every projection path (cuBLASLt,
//    Baton's GEMV and GEMM, auto), fp16 and bf16, multi-head and grouped
//    attention with biases and llama3 RoPE: chunks of up to max_batch rows
//    run the fused attention (earlier keys of the chunk from this step's
//    rows), longer ones the appended chunks' attention; and with Baton's own
//    kernels every engine computes the same bits.
//  - A prompt fed in chunks gives the tokens of one fed a token per step:
//    bit for bit while its chunks stay within max_batch rows (Baton's GEMV
//    and fused attention compute every row alike), within the near-tie rule
//    against the reference above (other kernels, other sums).
//  - Decoding sequences beside prompts being read: every token against the
//    reference, teacher-forced.
//  - The token stream: each request's streamed tokens are its final ones, in
//    order, some seen before the request completes; a reader that fell
//    behind the stream's window gets the missed ones copied.
//  - A request longer than the context is refused naming what set the
//    limit, and the request in flight beside it is unaffected.
// Tolerances as decoder_model_gpu_test.cc states them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/runtime.h"
#include "kernels/decoder_weights.h"
#include "support/decode_reference.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/model_reference.h"
#include "support/poll.h"

namespace baton::testing {
namespace {

// The tiny model (4 heads of 32) with a context long enough for the prompts.
DecoderConfig Tiny(DecoderDType dtype) {
  DecoderConfig c = TinyDecoderConfig(dtype);
  c.max_context = 512;
  return c;
}

// Grouped-query attention (8 query heads on 2), heads of 64, q/k/v biases,
// llama3 RoPE.
DecoderConfig Grouped(DecoderDType dtype) { return GroupedDecoderConfig(dtype); }

const char* GemmName(DecoderGemm gemm) {
  switch (gemm) {
    case DecoderGemm::kCublasLt:
      return "cublaslt";
    case DecoderGemm::kBatonGemv:
      return "baton";
    case DecoderGemm::kAuto:
      break;
  }
  return "auto";
}

double LogitError(const std::vector<float>& got, const std::vector<float>& want) {
  return reference::RelativeError(std::vector<double>(got.begin(), got.end()),
                                  std::vector<double>(want.begin(), want.end()));
}

class DecoderPrefillTest : public GpuTest {};

TEST_F(DecoderPrefillTest, ChunkedPromptsMatchTheReferenceOnEveryPath) {
  for (DecoderDType dtype : {DecoderDType::kFloat16, DecoderDType::kBFloat16}) {
    for (bool grouped : {false, true}) {
      const DecoderConfig config = grouped ? Grouped(dtype) : Tiny(dtype);
      const std::uint64_t seed = Rng()();
      BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights, GenerateDecoderWeights(config, seed));
      for (int length : {1, 3, 17, 130, 300}) {
        DecodeRequest request;
        request.prompt = RandomPrompt(config, length);
        request.max_new_tokens = 1;
        reference::ReferenceDecoder ref(weights);
        std::vector<float> expected;
        for (std::int32_t t : request.prompt) expected = ref.Step(t);
        for (DecoderGemm gemm :
             {DecoderGemm::kCublasLt, DecoderGemm::kBatonGemv, DecoderGemm::kAuto}) {
          DecoderModelOptions options;
          options.config = config;
          options.weight_seed = seed;
          options.max_batch = 4;
          options.max_tokens_per_step = 64;        // 130 tokens: chunks of 64, 64, 2
          options.max_tokens_without_decodes = 0;  // steps without decodes too
          options.max_requests = 1;
          options.gemm = gemm;
          BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
          const std::string what = std::string(dtype == DecoderDType::kFloat16 ? "fp16" : "bf16") +
                                   (grouped ? " grouped" : " tiny") + ", prompt " +
                                   std::to_string(length) + ", " + GemmName(gemm);
          std::vector<Engine> engines = {Engine::kTailLaunch};
          if (gemm == DecoderGemm::kBatonGemv) {
            engines = {Engine::kTailLaunch, Engine::kConditional, Engine::kDynamicParallelism};
          }
          std::vector<float> first;
          for (Engine engine : engines) {
            RunOptions run;
            run.engine = engine;
            const auto outcomes = RunRequests(*model, {request}, run).outcomes;
            ASSERT_EQ(outcomes.size(), 1u) << what;
            const Outcome& o = outcomes.at(0);
            EXPECT_EQ(o.value, 1u) << what;
            EXPECT_EQ(o.steps, static_cast<std::uint32_t>((length + 63) / 64)) << what;
            BATON_ASSERT_OK_AND_ASSIGN(const std::vector<float> logits, model->ReadLogits(0));
            const double error = LogitError(logits, expected);
            std::printf("  %-36s %-14s rel err %.3e\n", what.c_str(), EngineName(engine), error);
            EXPECT_LE(error, dtype == DecoderDType::kFloat16 ? 1e-2 : 4e-2)
                << what << ", " << EngineName(engine);
            ASSERT_EQ(o.tokens.size(), 1u);
            EXPECT_EQ(o.tokens[0], reference::Argmax(logits.data(), config.vocab)) << what;
            if (first.empty()) {
              first = logits;
            } else {
              EXPECT_EQ(std::memcmp(first.data(), logits.data(), logits.size() * sizeof(float)), 0)
                  << what << ": " << EngineName(engine)
                  << " computed other logits than the tail-launch engine";
            }
          }
        }
      }
    }
  }
}

// One request: a 300-token prompt, then 40 greedy tokens. `alone`: the
// budget of steps without decodes (every step of the prompt, the request
// being alone).
std::vector<std::int32_t> Generate(const DecoderConfig& config, std::uint64_t seed,
                                   DecoderGemm gemm, std::uint32_t budget, std::uint32_t chunk,
                                   const DecodeRequest& request, std::vector<float>* logits,
                                   std::uint32_t alone = 0) {
  DecoderModelOptions options;
  options.config = config;
  options.weight_seed = seed;
  options.max_batch = 8;
  options.max_tokens_per_step = budget;
  options.max_tokens_without_decodes = alone;
  options.max_chunk_tokens = chunk;
  options.max_requests = 1;
  options.gemm = gemm;
  auto model = DecoderModel::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  RunOptions run;
  run.engine = Engine::kConditional;
  const auto outcomes = RunRequests(**model, {request}, run).outcomes;
  EXPECT_EQ(outcomes.size(), 1u);
  if (outcomes.size() != 1) return {};
  EXPECT_EQ(outcomes.at(0).steps, StepsOf(request.prompt.size(), request.max_new_tokens,
                                          chunk == 0 ? std::max(budget, alone) : chunk));
  if (logits != nullptr) *logits = (*model)->ReadLogits(0).value();
  return outcomes.at(0).tokens;
}

TEST_F(DecoderPrefillTest, ChunksGiveTheTokensOfATokenPerStep) {
  for (DecoderDType dtype : {DecoderDType::kFloat16, DecoderDType::kBFloat16}) {
    const DecoderConfig config = Grouped(dtype);
    const std::uint64_t seed = Rng()();
    DecodeRequest request;
    request.prompt = RandomPrompt(config, 300);
    request.max_new_tokens = 40;
    const std::string what = dtype == DecoderDType::kFloat16 ? "fp16" : "bf16";
    std::vector<float> per_token_logits, chunked_logits;
    const std::vector<std::int32_t> per_token =
        Generate(config, seed, DecoderGemm::kBatonGemv, 8, 1, request, &per_token_logits);
    ASSERT_EQ(per_token.size(), 40u) << what;
    // Chunks of up to max_batch rows: Baton's GEMV and the fused attention,
    // the same bits as a token per step.
    EXPECT_EQ(Generate(config, seed, DecoderGemm::kBatonGemv, 8, 0, request, &chunked_logits),
              per_token)
        << what << ": chunks of 8 changed the tokens";
    EXPECT_EQ(std::memcmp(per_token_logits.data(), chunked_logits.data(),
                          per_token_logits.size() * sizeof(float)),
              0)
        << what << ": chunks of 8 changed the last logits' bits";
    // Chunks of 128 rows: Baton's GEMM or cuBLASLt and the chunk attention;
    // the tokens within the near-tie rule of the reference.
    BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights, GenerateDecoderWeights(config, seed));
    reference::ReferenceDecoder ref(weights);
    int ties = CheckAgainstReference(ref, request, per_token, SamplingParams{0.0f, 0},
                                     what + " a token per step");
    for (DecoderGemm gemm : {DecoderGemm::kBatonGemv, DecoderGemm::kCublasLt}) {
      const std::vector<std::int32_t> chunked =
          Generate(config, seed, gemm, 128, 0, request, nullptr);
      ASSERT_EQ(chunked.size(), 40u);
      int differing = 0;
      for (std::size_t i = 0; i < chunked.size(); ++i) differing += chunked[i] != per_token[i];
      ties += CheckAgainstReference(ref, request, chunked, SamplingParams{0.0f, 0},
                                    what + " chunks of 128, " + GemmName(gemm));
      std::printf("  %s, chunks of 128 (%s): %d of 40 tokens differ from a token per step\n",
                  what.c_str(), GemmName(gemm), differing);
      // A budget of 64 with 512 for steps without decodes: the lone prompt
      // in one step of 300 rows (Generate checks the steps).
      const std::vector<std::int32_t> whole =
          Generate(config, seed, gemm, 64, 0, request, nullptr, 512);
      ASSERT_EQ(whole.size(), 40u);
      ties += CheckAgainstReference(ref, request, whole, SamplingParams{0.0f, 0},
                                    what + " the prompt in one step, " + GemmName(gemm));
    }
    EXPECT_LE(ties, 8) << what << ": near-ties should be rare";
  }
}

TEST_F(DecoderPrefillTest, DecodesBesidePromptChunksMatchTheReference) {
  for (DecoderGemm gemm : {DecoderGemm::kCublasLt, DecoderGemm::kBatonGemv}) {
    DecoderModelOptions options;
    options.config = Grouped(DecoderDType::kBFloat16);
    options.weight_seed = Rng()();
    options.max_batch = 4;
    options.max_tokens_per_step = 64;
    options.max_tokens_without_decodes = 0;  // steps without decodes too
    options.max_requests = 4;
    options.gemm = gemm;
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    std::vector<DecodeRequest> requests(4);
    const int lengths[] = {5, 200, 7, 150};
    for (int i = 0; i < 4; ++i) {
      requests[i].prompt = RandomPrompt(options.config, lengths[i]);
      requests[i].max_new_tokens = 24;
      requests[i].sequence_id = i;
    }
    std::vector<std::map<std::uint32_t, Outcome>> runs;
    for (Engine engine : {Engine::kTailLaunch, Engine::kDynamicParallelism}) {
      if (engine == Engine::kDynamicParallelism && gemm != DecoderGemm::kBatonGemv) continue;
      RunOptions run;
      run.engine = engine;
      run.chunk = 4;  // all at once: the short prompts decode while the long ones are read
      runs.push_back(RunRequests(*model, requests, run).outcomes);
      EXPECT_EQ(CheckCompletionRules(runs.back(), requests, EngineName(engine), 64), 0);
    }
    BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                               GenerateDecoderWeights(options.config, options.weight_seed));
    reference::ReferenceDecoder ref(weights);
    int ties = 0;
    for (std::uint32_t e = 0; e < 4; ++e) {
      ASSERT_TRUE(runs[0].count(e));
      ties += CheckAgainstReference(ref, requests[e], runs[0].at(e).tokens, options.sampling,
                                    std::string(GemmName(gemm)) + " entry " + std::to_string(e));
      if (runs.size() > 1) {
        EXPECT_EQ(runs[1].at(e).tokens, runs[0].at(e).tokens)
            << "the dynamic-parallelism engine differs at entry " << e;
      }
    }
    EXPECT_LE(ties, 5) << GemmName(gemm) << ": near-ties should be rare";
  }
}

TEST_F(DecoderPrefillTest, TheStreamYieldsTheFinalTokensInOrderAsTheyArrive) {
  for (std::uint32_t window : {256u, 4u}) {
    SCOPED_TRACE(window);
    DecoderModelOptions options;
    options.config = Tiny(DecoderDType::kFloat16);
    options.weight_seed = Rng()();
    options.max_batch = 8;
    options.max_requests = 16;
    options.stream_window = window;
    options.sampling = SamplingParams{1.0f, Rng()()};
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    std::vector<DecodeRequest> requests(16);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      requests[i].prompt = RandomPrompt(options.config, Uniform(1, 100));
      requests[i].max_new_tokens = Uniform(30, 120);
      requests[i].sequence_id = i;
    }
    BATON_ASSERT_OK(model->WriteRequests(0, requests));
    BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(RuntimeOptions{}));
    BATON_ASSERT_OK(runtime->RegisterStepProgram(model->MakeStepProgram()));
    BATON_ASSERT_OK(runtime->Start(Engine::kTailLaunch));
    std::vector<WorkItem> items;
    for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(model->WorkItemFor(i));
    BATON_ASSERT_OK(runtime->Submit(items));
    std::vector<std::vector<std::int32_t>> streamed(requests.size());
    std::map<std::uint32_t, std::uint32_t> completed;  // entry -> tokens generated
    int seen_early = 0;  // requests with streamed tokens before their completion came
    PollLoop loop{std::chrono::seconds(30), 32};
    // The small window is read only at the end (every reader behind it).
    if (window > 4) {
      loop.before_poll = [&] {
        for (std::uint32_t e = 0; e < requests.size(); ++e) {
          if (completed.count(e)) continue;
          BATON_ASSERT_OK_AND_ASSIGN(const std::uint32_t next,
                                     model->ReadStream(e, streamed[e].size(), streamed[e]));
          EXPECT_EQ(next, streamed[e].size());
        }
      };
    }
    absl::Status failure;
    ASSERT_NO_FATAL_FAILURE(failure = PollUntil(
                                *runtime, [&] { return completed.size() >= requests.size(); },
                                [&](const Completion& c) {
                                  seen_early += !streamed[c.id].empty();
                                  completed[c.id] = c.value;
                                },
                                loop));
    BATON_ASSERT_OK(failure);
    ASSERT_EQ(completed.size(), requests.size());
    BATON_ASSERT_OK(runtime->Stop().status());
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      BATON_ASSERT_OK(model->ReadStream(e, streamed[e].size(), streamed[e]).status());
      BATON_ASSERT_OK_AND_ASSIGN(const std::vector<std::int32_t> final_tokens,
                                 model->ReadGenerated(e, completed[e]));
      EXPECT_EQ(streamed[e], final_tokens) << "entry " << e;
      // Past the last token nothing more comes.
      std::vector<std::int32_t> none;
      BATON_ASSERT_OK_AND_ASSIGN(const std::uint32_t end, model->ReadStream(e, completed[e], none));
      EXPECT_EQ(end, completed[e]);
      EXPECT_TRUE(none.empty());
    }
    if (window > 4) {
      std::printf("  %d of %zu requests streamed tokens before their completion was polled\n",
                  seen_early, requests.size());
      EXPECT_GT(seen_early, 0) << "no token was ever seen before its request completed";
    }
  }
}

// DecoderModel::Cancel ends a request at its next token, as a stop token
// would: its tokens are the first ones of the same request run uncancelled,
// the requests beside it generate what they do without the cancel (Baton's
// decode kernels compute every row alike), and rewriting the entry clears it.
TEST_F(DecoderPrefillTest, ACancelEndsTheRequestAtItsNextTokenAndTheOthersRunOn) {
  DecoderModelOptions options;
  options.config = Tiny(DecoderDType::kFloat16);
  options.weight_seed = Rng()();
  options.max_batch = 4;
  options.max_requests = 4;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  std::vector<DecodeRequest> requests(3);
  for (DecodeRequest& r : requests) {
    r.prompt = RandomPrompt(options.config, Uniform(1, 40));
    r.max_new_tokens = 300;
  }
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(RuntimeOptions{}));
  BATON_ASSERT_OK(runtime->RegisterStepProgram(model->MakeStepProgram()));
  BATON_ASSERT_OK(runtime->Start(Engine::kConditional));
  constexpr std::uint32_t kCancelled = 1, kAfter = 5;
  // Runs the three requests; with `cancel`, cancels entry 1 once it streamed kAfter tokens.
  const auto run = [&](bool cancel) {
    std::vector<std::vector<std::int32_t>> generated(requests.size());
    EXPECT_TRUE(model->WriteRequests(0, requests).ok());
    std::vector<WorkItem> items;
    for (std::uint32_t i = 0; i < requests.size(); ++i) items.push_back(model->WorkItemFor(i));
    EXPECT_TRUE(runtime->Submit(items).ok());
    std::vector<std::int32_t> streamed;
    std::map<std::uint32_t, std::uint32_t> completed;
    const absl::Status failure = PollUntil(
        *runtime, [&] { return completed.size() >= requests.size(); },
        [&](const Completion& c) { completed[c.id] = c.value; },
        {std::chrono::seconds(30), 8, [&] {
           if (!cancel) return;
           EXPECT_TRUE(model->ReadStream(kCancelled, streamed.size(), streamed).ok());
           if (streamed.size() >= kAfter) {
             EXPECT_TRUE(model->Cancel(kCancelled).ok());
             cancel = false;
           }
         }});
    EXPECT_TRUE(failure.ok()) << failure;
    EXPECT_EQ(completed.size(), requests.size());
    for (const auto& [entry, count] : completed) {
      generated[entry] = model->ReadGenerated(entry, count).value_or(std::vector<std::int32_t>{});
    }
    return generated;
  };
  const auto full = run(false);
  const auto cut = run(true);
  ASSERT_EQ(full[kCancelled].size(), 300u);
  ASSERT_GE(cut[kCancelled].size(), kAfter);
  EXPECT_LT(cut[kCancelled].size(), 300u) << "the cancel did not end the request";
  EXPECT_EQ(cut[kCancelled],
            std::vector<std::int32_t>(full[kCancelled].begin(),
                                      full[kCancelled].begin() + cut[kCancelled].size()));
  EXPECT_EQ(cut[0], full[0]);
  EXPECT_EQ(cut[2], full[2]);
  EXPECT_EQ(run(false), full) << "rewriting the entries did not clear the cancel";
  EXPECT_EQ(model->Cancel(options.max_requests).code(), absl::StatusCode::kOutOfRange);
  BATON_ASSERT_OK(runtime->Stop().status());
}

TEST_F(DecoderPrefillTest, ARequestPastTheContextIsRefusedAndTheOneInFlightFinishes) {
  DecoderModelOptions options;
  options.config = Tiny(DecoderDType::kFloat16);
  options.config.max_context = 96;
  options.weight_seed = Rng()();
  options.max_batch = 4;
  options.max_requests = 2;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  DecodeRequest ok;
  ok.prompt = RandomPrompt(options.config, 40);
  ok.max_new_tokens = 50;
  BATON_ASSERT_OK(model->WriteRequests(0, {ok}));
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(RuntimeOptions{}));
  BATON_ASSERT_OK(runtime->RegisterStepProgram(model->MakeStepProgram()));
  BATON_ASSERT_OK(runtime->Start(Engine::kConditional));
  const WorkItem item = model->WorkItemFor(0);
  BATON_ASSERT_OK(runtime->Submit({&item, 1}));
  DecodeRequest too_long;
  too_long.prompt = RandomPrompt(options.config, 90);
  too_long.max_new_tokens = 7;
  const absl::Status refused = model->WriteRequests(1, {too_long});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("prompt (90 tokens) + max_new_tokens (7) = 97 exceeds "
                                   "max_context 96"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("(max_context is set by DecoderConfig::max_context (96))"),
            std::string::npos)
      << refused;
  std::vector<Completion> out;
  const Polled polled = PollCompletions(*runtime, 1, {std::chrono::seconds(20), 4},
                                        [&out](const Completion& c) { out.push_back(c); });
  BATON_ASSERT_OK(polled.failure);
  ASSERT_EQ(polled.completions, 1u);
  EXPECT_EQ(out[0].id, 0u);
  EXPECT_EQ(out[0].value, 50u);
  BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                             GenerateDecoderWeights(options.config, options.weight_seed));
  reference::ReferenceDecoder ref(weights);
  BATON_ASSERT_OK_AND_ASSIGN(const std::vector<std::int32_t> tokens, model->ReadGenerated(0, 50));
  EXPECT_LE(CheckAgainstReference(ref, ok, tokens, options.sampling, "the request in flight"), 3);
  BATON_ASSERT_OK(runtime->Stop().status());
}

}  // namespace
}  // namespace baton::testing
