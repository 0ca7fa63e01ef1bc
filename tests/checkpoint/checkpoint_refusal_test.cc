// One test per refusal class of the safetensors layout, the shard index and
// the validation against the config: the status code and the message text.
#include <string>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "tiny_checkpoint.h"

namespace baton::checkpoint {
namespace {

using Json = nlohmann::json;
using testing::DefaultOptions;
using testing::MakeTinyCheckpoint;
using testing::RawSafetensors;
using testing::SafetensorsBytes;
using testing::TinyCheckpoint;
using testing::TinyOptions;
using testing::TinyTensor;

absl::Status OpenBytes(const std::string& bytes) {
  return SafetensorsFile::FromBytes("model.safetensors", bytes).status();
}

// A header with one entry per (name, dtype, shape, begin, end).
std::string Header(
    std::initializer_list<
        std::tuple<const char*, const char*, std::vector<int>, std::uint64_t, std::uint64_t>>
        entries) {
  Json header = Json::object();
  for (const auto& [name, dtype, shape, begin, end] : entries) {
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
  }
  return header.dump();
}

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(std::string(status.message()), message);
}

TEST(CheckpointSafetensors, FileShorterThanTheLengthField) {
  ExpectInvalid(OpenBytes("abc"),
                "model.safetensors: the file is 3 bytes, shorter than the 8-byte header length "
                "(not a safetensors file)");
}

TEST(CheckpointSafetensors, HeaderLengthPastTheEnd) {
  std::string bytes = RawSafetensors(Header({{"a", "F32", {1}, 0, 4}}), std::string(4, '\0'));
  bytes[0] = static_cast<char>(bytes[0] + 5);  // claims 5 more header bytes than the file has
  ExpectInvalid(OpenBytes(bytes),
                "model.safetensors: header length 59 runs past the end of the file (66 bytes; the "
                "header would end at byte 67)");
}

TEST(CheckpointSafetensors, HeaderOver100MB) {
  std::string bytes = RawSafetensors("{}", "");
  const std::uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  ExpectInvalid(OpenBytes(bytes),
                "model.safetensors: header length 100000001 is over the 100000000-byte limit "
                "(corrupt, or not a safetensors file)");
}

TEST(CheckpointSafetensors, HeaderNotJsonOrNotAnObject) {
  const absl::Status status = OpenBytes(RawSafetensors("{\"a\": [1, 2", ""));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      status.message().rfind("model.safetensors: the header is not valid JSON (parse error", 0), 0u)
      << status;
  ExpectInvalid(OpenBytes(RawSafetensors("[1]", "")),
                "model.safetensors: the header must be a JSON object, got an array of 1 value");
  ExpectInvalid(OpenBytes(RawSafetensors(R"({"a": 1, "a": 2})", "")),
                "model.safetensors: the header has the key 'a' twice in one object (keys must be "
                "unique)");
}

TEST(CheckpointSafetensors, EntryFieldsAndTypes) {
  ExpectInvalid(OpenBytes(RawSafetensors(R"({"w": {"dtype": "F32", "shape": [1]}})", "")),
                "model.safetensors: tensor 'w': data_offsets is missing");
  ExpectInvalid(OpenBytes(RawSafetensors(Header({{"w", "I64", {1}, 0, 8}}), std::string(8, 0))),
                "model.safetensors: tensor 'w': dtype 'I64' is not supported (supported: F32, F16, "
                "BF16)");
  ExpectInvalid(
      OpenBytes(RawSafetensors(R"({"w": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}})", "")),
      "model.safetensors: tensor 'w': dtype must be a string, got an integer 5");
  ExpectInvalid(OpenBytes(RawSafetensors(Header({{"w", "F32", {2, -1}, 0, 0}}), "")),
                "model.safetensors: tensor 'w': shape[1] -1 is not a size (an integer >= 0)");
  ExpectInvalid(
      OpenBytes(RawSafetensors(
          R"({"w": {"dtype": "F16", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
          "")),
      "model.safetensors: tensor 'w': shape [4294967296, 4294967296] of F16 has more bytes than "
      "64 bits can count");
  ExpectInvalid(
      OpenBytes(
          RawSafetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "")),
      "model.safetensors: tensor 'w': data_offsets must be [begin, end] (two integers >= 0), got "
      "an array of 1 value");
  ExpectInvalid(OpenBytes(RawSafetensors(Header({{"w", "F32", {0}, 4, 0}}), std::string(4, 0))),
                "model.safetensors: tensor 'w': data_offsets [4, 0] has begin after end");
  ExpectInvalid(OpenBytes(RawSafetensors(Header({{"w", "F32", {2}, 0, 4}}), std::string(4, 0))),
                "model.safetensors: tensor 'w': data_offsets [0, 4] hold 4 bytes but shape [2] of "
                "F32 needs 8");
  ExpectInvalid(
      OpenBytes(RawSafetensors(R"({"__metadata__": {"format": 1}})", "")),
      "model.safetensors: __metadata__ value 'format' must be a string, got an integer 1");
}

