// What DecoderModel::Create refuses in a checkpoint the loader accepts but
// Baton's kernels cannot serve: each refusal names the file, the field, the
// value and what is supported, and comes before any GPU work (so these run
// on machines without one).
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "baton/decoder_model.h"
#include "tiny_checkpoint.h"

namespace baton {
namespace {

using checkpoint::Architecture;
using checkpoint::testing::TinyOptions;

// Writes a checkpoint of `o` and creates a model of it with max_context.
absl::Status CreateFrom(const TinyOptions& o, std::uint32_t max_context, std::string& dir) {
  dir = checkpoint::testing::MakeTempDir();
  const absl::Status written =
      checkpoint::testing::WriteDirectory(checkpoint::testing::MakeTinyCheckpoint(o), dir);
  if (!written.ok()) return written;
  DecoderModelOptions options;
  options.checkpoint = dir;
  options.max_context = max_context;
  return DecoderModel::Create(options).status();
}

void ExpectRefused(const TinyOptions& o, std::uint32_t max_context, const std::string& text) {
  std::string dir;
  const absl::Status status = CreateFrom(o, max_context, dir);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), text))
      << "message: " << status.message() << "\nexpected to contain: " << text;
  checkpoint::testing::RemoveTree(dir);
}

TEST(CheckpointModelRefusal, HeadDimAboveTheKernelsLimit) {
  TinyOptions o = checkpoint::testing::DefaultOptions(Architecture::kMistral);
  o.head_dim = 256;
  ExpectRefused(o, 64,
                "/config.json: head_dim 256 is not supported (supported: even values up to 128");
}

// Vocabularies of any size up to 2^18 are served (padded to 16-byte rows at
// load; decoder_checkpoint_gpu_test runs 251 and 1001); other row widths must
// be multiples of 8.
TEST(CheckpointModelRefusal, RowWidthsNotAMultipleOfEightAndVocabulariesPastTheLimit) {
  TinyOptions o = checkpoint::testing::DefaultOptions(Architecture::kLlama);
  o.intermediate_size = 100;
  ExpectRefused(o, 64,
                "/config.json: intermediate_size 100 is not supported (supported: multiples of 8");
  o = checkpoint::testing::DefaultOptions(Architecture::kLlama);
  o.vocab_size = (1 << 18) + 1;
  ExpectRefused(o, 64, "/config.json: vocab_size 262145 is not supported (supported: up to 262144");
}

TEST(CheckpointModelRefusal, SlidingWindowBelowTheServedContext) {
  TinyOptions o = checkpoint::testing::DefaultOptions(Architecture::kMistral);
  o.max_position_embeddings = 8192;
  ExpectRefused(o, 8192,
                "/config.json: sliding_window 4096 is below the served context 8192 (supported: "
                "no sliding window, or one at least the served context");
}

TEST(CheckpointModelRefusal, ContextBeyondTheModelOrTheKernels) {
  TinyOptions o = checkpoint::testing::DefaultOptions(Architecture::kLlama);
  o.max_position_embeddings = 128;
  ExpectRefused(o, 256, "DecoderModelOptions::max_context 256 exceeds ");
  ExpectRefused(o, (1u << 20) + 1,
                "DecoderModelOptions::max_context is 1048577; Baton serves at most 1048576 "
                "tokens");
}

TEST(CheckpointModelRefusal, LoaderRefusalsComeThroughCreate) {
  DecoderModelOptions options;
  options.checkpoint = "/nonexistent/baton-model";
  const absl::Status status = DecoderModel::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "/nonexistent/baton-model")) << status;
}

}  // namespace
}  // namespace baton
