// Valid checkpoints load: every architecture, single file and sharded, the
// transformers v4 and v5 config styles, from memory and from disk, and every
// tensor reads back the bytes the writer put there.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "tiny_checkpoint.h"

namespace baton::checkpoint {
namespace {

using testing::DefaultOptions;
using testing::MakeTinyCheckpoint;
using testing::TestSeed;
using testing::TinyCheckpoint;
using testing::TinyOptions;
using testing::TinyTensor;

// Every expected tensor is there with the bytes written, nothing else is
// handed out, and the sizes add up.
void ExpectReadsBack(const Checkpoint& loaded, const TinyCheckpoint& written) {
  std::size_t bytes = 0;
  for (const TinyTensor& t : written.tensors) {
    SCOPED_TRACE(t.name);
    const TensorView* view = loaded.find(t.name);
    ASSERT_NE(view, nullptr);
    EXPECT_EQ(view->dtype, t.dtype);
    EXPECT_EQ(view->shape, t.shape);
    ASSERT_EQ(view->bytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(view->data, t.bytes.data(), t.bytes.size()), 0);
    EXPECT_EQ(&loaded.tensor(t.name), view);
    bytes += t.bytes.size();
  }
  EXPECT_EQ(loaded.weight_bytes(), bytes);
  // The loader's list and the writer's independent one name the same tensors
  // with the same shapes.
  std::map<std::string, std::vector<std::int64_t>> listed, wrote;
  for (const ExpectedTensor& e : ExpectedTensors(loaded.spec())) listed[e.name] = e.shape;
  for (const TinyTensor& t : written.tensors) wrote[t.name] = t.shape;
  EXPECT_EQ(listed, wrote);
}

class CheckpointLoad
    : public ::testing::TestWithParam<std::tuple<Architecture, bool /*sharded*/, bool /*v5*/>> {};

TEST_P(CheckpointLoad, EveryTensorReadsBackItsBytes) {
  const auto [architecture, sharded, v5] = GetParam();
  TinyOptions options = DefaultOptions(architecture);
  options.sharded = sharded;
  options.v5_config = v5;
  options.seed = TestSeed();
  const TinyCheckpoint written = MakeTinyCheckpoint(options);
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectReadsBack(*loaded, written);
  const ModelSpec& spec = loaded->spec();
  EXPECT_EQ(spec.architecture, architecture);
  EXPECT_EQ(spec.architecture_name, ArchitectureName(architecture));
  EXPECT_EQ(spec.dtype, DType::kBFloat16);
  EXPECT_EQ(loaded->dtype(), DType::kBFloat16);
  EXPECT_EQ(spec.bos_token_id, 1);
  switch (architecture) {
    case Architecture::kLlama:
      EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kLlama3);
      EXPECT_EQ(spec.rope_scaling.factor, 32.0);
      EXPECT_EQ(spec.rope_scaling.original_max_position_embeddings, 8192);
      EXPECT_EQ(spec.rope_theta, 500000.0);
      EXPECT_EQ(spec.head_dim, 8);
      EXPECT_EQ(spec.eos_token_ids, (std::vector<int>{2, 3}));
      EXPECT_FALSE(spec.qkv_bias);
      EXPECT_FALSE(spec.sliding_window.has_value());
      break;
    case Architecture::kMistral:
      EXPECT_EQ(spec.head_dim, 16);  // explicit, not hidden / heads
      EXPECT_EQ(spec.sliding_window, 4096);
      EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kNone);
      EXPECT_EQ(spec.rope_theta, 1e6);
      break;
    case Architecture::kQwen2:
      EXPECT_TRUE(spec.qkv_bias);
      EXPECT_FALSE(spec.o_bias);
      EXPECT_TRUE(spec.tie_word_embeddings);
      EXPECT_FALSE(spec.sliding_window.has_value());  // use_sliding_window false
      EXPECT_EQ(spec.eos_token_ids, (std::vector<int>{3}));
      EXPECT_EQ(loaded->find("lm_head.weight"), nullptr);
      break;
  }
  // A moved checkpoint keeps its views valid (they point into owned storage).
  Checkpoint moved = *std::move(loaded);
  ExpectReadsBack(moved, written);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, CheckpointLoad,
                         ::testing::Combine(::testing::Values(Architecture::kLlama,
                                                              Architecture::kMistral,
                                                              Architecture::kQwen2),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(ArchitectureName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "Sharded" : "Single") +
                                  (std::get<2>(info.param) ? "V5Config" : "V4Config");
                         });

TEST(CheckpointLoadOther, LlamaWithAttentionBiasAndFloat32AndFloat16) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    TinyOptions options = DefaultOptions(Architecture::kLlama);
    options.attention_bias = true;
    options.dtype = dtype;
    options.seed = TestSeed() + 1;
    const TinyCheckpoint written = MakeTinyCheckpoint(options);
    absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->spec().qkv_bias);
    EXPECT_TRUE(loaded->spec().o_bias);
    EXPECT_NE(loaded->find("model.layers.1.self_attn.o_proj.bias"), nullptr);
    ExpectReadsBack(*loaded, written);
  }
}

TEST(CheckpointLoadOther, OpensDirectoriesOnDiskSingleAndSharded) {
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded" : "single");
    TinyOptions options = DefaultOptions(Architecture::kQwen2);
    options.sharded = sharded;
    options.seed = TestSeed() + 2;
    const TinyCheckpoint written = MakeTinyCheckpoint(options);
    const std::string dir = testing::MakeTempDir();
    ASSERT_FALSE(dir.empty());
    ASSERT_TRUE(testing::WriteDirectory(written, dir).ok());
    {
      absl::StatusOr<Checkpoint> loaded = Checkpoint::Open(dir);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      ExpectReadsBack(*loaded, written);
      EXPECT_EQ(loaded->tensor("model.norm.weight").file,
                dir + (sharded ? "/model-00002-of-00002.safetensors" : "/model.safetensors"));
    }
    testing::RemoveTree(dir);
  }
}