TEST(CheckpointSafetensors, TruncatedData) {
  ExpectInvalid(
      OpenBytes(RawSafetensors(Header({{"a", "F32", {2}, 0, 8}, {"b", "F32", {2}, 8, 16}}),
                               std::string(12, '\0'))),
      "model.safetensors: tensor 'b': data_offsets [8, 16] end past the data section "
      "(12 bytes): the file is truncated");
}

TEST(CheckpointSafetensors, OverlappingOffsets) {
  ExpectInvalid(
      OpenBytes(RawSafetensors(Header({{"a", "F32", {2}, 0, 8}, {"b", "F32", {2}, 4, 12}}),
                               std::string(12, '\0'))),
      "model.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8] "
      "(ranges must not overlap)");
}

TEST(CheckpointSafetensors, GapAndUnindexedTail) {
  ExpectInvalid(
      OpenBytes(RawSafetensors(Header({{"a", "F32", {1}, 0, 4}, {"b", "F32", {1}, 8, 12}}),
                               std::string(12, '\0'))),
      "model.safetensors: bytes [4, 8) of the data section belong to no tensor (a gap "
      "before tensor 'b'; the format allows no holes)");
  ExpectInvalid(OpenBytes(RawSafetensors(Header({{"a", "F32", {1}, 0, 4}}), std::string(6, '\0'))),
                "model.safetensors: bytes [4, 6) at the end of the data section belong to no "
                "tensor (the format allows no unindexed bytes)");
}

TEST(CheckpointSafetensors, EmptyAndZeroSizedTensorsAreValid) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::FromBytes("x", RawSafetensors("{}", ""));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().empty());
  file = SafetensorsFile::FromBytes(
      "x", RawSafetensors(Header({{"z", "BF16", {0, 3}, 2, 2}, {"a", "BF16", {1}, 0, 2}}), "ab"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->tensors()[0].name, "a");  // data-section order
  EXPECT_EQ(file->tensors()[1].bytes, 0u);
}

// --- Checkpoint-level refusals ------------------------------------------

TinyCheckpoint Tiny(Architecture architecture = Architecture::kLlama, bool sharded = false) {
  TinyOptions options = DefaultOptions(architecture);
  options.sharded = sharded;
  return MakeTinyCheckpoint(options);
}

absl::Status Load(const TinyCheckpoint& c) {
  return Checkpoint::FromMemory(c.config_json, c.files, "tiny").status();
}

// The single file rewritten with `edit` applied to its tensors.
template <typename Edit>
TinyCheckpoint Rewritten(TinyCheckpoint c, Edit edit) {
  edit(c.tensors);
  c.files["model.safetensors"] = SafetensorsBytes(c.tensors);
  return c;
}

TEST(CheckpointRefusal, DTypeDisagreeingWithTheConfig) {
  const TinyCheckpoint c =
      Rewritten(Tiny(), [](std::vector<TinyTensor>& t) { t[3].dtype = DType::kFloat16; });
  ExpectInvalid(Load(c),
                "tiny/model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' is F16 "
                "but tiny/config.json declares dtype bfloat16 (every weight must have the "
                "config's dtype)");
}

