// config.json: what is read, what is refused (code and message), and the
// rotary frequencies against formulas written here independently.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "checkpoint/model_spec.h"
#include "tiny_checkpoint.h"

namespace baton::checkpoint {
namespace {

using Json = nlohmann::json;

Json Base(Architecture architecture) {
  return testing::TinyConfig(testing::DefaultOptions(architecture));
}

absl::StatusOr<ModelSpec> Parse(const Json& config) {
  return ParseModelConfig(config.dump(), "config.json");
}

// The refusal's code and its whole message.
void ExpectRefused(const Json& config, const std::string& message) {
  const absl::StatusOr<ModelSpec> spec = Parse(config);
  ASSERT_FALSE(spec.ok()) << config.dump();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(spec.status().message()), message);
}

TEST(CheckpointConfig, YarnIsRefusedWithTheIssuesMessage) {
  Json c = Base(Architecture::kLlama);
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectRefused(c,
                "config.json: rope_scaling.rope_type 'yarn' is not supported (supported: "
                "linear, llama3)");
}

TEST(CheckpointConfig, OtherRopeTypesLegacyKeyAndV5Parameters) {
  Json c = Base(Architecture::kQwen2);
  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  ExpectRefused(c,
                "config.json: rope_scaling.type 'dynamic' is not supported (supported: linear, "
                "llama3)");
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  absl::StatusOr<ModelSpec> spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(spec->rope_scaling.factor, 2.0);
  c.erase("rope_scaling");
  c.erase("rope_theta");
  c["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e6}};
  ExpectRefused(c,
                "config.json: rope_parameters.rope_type 'longrope' is not supported "
                "(supported: linear, llama3)");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rope_theta, 5e5);
  EXPECT_EQ(spec->rope_scaling.type, RopeScalingType::kNone);
  c.erase("rope_parameters");
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rope_theta, 10000.0);  // transformers' default
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}};
  ExpectRefused(c,
                "config.json: rope_scaling.original_max_position_embeddings is missing (it has "
                "no default this loader trusts)");
  c["rope_scaling"]["original_max_position_embeddings"] = 8192;
  c["rope_scaling"]["high_freq_factor"] = 1.0;
  ExpectRefused(c, "config.json: rope_scaling.high_freq_factor 1 must exceed low_freq_factor 1");
}

