// DecodeRequest::logprobs on the GPU (DecoderModel::ReadLogprobs), against
// the CPU reference teacher-forced along the device's tokens, its
// log-softmax taken in double:
//
// - at vocabularies that select with one block, three and a whole cluster of
//   eight (the lists and sums merge across warps and blocks), on every
//   engine, greedy and sampled, with top-k / top-p, with requests without
//   logprobs in the same steps: each token's logprob and its top list (ids
//   and values, best first) are the reference's within the logits' rounding;
// - with penalties and min_tokens, the logprobs are still the model's own
//   (vLLM's raw logprobs): a chosen token the penalties rewrote reports its
//   logit from before them, bit-identical to its entry in the top list;
// - what is refused or lost says so: a request without logprobs, a count
//   past max_logprobs or with logprobs off, a reader that let the window
//   pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/runtime.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/model_reference.h"

namespace baton::testing {
namespace {

constexpr Engine kEngines[] = {Engine::kTailLaunch, Engine::kConditional,
                               Engine::kDynamicParallelism};
// Logits are rounded to fp16 (about 5e-4 at unit scale) on both sides, from
// sums in a different order: a logprob moves by a few 1e-3 at most.
constexpr double kTolerance = 0.02;

class DecoderLogprobsTest : public GpuTest {};

DecoderModelOptions Options(int vocab) {
  DecoderModelOptions options;
  options.config = TinyDecoderConfig();
  options.config.vocab = vocab;
  options.weight_seed = Rng()();
  options.max_batch = 4;
  options.max_requests = 12;
  options.gemm = DecoderGemm::kBatonGemv;
  return options;
}

// The reference's log-softmax of one step's logits, in double.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  double top = -INFINITY;
  for (float x : logits) top = std::max<double>(top, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x - top);
  std::vector<double> out(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - top - std::log(sum);
  return out;
}

// Checks one request's records along its tokens; adds the tokens checked.
void CheckLogprobs(reference::StepReference& ref, const DecodeRequest& request,
                   const std::vector<std::int32_t>& tokens, const std::vector<TokenLogprobs>& got,
                   const std::string& what, int& checked) {
  ASSERT_EQ(got.size(), tokens.size()) << what;
  ref.Reset();
  std::vector<float> logits;
  for (std::int32_t t : request.prompt) logits = ref.Step(t);
  const int vocab = static_cast<int>(logits.size());
  const std::size_t count = std::min<std::size_t>(request.logprobs, vocab);
  for (std::size_t g = 0; g < tokens.size(); ++g) {
    const std::string at = what + " token " + std::to_string(g);
    const std::vector<double> lp = LogSoftmax(logits);
    std::vector<double> sorted = lp;
    std::sort(sorted.rbegin(), sorted.rend());
    const TokenLogprobs& r = got[g];
    EXPECT_NEAR(r.logprob, lp[tokens[g]], kTolerance) << at << ": the chosen token " << tokens[g];
    ASSERT_EQ(r.top_tokens.size(), count) << at;
    ASSERT_EQ(r.top_logprobs.size(), count) << at;
    std::set<std::int32_t> distinct;
    double mass = 0.0;
    for (std::size_t j = 0; j < count; ++j) {
      const std::int32_t id = r.top_tokens[j];
      ASSERT_TRUE(id >= 0 && id < vocab) << at << " top " << j << ": id " << id;
      distinct.insert(id);
      mass += std::exp(static_cast<double>(r.top_logprobs[j]));
      EXPECT_NEAR(r.top_logprobs[j], lp[id], kTolerance) << at << " top " << j << ": id " << id;
      // The j-th best, up to near-ties.
      EXPECT_GE(lp[id], sorted[j] - 2 * kTolerance) << at << " top " << j << ": id " << id;
      if (j > 0) {
        EXPECT_GE(r.top_logprobs[j - 1], r.top_logprobs[j]) << at << ": best first, at " << j;
        if (r.top_logprobs[j - 1] == r.top_logprobs[j]) {
          EXPECT_LT(r.top_tokens[j - 1], id) << at << ": a tie goes to the lower id, at " << j;
        }
      }
      // The same logit read twice gives the same float, penalized or not.
      if (id == tokens[g]) EXPECT_EQ(r.top_logprobs[j], r.logprob) << at << " top " << j;
    }
    EXPECT_EQ(distinct.size(), count) << at << ": ids repeat";
    EXPECT_LE(mass, 1.0 + 1e-4) << at;
    ++checked;
    if (g + 1 < tokens.size()) logits = ref.Step(tokens[g]);
  }
}

// Runs the requests at once on every engine and checks each one's records
// (a request without logprobs has none to read).
void RunAndCheck(DecoderModel& model, const DecoderModelOptions& options,
                 const std::vector<DecodeRequest>& requests, const std::string& label) {
  BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                             GenerateDecoderWeights(options.config, options.weight_seed));
  reference::ReferenceDecoder ref(weights);
  for (Engine engine : kEngines) {
    const auto outcomes = RunAtOnce(model, engine, requests);
    int checked = 0;
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      const std::string what =
          std::string(EngineName(engine)) + " " + label + " entry " + std::to_string(e);
      ASSERT_TRUE(outcomes.count(e)) << what;
      const Outcome& o = outcomes.at(e);
      std::vector<TokenLogprobs> got;
      const absl::Status read = model.ReadLogprobs(e, 0, o.value, got);
      if (requests[e].logprobs < 0) {
        EXPECT_EQ(read.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << read;
        continue;
      }
      ASSERT_TRUE(read.ok()) << what << ": " << read;
      CheckLogprobs(ref, requests[e], o.tokens, got, what, checked);
    }
    std::printf("  %s, %s: %d tokens' logprobs checked\n", EngineName(engine), label.c_str(),
                checked);
  }
}

TEST_F(DecoderLogprobsTest, LogprobsMatchTheReferenceAtEveryClusterSize) {
  // 64: one block; 12000: three; 40000: a cluster of eight (select_params.h).
  for (int vocab : {64, 12000, 40000}) {
    DecoderModelOptions options = Options(vocab);
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 12, 1, 12, 4, 12);
    const std::int32_t counts[] = {5, 0, 20, 1, -1, 3};
    for (std::size_t i = 0; i < requests.size(); ++i) {
      requests[i].logprobs = counts[i % 6];
      SamplingParams s{i % 2 == 0 ? 0.0f : 0.9f, Rng()()};
      if (i % 4 == 1) s.top_k = 20;
      if (i % 4 == 3) s.top_p = 0.8f;
      requests[i].sampling = s;
    }
    RunAndCheck(*model, options, requests, "vocab " + std::to_string(vocab));
  }
}

