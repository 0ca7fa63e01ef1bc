// The decoder model's paged KV cache (issue 24, baton/page_policy.h), end to
// end on the GPU:
//  - Page sizes change only where tokens live: pages of 16, 64 and 256
//    tokens give bit-identical tokens on every engine, for requests read in
//    chunks beside decoding ones, one of them ending exactly on a page
//    boundary of each size (the same schedule, the same kernels, the same
//    sums: only the cache's addresses differ).
//  - A pool of exactly one request's pages runs every request in turn (one
//    at a time, the pages reused after each one frees them) with the tokens
//    each one gets alone, and the pool is whole again afterwards; a request
//    one page larger than the pool is refused naming kv_pool_pages, before
//    any GPU work.
//  - A soak: random prompts and lengths whose reserves add up to several
//    pools, submitted at once: every request completes exactly once, with
//    the tokens of a host-driven replay of the same policy (same schedule),
//    every token checked against the CPU reference within the near-tie
//    rule, and the pool whole again at the end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/runtime.h"
#include "kernels/decoder_weights.h"
#include "support/decode_reference.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/host_decode_loop.h"
#include "support/model_reference.h"

namespace baton::testing {
namespace {

DecoderConfig Grouped() { return GroupedDecoderConfig(DecoderDType::kBFloat16); }

DecoderModelOptions Options(const DecoderConfig& config, std::uint64_t seed) {
  DecoderModelOptions options;
  options.config = config;
  options.weight_seed = seed;
  options.max_batch = 4;
  options.max_tokens_per_step = 64;
  options.max_tokens_without_decodes = 0;  // steps without decodes too
  options.max_requests = 64;
  options.gemm = DecoderGemm::kBatonGemv;  // the same kernels on every engine
  return options;
}

DecodeRequest Request(const DecoderConfig& config, int prompt, std::uint32_t new_tokens) {
  DecodeRequest r;
  r.prompt = RandomPrompt(config, prompt);
  r.max_new_tokens = new_tokens;
  return r;
}

std::vector<std::int32_t> TokensOf(const RunResult& run, std::uint32_t entry) {
  const auto it = run.outcomes.find(entry);
  return it == run.outcomes.end() ? std::vector<std::int32_t>{} : it->second.tokens;
}

class DecoderPagingTest : public GpuTest {};

TEST_F(DecoderPagingTest, PageSizesGiveBitIdenticalTokensOnEveryEngine) {
  const DecoderConfig config = Grouped();
  const std::uint64_t seed = Rng()();
  // 200 + 56 = 256 tokens: the last one fills a page of 16, 64 and 256
  // exactly; the others end mid-page, read their prompts in chunks beside
  // the decoding ones, and one spans many pages.
  const std::vector<DecodeRequest> requests = {Request(config, 200, 56), Request(config, 3, 40),
                                               Request(config, 130, 20), Request(config, 17, 90),
                                               Request(config, 300, 9)};
  std::vector<std::vector<std::int32_t>> first;
  for (std::uint32_t page : {16u, 64u, 256u}) {
    DecoderModelOptions options = Options(config, seed);
    options.kv_page_tokens = page;
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    EXPECT_EQ(model->info().kv_page_tokens, page);
    EXPECT_EQ(model->info().kv_pool_pages, 4 * ((512 + page - 1) / page))
        << "max_batch sequences at max_context";
    for (Engine engine : {Engine::kTailLaunch, Engine::kConditional, Engine::kDynamicParallelism}) {
      const std::string what =
          "pages of " + std::to_string(page) + ", " + std::string(EngineName(engine));
      RunOptions run;
      run.engine = engine;
      run.submit_before_start = true;
      const RunResult result = RunRequests(*model, requests, run);
      ASSERT_EQ(result.outcomes.size(), requests.size()) << what;
      EXPECT_EQ(result.stats.free_pages, model->info().kv_pool_pages) << what << ": pool whole";
      EXPECT_EQ(result.stats.reserved_pages, 0u) << what;
      for (std::uint32_t e = 0; e < requests.size(); ++e) {
        const std::vector<std::int32_t> tokens = TokensOf(result, e);
        ASSERT_EQ(tokens.size(), requests[e].max_new_tokens) << what << ", request " << e;
        if (first.size() <= e) {
          first.push_back(tokens);
        } else {
          EXPECT_EQ(tokens, first[e]) << what << ", request " << e;
        }
      }
    }
  }
  std::printf("  5 requests, pages of 16/64/256, 3 engines: bit-identical tokens\n");
}

TEST_F(DecoderPagingTest, APoolOfOneRequestRunsEachInTurnWithItsTokensAlone) {
  const DecoderConfig config = Grouped();
  const std::uint64_t seed = Rng()();
  // Each request holds 257 to 320 tokens: exactly 5 pages of 64, so no two
  // fit the pool together.
  std::vector<DecodeRequest> requests;
  for (int i = 0; i < 6; ++i) {
    const int total = Uniform(257, 320), new_tokens = Uniform(1, 40);
    requests.push_back(Request(config, total - new_tokens, static_cast<std::uint32_t>(new_tokens)));
  }
  DecoderModelOptions options = Options(config, seed);
  options.kv_pool_pages = 5;
  BATON_ASSERT_OK_AND_ASSIGN(auto small, DecoderModel::Create(options));
  EXPECT_EQ(small->info().kv_pool_pages, 5u);
  EXPECT_NE(small->info().kv_pool_limit.find("kv_pool_pages"), std::string::npos)
      << small->info().kv_pool_limit;
  // One page more than the pool: refused before any GPU work, naming the fix.
  const absl::Status refused = small->ValidateRequest(Request(config, 300, 21));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("needs 6 KV pages of 64 tokens but the pool holds 5"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("DecoderModelOptions::kv_pool_pages"), std::string::npos);

  BATON_ASSERT_OK_AND_ASSIGN(auto ample, DecoderModel::Create(Options(config, seed)));
  for (Engine engine : {Engine::kTailLaunch, Engine::kDynamicParallelism}) {
    RunOptions run;
    run.engine = engine;
    run.submit_before_start = true;
    run.trace = true;
    const RunResult together = RunRequests(*small, requests, run);
    EXPECT_EQ(together.max_batch_seen, 1u) << "the pool holds one request at a time";
    EXPECT_EQ(together.stats.free_pages, 5u);
    EXPECT_EQ(together.stats.reserved_pages, 0u);
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      const RunResult alone = RunRequests(*ample, {requests[e]}, run);
      EXPECT_EQ(TokensOf(together, e), TokensOf(alone, 0))
          << EngineName(engine) << ", request " << e;
    }
  }
}

TEST_F(DecoderPagingTest, ASoakSeveralPoolsDeepLosesNothingAndMatchesTheHostReplay) {
  const DecoderConfig config = Grouped();
  const std::uint64_t seed = Rng()();
  BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights, GenerateDecoderWeights(config, seed));
  constexpr std::uint32_t kPool = 24;  // pages of 64: 1,536 tokens
  std::vector<DecodeRequest> requests;
  std::uint64_t demand = 0;
  for (int i = 0; i < 40; ++i) {
    requests.push_back(
        Request(config, Uniform(1, 400), static_cast<std::uint32_t>(Uniform(1, 100))));
    requests.back().sequence_id = static_cast<std::uint64_t>(i);
    demand += (requests.back().prompt.size() + requests.back().max_new_tokens + 63) / 64;
  }
  ASSERT_GE(demand, 4u * kPool) << "the soak asks for several pools";
  DecoderModelOptions options = Options(config, seed);
  options.kv_pool_pages = kPool;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  BATON_ASSERT_OK_AND_ASSIGN(auto loop, HostDecodeLoop::Create(model->MakeStepProgram()));
  const RunResult replay = RunOnHostLoop(*model, *loop, requests);
  ASSERT_EQ(replay.outcomes.size(), requests.size());
  int ties = 0;
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    reference::ReferenceDecoder ref(weights);
    ties += CheckAgainstReference(ref, requests[e], TokensOf(replay, e), options.sampling,
                                  "host replay, request " + std::to_string(e));
  }
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional, Engine::kDynamicParallelism}) {
    RunOptions run;
    run.engine = engine;
    run.submit_before_start = true;
    const RunResult result = RunRequests(*model, requests, run);
    ASSERT_EQ(result.outcomes.size(), requests.size()) << EngineName(engine);
    EXPECT_EQ(result.stats.free_pages, kPool) << EngineName(engine) << ": pool whole at the end";
    EXPECT_EQ(result.stats.reserved_pages, 0u) << EngineName(engine);
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      EXPECT_EQ(TokensOf(result, e), TokensOf(replay, e))
          << EngineName(engine) << ", request " << e;
    }
  }
  std::printf("  soak: 40 requests, %u pages of demand on a pool of %u, %d near-ties\n",
              static_cast<unsigned>(demand), kPool, ties);
}

}  // namespace
}  // namespace baton::testing