TEST(CheckpointLoadOther, TheIndexWinsOverAStaleSingleFile) {
  TinyOptions options = DefaultOptions(Architecture::kLlama);
  options.sharded = true;
  options.seed = TestSeed() + 3;
  TinyCheckpoint written = MakeTinyCheckpoint(options);
  written.files["model.safetensors"] = "stale leftover, not a safetensors file";
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectReadsBack(*loaded, written);
}

TEST(CheckpointLoadOther, OldCheckpointsRotaryInvFreqBufferIsIgnored) {
  TinyOptions options = DefaultOptions(Architecture::kLlama);
  options.seed = TestSeed() + 4;
  TinyCheckpoint written = MakeTinyCheckpoint(options);
  std::vector<TinyTensor> tensors = written.tensors;
  // Saved as float32 by old transformers even in a bfloat16 checkpoint.
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                     DType::kFloat32,
                     {4},
                     std::string(16, '\0')});
  written.files["model.safetensors"] = testing::SafetensorsBytes(tensors);
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->find("model.layers.0.self_attn.rotary_emb.inv_freq"), nullptr);
  ExpectReadsBack(*loaded, written);
}

TEST(CheckpointLoadOther, NoDeclaredDTypeTakesTheTensorsShared) {
  TinyOptions options = DefaultOptions(Architecture::kMistral);
  options.dtype = DType::kFloat16;
  options.seed = TestSeed() + 5;
  TinyCheckpoint written = MakeTinyCheckpoint(options);
  nlohmann::json config = testing::TinyConfig(options);
  config.erase("torch_dtype");
  written.config_json = config.dump();
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->spec().dtype.has_value());
  EXPECT_EQ(loaded->dtype(), DType::kFloat16);
}

// A 256k vocabulary (Gemma-sized) and large dimensions go through the same
// size_t arithmetic as a small model.
TEST(CheckpointLoadOther, A256kVocabularyLoads) {
  TinyOptions options = DefaultOptions(Architecture::kQwen2);
  options.vocab_size = 262144;
  options.hidden_size = 16;
  options.num_heads = 2;
  options.num_kv_heads = 1;
  options.intermediate_size = 16;
  options.num_layers = 1;
  options.seed = TestSeed() + 6;
  const TinyCheckpoint written = MakeTinyCheckpoint(options);
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tensor("model.embed_tokens.weight").shape,
            (std::vector<std::int64_t>{262144, 16}));
  ExpectReadsBack(*loaded, written);
}

// A file past 4 GiB maps without being read: a sparse file whose one tensor
// needs more than 32 bits of offset.
TEST(CheckpointLoadOther, MapsAFileLargerThan4GiB) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_FALSE(dir.empty());
  const std::int64_t rows = 262144;
  const std::int64_t cols = 8448;  // rows * cols * 2 bytes = 4.125 GiB
  const std::uint64_t bytes = static_cast<std::uint64_t>(rows * cols * 2);
  const std::string header =
      nlohmann::json{
          {"embed", {{"dtype", "BF16"}, {"shape", {rows, cols}}, {"data_offsets", {0, bytes}}}}}
          .dump();
  const std::string head = testing::RawSafetensors(header, "");
  const std::string path = dir + "/model.safetensors";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const bool written = ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()) &&
                       ::ftruncate(fd, static_cast<off_t>(head.size() + bytes)) == 0;
  ::close(fd);
  if (!written) {
    testing::RemoveTree(dir);
    GTEST_SKIP() << "this file system cannot hold a sparse 4 GiB file";
  }
  {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(file->tensors().size(), 1u);
    EXPECT_EQ(file->tensors()[0].bytes, bytes);
    EXPECT_EQ(NumElements(file->tensors()[0]), static_cast<std::size_t>(rows * cols));
    EXPECT_EQ(file->size(), head.size() + bytes);
    // The last byte is readable (a hole reads as zero).
    EXPECT_EQ(file->tensors()[0].data[bytes - 1], 0);
  }
  testing::RemoveTree(dir);
}

TEST(CheckpointLoadOther, ExpectedTensorsNamesTheConfigFields) {
  TinyOptions options = DefaultOptions(Architecture::kQwen2);
  absl::StatusOr<ModelSpec> spec =
      ParseModelConfig(testing::TinyConfig(options).dump(), "config.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<ExpectedTensor> expected = ExpectedTensors(*spec);
  ASSERT_EQ(expected.size(), 2u + 2u * 12u);  // embed, norm; 12 per layer; tied lm_head
  const ExpectedTensor* k = nullptr;
  for (const ExpectedTensor& e : expected) {
    if (e.name == "model.layers.0.self_attn.k_proj.weight") k = &e;
  }
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(k->derivation, "[num_key_value_heads * head_dim, hidden_size]");
  std::set<std::string> names;
  for (const ExpectedTensor& e : expected) names.insert(e.name);
  EXPECT_EQ(names.size(), expected.size());
}

TEST(CheckpointLoadOther, AskingForATensorOutsideTheListAborts) {
  TinyOptions options = DefaultOptions(Architecture::kQwen2);
  const TinyCheckpoint written = MakeTinyCheckpoint(options);
  absl::StatusOr<Checkpoint> loaded = Checkpoint::FromMemory(written.config_json, written.files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DEATH((void)loaded->tensor("lm_head.weight"), "'lm_head.weight' is not a tensor");
}

}  // namespace
}  // namespace baton::checkpoint
