// A Hugging Face checkpoint served by DecoderModel, for each supported family
// (Llama with llama3 RoPE scaling; Llama with attention_bias; Mistral with a
// head_dim that is not hidden / heads; Qwen2 with tied embeddings, q/k/v bias
// and multi-query attention), stored in bf16, fp16 or float32 (converted),
// single-file or sharded: every engine (tail-launch, conditional, dynamic
// parallelism) produces the same tokens, and they follow a CPU reference
// that reads the checkpoint's own tensors (hf_reference.h: rotate-half RoPE,
// separate projections, repeated key/value heads), teacher-forced, token for
// token except within a near-tie margin.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "checkpoint/checkpoint.h"
#include "hf_reference.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "tiny_checkpoint.h"

namespace baton {
namespace {

using checkpoint::Architecture;
using checkpoint::DType;
using checkpoint::testing::TinyOptions;

struct Case {
  const char* name;
  Architecture architecture;
  bool attention_bias;
  DType file_dtype;
  bool sharded;
  int vocab;  // not a multiple of 8: served padded, the padding never selected
};

const Case kCases[] = {
    {"Llama3Bf16", Architecture::kLlama, false, DType::kBFloat16, false, 256},
    {"LlamaBiasFp16Sharded", Architecture::kLlama, true, DType::kFloat16, true, 256},
    {"MistralFloat32", Architecture::kMistral, false, DType::kFloat32, false, 256},
    {"Qwen2Bf16Sharded", Architecture::kQwen2, false, DType::kBFloat16, true, 256},
    {"Llama3Vocab251", Architecture::kLlama, false, DType::kBFloat16, false, 251},
    {"Qwen2TiedVocab1001", Architecture::kQwen2, false, DType::kBFloat16, false, 1001},
};

class CheckpointModelTest : public testing::GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CheckpointModelTest, EveryEngineFollowsTheCheckpointsOwnTensors) {
  const Case& c = GetParam();
  const std::uint64_t seed = checkpoint::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << c.name << ", seed " << seed);
  TinyOptions o = checkpoint::testing::DefaultOptions(c.architecture);
  o.runnable = true;
  o.seed = seed;
  o.dtype = c.file_dtype;
  o.sharded = c.sharded;
  o.attention_bias = c.attention_bias;
  o.hidden_size = 64;
  o.num_heads = 4;
  o.intermediate_size = 96;
  o.vocab_size = c.vocab;
  o.max_position_embeddings = 4096;
  const std::string dir = checkpoint::testing::MakeTempDir();
  ASSERT_FALSE(dir.empty());
  BATON_ASSERT_OK(
      checkpoint::testing::WriteDirectory(checkpoint::testing::MakeTinyCheckpoint(o), dir));

  DecoderModelOptions options;
  options.checkpoint = dir;
  options.max_context = 64;
  options.max_batch = 4;
  // Steps of at most 4 rows: prompts read in chunks of up to 4 tokens by the
  // fused attention, the chunk's earlier keys from this step's rows.
  options.max_tokens_per_step = 4;
  options.max_tokens_without_decodes = 0;  // steps without decodes too
  options.max_requests = 16;
  options.gemm = DecoderGemm::kBatonGemv;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  EXPECT_EQ(model->config().max_context, 64);
  EXPECT_EQ(model->config().key_value_heads(), o.num_kv_heads);
  EXPECT_EQ(model->config().qkv_bias, c.architecture == Architecture::kQwen2 || c.attention_bias);
  // float32 checkpoints are served in bf16; 16-bit ones in their own type.
  EXPECT_EQ(model->config().dtype,
            c.file_dtype == DType::kFloat16 ? DecoderDType::kFloat16 : DecoderDType::kBFloat16);
  EXPECT_FALSE(model->info().eos_token_ids.empty());
  EXPECT_EQ(model->config().vocab, c.vocab);

  const std::vector<DecodeRequest> requests = testing::RandomRequests(model->config(), 10);
  std::map<std::uint32_t, testing::Outcome> first;
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional, Engine::kDynamicParallelism}) {
    testing::RunOptions run;
    run.engine = engine;
    run.buckets = {1, 2, 4};
    run.chunk = 3;
    const testing::RunResult result = testing::RunRequests(*model, requests, run);
    testing::CheckCompletionRules(result.outcomes, requests, EngineName(engine), 4);
    if (engine == Engine::kTailLaunch) {
      first = result.outcomes;
      continue;
    }
    for (const auto& [entry, outcome] : result.outcomes) {
      EXPECT_EQ(outcome.tokens, first[entry].tokens)
          << EngineName(engine) << " entry " << entry << " differs from the tail-launch engine";
    }
  }
  BATON_ASSERT_OK_AND_ASSIGN(const checkpoint::Checkpoint ckpt, checkpoint::Checkpoint::Open(dir));
  reference::HfReference ref(ckpt, model->config());
  int ties = 0;
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    ties += testing::CheckAgainstReference(ref, requests[e], first[e].tokens, SamplingParams{0, 0},
                                           std::string(c.name) + " entry " + std::to_string(e));
  }
  RecordProperty("near_ties", ties);
  checkpoint::testing::RemoveTree(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, CheckpointModelTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace baton