TEST(CheckpointConfig, UnsupportedArchitectureListsTheSupportedOnes) {
  Json c = Base(Architecture::kLlama);
  c["architectures"] = {"GPT2LMHeadModel"};
  ExpectRefused(c,
                "config.json: architectures[0] 'GPT2LMHeadModel' is not supported (supported: "
                "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
  c["architectures"] = Json::array();
  ExpectRefused(c,
                "config.json: architectures must be a non-empty list of class names, got an "
                "array of 0 values");
  c.erase("architectures");
  ExpectRefused(c, "config.json: architectures is missing (it has no default this loader trusts)");
  c = Base(Architecture::kMistral);
  c["model_type"] = "llama";
  ExpectRefused(c,
                "config.json: model_type 'llama' does not match architectures[0] "
                "'MistralForCausalLM' (expected 'mistral')");
}

TEST(CheckpointConfig, MlpBiasQuantizationAndActivationAreRefused) {
  Json c = Base(Architecture::kLlama);
  c["mlp_bias"] = true;
  ExpectRefused(c, "config.json: mlp_bias true is not supported (supported: false)");
  c = Base(Architecture::kQwen2);
  c["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  ExpectRefused(c,
                "config.json: quantization_config is present: quantized checkpoints are not "
                "supported (supported: unquantized float32, float16 and bfloat16 weights)");
  c = Base(Architecture::kMistral);
  c["hidden_act"] = "gelu";
  ExpectRefused(c, "config.json: hidden_act 'gelu' is not supported (supported: silu)");
}

TEST(CheckpointConfig, BadJsonTypesAreRefusedNeverThrown) {
  Json c = Base(Architecture::kLlama);
  c["hidden_size"] = "4096";
  ExpectRefused(c, "config.json: hidden_size must be an integer, got a string '4096'");
  c = Base(Architecture::kLlama);
  c["num_hidden_layers"] = 2.5;
  ExpectRefused(c, "config.json: num_hidden_layers must be an integer, got a fraction 2.5");
  c = Base(Architecture::kLlama);
  c["vocab_size"] = 4294967296LL;
  ExpectRefused(c, "config.json: vocab_size 4294967296 is out of range (at most 2147483647)");
  c = Base(Architecture::kLlama);
  c["intermediate_size"] = 18446744073709551615ULL;
  ExpectRefused(c,
                "config.json: intermediate_size 18446744073709551615 is out of range (at most "
                "2147483647)");
  c = Base(Architecture::kLlama);
  c["rms_norm_eps"] = "NaN";
  ExpectRefused(c, "config.json: rms_norm_eps must be a number, got a string 'NaN'");
  c = Base(Architecture::kLlama);
  c["tie_word_embeddings"] = 1;
  ExpectRefused(c, "config.json: tie_word_embeddings must be true or false, got an integer 1");
  c = Base(Architecture::kLlama);
  c["rope_scaling"] = "llama3";
  ExpectRefused(c, "config.json: rope_scaling must be an object, got a string 'llama3'");
  c = Base(Architecture::kLlama);
  c["eos_token_id"] = {2, "3"};
  ExpectRefused(c, "config.json: eos_token_id[1] must be an integer, got a string '3'");
  c = Base(Architecture::kLlama);
  c["num_attention_heads"] = {{"a", 1}};
  ExpectRefused(c,
                "config.json: num_attention_heads must be an integer, got an object with 1 "
                "key");
  // nlohmann refuses a literal that overflows a double.
  std::string text = Base(Architecture::kLlama).dump();
  text.replace(text.find("\"rms_norm_eps\":1e-05"), 20, "\"rms_norm_eps\":1e999");
  absl::StatusOr<ModelSpec> spec = ParseModelConfig(text, "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(std::string(spec.status().message()),
            "config.json: the config is not valid JSON (number overflow parsing '1e999')");
}

TEST(CheckpointConfig, NotJsonNotAnObjectAndDuplicateKeys) {
  absl::StatusOr<ModelSpec> spec = ParseModelConfig("{\"hidden_size\": 1,", "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message().rfind("config.json: the config is not valid JSON (parse error "
                                          "at line 1, column 19",
                                          0),
            0u)
      << spec.status();
  spec = ParseModelConfig("[1, 2]", "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(std::string(spec.status().message()),
            "config.json: the config must be a JSON object, got an array of 2 values");
  spec = ParseModelConfig(R"({"hidden_size": 1, "hidden_size": 2})", "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(std::string(spec.status().message()),
            "config.json: the config has the key 'hidden_size' twice in "
            "one object (keys must be unique)");
}

TEST(CheckpointConfig, SizesAndHeadsAreChecked) {
  Json c = Base(Architecture::kLlama);
  c["hidden_size"] = 0;
  ExpectRefused(c, "config.json: hidden_size 0 is out of range (at least 1)");
  c = Base(Architecture::kLlama);
  c["num_key_value_heads"] = 3;
  ExpectRefused(c,
                "config.json: num_key_value_heads 3 does not divide num_attention_heads 4 "
                "(supported: grouped-query attention, heads a multiple of key/value heads)");
  c = Base(Architecture::kLlama);
  c["num_attention_heads"] = 3;
  c["num_key_value_heads"] = 1;
  ExpectRefused(c,
                "config.json: hidden_size 32 is not a multiple of num_attention_heads 3 and "
                "head_dim is absent (head_dim defaults to hidden_size / num_attention_heads)");
  c["head_dim"] = 7;
  ExpectRefused(c, "config.json: head_dim 7 is not supported (supported: even, at most 256)");
  c["head_dim"] = 512;
  ExpectRefused(c, "config.json: head_dim 512 is not supported (supported: even, at most 256)");
  c = Base(Architecture::kLlama);
  c["num_hidden_layers"] = 5000;
  ExpectRefused(c, "config.json: num_hidden_layers 5000 is not supported (supported: up to 1024)");
  c = Base(Architecture::kLlama);
  c.erase("num_key_value_heads");
  absl::StatusOr<ModelSpec> spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_kv_heads, 4);  // defaults to the query heads
  c["bos_token_id"] = 64;
  ExpectRefused(c, "config.json: bos_token_id 64 is out of range (at most 63)");
}

TEST(CheckpointConfig, DTypeSpellings) {
  Json c = Base(Architecture::kLlama);
  c["torch_dtype"] = "float64";
  ExpectRefused(c,
                "config.json: torch_dtype 'float64' is not supported (supported: bfloat16, "
                "float16, float32)");
  c["torch_dtype"] = "float16";
  c["dtype"] = "bfloat16";
  ExpectRefused(c,
                "config.json: torch_dtype 'float16' disagrees with dtype 'bfloat16' (they must "
                "name one dtype)");
  c.erase("torch_dtype");
  absl::StatusOr<ModelSpec> spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dtype, DType::kBFloat16);
  c["dtype"] = nullptr;
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->dtype.has_value());
}

TEST(CheckpointConfig, SlidingWindowFollowsTransformers) {
  Json c = Base(Architecture::kMistral);
  c["sliding_window"] = nullptr;
  absl::StatusOr<ModelSpec> spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->sliding_window.has_value());
  c = Base(Architecture::kQwen2);
  c["use_sliding_window"] = true;
  c["max_window_layers"] = 0;  // every layer slides
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sliding_window, 4096);
  c["max_window_layers"] = 2;  // no layer of 2 slides
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->sliding_window.has_value());
  c["max_window_layers"] = 1;
  ExpectRefused(c,
                "config.json: sliding_window 4096 applies to 1 of 2 layers (from layer_types or "
                "max_window_layers), which is not supported (supported: the same attention on "
                "every layer)");
  c["layer_types"] = {"sliding_attention", "sliding_attention"};
  spec = Parse(c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sliding_window, 4096);
  c["layer_types"] = {"sliding_attention", "chunked_attention"};
  ExpectRefused(c,
                "config.json: layer_types[1] 'chunked_attention' is not supported (supported: "
                "full_attention, sliding_attention)");
}

TEST(CheckpointConfig, NamesOfEnums) {
  EXPECT_EQ(ArchitectureName(Architecture::kQwen2), "Qwen2ForCausalLM");
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(SafetensorsDTypeName(DType::kFloat16), "F16");
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
}

}  // namespace
}  // namespace baton::checkpoint