TEST(CheckpointRefusal, MixedDTypesWithoutAConfigDType) {
  TinyCheckpoint c =
      Rewritten(Tiny(), [](std::vector<TinyTensor>& t) { t[1].dtype = DType::kFloat16; });
  Json config = Json::parse(c.config_json);
  config.erase("torch_dtype");
  c.config_json = config.dump();
  ExpectInvalid(Load(c),
                "tiny/model.safetensors: tensor 'model.layers.0.input_layernorm.weight' is F16 but "
                "tensor 'model.embed_tokens.weight' is BF16 (tiny/config.json declares no dtype, "
                "so every weight must share one)");
}

TEST(CheckpointRefusal, ShapeDisagreeingWithTheConfig) {
  const TinyCheckpoint c = Rewritten(Tiny(), [](std::vector<TinyTensor>& t) {
    t[3].shape = {16, 16};  // k_proj: [kv * head_dim, hidden] = [16, 32]
    t[3].bytes.resize(16 * 16 * 2);
  });
  ExpectInvalid(Load(c),
                "tiny/model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape "
                "[16, 16], expected [16, 32] ([num_key_value_heads * head_dim, hidden_size] from "
                "tiny/config.json)");
}

TEST(CheckpointRefusal, MissingTensors) {
  const TinyCheckpoint c = Rewritten(Tiny(), [](std::vector<TinyTensor>& t) {
    t.erase(t.begin() + 1, t.begin() + 7);
    t.pop_back();  // lm_head.weight
  });
  ExpectInvalid(Load(c),
                "tiny (14 tensors stored): 7 tensor(s) that tiny/config.json (LlamaForCausalLM, 2 "
                "layers) requires are missing: 'model.layers.0.input_layernorm.weight', "
                "'model.layers.0.self_attn.q_proj.weight', "
                "'model.layers.0.self_attn.k_proj.weight', "
                "'model.layers.0.self_attn.v_proj.weight' and 3 more; lm_head.weight is required "
                "because tiny/config.json has tie_word_embeddings false");
}

TEST(CheckpointRefusal, UnexpectedTensors) {
  TinyCheckpoint c = Rewritten(Tiny(Architecture::kQwen2), [](std::vector<TinyTensor>& t) {
    t.push_back({"lm_head.weight", DType::kBFloat16, {64, 32}, std::string(64 * 32 * 2, '\0')});
    t.push_back(
        {"model.layers.0.self_attn.o_proj.bias", DType::kBFloat16, {32}, std::string(64, '\0')});
  });
  ExpectInvalid(Load(c),
                "tiny (28 tensors stored): 2 tensor(s) are not part of a Qwen2ForCausalLM with "
                "tiny/config.json's settings: 'lm_head.weight', "
                "'model.layers.0.self_attn.o_proj.bias'; tiny/config.json has tie_word_embeddings "
                "true, so lm_head.weight must be absent");
}

TEST(CheckpointRefusal, NeitherWeightFile) {
  TinyCheckpoint c = Tiny();
  c.files.clear();
  const absl::Status status = Load(c);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(status.message()),
            "tiny: neither model.safetensors nor model.safetensors.index.json is present (a "
            "Hugging Face checkpoint has one of them)");
}

TEST(CheckpointRefusal, MissingDirectoryAndConfig) {
  absl::Status status = Checkpoint::Open("/nonexistent/baton/model").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(status.message()), "/nonexistent/baton/model: no such directory");
  const std::string dir = testing::MakeTempDir();
  ASSERT_FALSE(dir.empty());
  status = Checkpoint::Open(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(status.message()),
            dir +
                "/config.json: no such file (a Hugging Face model directory "
                "has config.json beside the weights)");
  testing::RemoveTree(dir);
}

Json IndexOf(const TinyCheckpoint& c) {
  return Json::parse(c.files.at("model.safetensors.index.json"));
}