TEST_F(DecoderLogprobsTest, PenalizedRequestsReportTheModelsOwnLogprobs) {
  DecoderModelOptions options = Options(64);  // tokens repeat: the penalties rewrite them
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 12, 4, 12, 16, 24);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SamplingParams s{i % 2 == 0 ? 0.0f : 0.8f, Rng()()};
    s.repetition_penalty = 2.0f;
    s.frequency_penalty = 1.5f;
    s.presence_penalty = 0.5f;
    if (i % 3 == 0) {
      s.min_tokens = 8;
      requests[i].stop_tokens = {requests[i].prompt[0]};
    }
    requests[i].sampling = s;
    requests[i].logprobs = 20;
  }
  RunAndCheck(*model, options, requests, "penalized");
}

TEST_F(DecoderLogprobsTest, WhatIsRefusedOrLostSaysSo) {
  DecoderModelOptions options = Options(64);
  options.stream_window = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  DecodeRequest r;
  r.prompt = RandomPrompt(options.config, 4);
  r.max_new_tokens = 24;  // three times the window
  r.sampling = SamplingParams{0.0f, 0};
  r.logprobs = 21;
  const absl::Status past = model->ValidateRequest(r);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("DecodeRequest::logprobs is 21"), std::string::npos) << past;
  r.logprobs = 2;
  const auto outcomes = RunAtOnce(*model, Engine::kConditional, {r});
  ASSERT_EQ(outcomes.at(0).value, 24u);
  std::vector<TokenLogprobs> got;
  // The last window's records are there; the first tokens' left it.
  BATON_EXPECT_OK(model->ReadLogprobs(0, 16, 24, got));
  EXPECT_EQ(got.size(), 8u);
  const absl::Status lost = model->ReadLogprobs(0, 0, 24, got);
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss) << lost;
  EXPECT_NE(lost.message().find("raise DecoderModelOptions::stream_window"), std::string::npos)
      << lost;
  EXPECT_EQ(model->ReadLogprobs(12, 0, 1, got).code(), absl::StatusCode::kOutOfRange);

  options.max_logprobs = 0;
  BATON_ASSERT_OK_AND_ASSIGN(auto off, DecoderModel::Create(options));
  r.logprobs = 0;
  const absl::Status refused = off->ValidateRequest(r);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("max_logprobs is 0 (logprobs are off)"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace baton::testing