TEST(CheckpointRefusal, IndexNamingAMissingShard) {
  TinyCheckpoint c = Tiny(Architecture::kLlama, /*sharded=*/true);
  c.files.erase("model-00002-of-00002.safetensors");
  const absl::Status status = Load(c);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(status.message()),
            "tiny/model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' (holding "
            "tensor 'lm_head.weight') is not in tiny");
}

TEST(CheckpointRefusal, ShardNamesOutsideTheDirectory) {
  for (const char* bad : {"../model.safetensors", "sub/model.safetensors", ""}) {
    TinyCheckpoint c = Tiny(Architecture::kLlama, /*sharded=*/true);
    Json index = IndexOf(c);
    index["weight_map"]["model.norm.weight"] = bad;
    c.files["model.safetensors.index.json"] = index.dump();
    ExpectInvalid(Load(c), "tiny/model.safetensors.index.json: shard '" + std::string(bad) +
                               "' for tensor 'model.norm.weight' is not a plain file name in the "
                               "model directory (no '/', '..' or control characters)");
  }
}

TEST(CheckpointRefusal, TensorsMovedUnindexedOrStoredTwice) {
  TinyCheckpoint c = Tiny(Architecture::kLlama, /*sharded=*/true);
  Json index = IndexOf(c);
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  c.files["model.safetensors.index.json"] = index.dump();
  ExpectInvalid(Load(c),
                "tiny/model-00002-of-00002.safetensors: tensor 'model.norm.weight' is stored here "
                "but model.safetensors.index.json maps it to 'model-00001-of-00002.safetensors'");
  index["weight_map"].erase("model.norm.weight");
  c.files["model.safetensors.index.json"] = index.dump();
  ExpectInvalid(Load(c),
                "tiny/model-00002-of-00002.safetensors: tensor 'model.norm.weight' is not in "
                "model.safetensors.index.json's weight_map (every stored tensor must be indexed)");
  index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  index["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors";
  c.files["model.safetensors.index.json"] = index.dump();
  ExpectInvalid(Load(c),
                "tiny/model.safetensors.index.json: weight_map puts tensor 'model.ghost.weight' in "
                "'model-00001-of-00002.safetensors', which does not contain it");
  // The same tensor in both shards.
  c = Tiny(Architecture::kLlama, /*sharded=*/true);
  TinyOptions options = DefaultOptions(Architecture::kLlama);
  std::vector<TinyTensor> all = testing::TinyTensors(options);
  std::vector<TinyTensor> second(all.begin() + all.size() / 2, all.end());
  second.push_back(all.front());
  c.files["model-00002-of-00002.safetensors"] = SafetensorsBytes(second);
  ExpectInvalid(Load(c),
                "tiny/model-00002-of-00002.safetensors: tensor 'model.embed_tokens.weight' is "
                "stored here but model.safetensors.index.json maps it to "
                "'model-00001-of-00002.safetensors'");
}

TEST(CheckpointRefusal, IndexShapeAndTypes) {
  TinyCheckpoint c = Tiny(Architecture::kLlama, /*sharded=*/true);
  c.files["model.safetensors.index.json"] = R"({"metadata": {}})";
  ExpectInvalid(Load(c), "tiny/model.safetensors.index.json: weight_map is missing");
  c.files["model.safetensors.index.json"] = R"({"weight_map": {"a": 3}})";
  ExpectInvalid(Load(c),
                "tiny/model.safetensors.index.json: weight_map['a'] must be a shard file "
                "name, got an integer 3");
  c.files["model.safetensors.index.json"] = R"({"weight_map": []})";
  ExpectInvalid(Load(c),
                "tiny/model.safetensors.index.json: weight_map must be an object of "
                "tensor name to shard file, got an array of 0 values");
}

TEST(CheckpointRefusal, ConfigRefusalsCarryTheConfigPath) {
  TinyCheckpoint c = Tiny();
  Json config = Json::parse(c.config_json);
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  c.config_json = config.dump();
  ExpectInvalid(Load(c),
                "tiny/config.json: rope_scaling.rope_type 'yarn' is not supported "
                "(supported: linear, llama3)");
}

}  // namespace
}  // namespace baton::checkpoint
