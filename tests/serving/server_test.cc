// The serving layer's checks that need no GPU (include/baton/server.h): the
// option names every front end parses, and ValidateServerOptions' refusals,
// each naming the option, the value and the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "baton/server.h"

namespace baton {
namespace {

TEST(ServerOptionNames, ParseWhatTheyPrintAndRefuseTheRestNamingTheChoices) {
  for (Engine engine : {Engine::kConditional, Engine::kTailLaunch, Engine::kDynamicParallelism}) {
    const absl::StatusOr<Engine> parsed = ParseEngine(EngineName(engine));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, engine);
  }
  for (DecoderGemm gemm : {DecoderGemm::kAuto, DecoderGemm::kBatonGemv, DecoderGemm::kCublasLt}) {
    const absl::StatusOr<DecoderGemm> parsed = ParseGemm(GemmName(gemm));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, gemm);
  }
  for (DecoderDType dtype : {DecoderDType::kBFloat16, DecoderDType::kFloat16}) {
    const absl::StatusOr<std::optional<DecoderDType>> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, std::optional<DecoderDType>(dtype));
  }
  const absl::StatusOr<std::optional<DecoderDType>> automatic = ParseDType("auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_FALSE(automatic->has_value());  // the checkpoint's

  const absl::Status engine = ParseEngine("tail").status();
  EXPECT_EQ(engine.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.message().find("engine 'tail'"), std::string::npos) << engine;
  EXPECT_NE(engine.message().find("'tail-launch'"), std::string::npos) << engine;
  const absl::Status gemm = ParseGemm("cublas").status();
  EXPECT_NE(gemm.message().find("gemm 'cublas'"), std::string::npos) << gemm;
  EXPECT_NE(gemm.message().find("'cublaslt'"), std::string::npos) << gemm;
  const absl::Status dtype = ParseDType("fp8").status();
  EXPECT_NE(dtype.message().find("dtype 'fp8'"), std::string::npos) << dtype;
  EXPECT_NE(dtype.message().find("'bfloat16'"), std::string::npos) << dtype;
}

TEST(ServerOptions, DefaultsAreValidAndEachRefusalNamesItsOption) {
  EXPECT_TRUE(ValidateServerOptions(ServerOptions{}).ok());

  ServerOptions batch;
  batch.runtime.max_batch = 8;  // the model's program carries it
  const absl::Status carried = ValidateServerOptions(batch);
  EXPECT_EQ(carried.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(carried.message().find("RuntimeOptions.max_batch"), std::string::npos) << carried;

  ServerOptions requests;
  requests.model.max_requests = requests.runtime.queue_capacity + 1;
  const absl::Status queue = ValidateServerOptions(requests);
  EXPECT_EQ(queue.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(queue.message().find("max_requests " + std::to_string(requests.model.max_requests)),
            std::string::npos)
      << queue;
  EXPECT_NE(queue.message().find("lower max_requests"), std::string::npos) << queue;

  ServerOptions model;
  model.model.max_batch = 0;  // the model's own check, through the server's
  EXPECT_EQ(ValidateServerOptions(model).code(), absl::StatusCode::kInvalidArgument);

  for (int size : {0, -1, kMaxPeerRanks + 1}) {
    ServerOptions ranks;
    ranks.tensor_parallel_size = size;
    const absl::Status refused = ValidateServerOptions(ranks);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find("tensor_parallel_size is " + std::to_string(size)),
              std::string::npos)
        << refused;
  }
  ServerOptions split;
  split.tensor_parallel_size = kMaxPeerRanks;  // (the GPUs are counted at Create)
  EXPECT_TRUE(ValidateServerOptions(split).ok());
}

// The lockstep group a split model needs: its batch, its largest step's
// rows (the larger budget, and at least a row per item) and its page size.
TEST(ServerOptions, LockstepGroupOptionsForHoldTheModelsLargestStep) {
  DecoderModelOptions model;
  model.max_batch = 16;
  model.max_tokens_per_step = 48;
  model.max_tokens_without_decodes = 64;
  model.kv_page_tokens = 32;
  const LockstepGroupOptions o = LockstepGroupOptionsFor(model, {0, 1});
  EXPECT_EQ(o.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(o.max_batch, 16u);
  EXPECT_EQ(o.max_tokens, 64u);
  EXPECT_EQ(o.min_page_tokens, 32u);
  model.max_batch = 128;
  model.max_tokens_per_step = 128;
  model.max_tokens_without_decodes = 0;
  EXPECT_EQ(LockstepGroupOptionsFor(model, {0, 1}).max_tokens, 128u);
}

// What a rank's PeerGroup must hold: the larger of a step's rows of the
// hidden state and every sequence's slice of the logits, 16-bit, rounded up
// to 16 bytes; computed here from the shape by hand.
TEST(ServerOptions, TensorParallelExchangeBytesIsTheLargestExchange) {
  DecoderModelOptions options;
  options.config.d_model = 128;
  options.config.vocab = 1000;  // padded to a multiple of the kernels' rows
  options.max_batch = 16;
  options.max_tokens_per_step = 48;
  options.max_tokens_without_decodes = 64;
  for (int size : {1, 2, 4}) {
    const std::size_t rows = std::size_t{64} * 128 * 2;
    const std::size_t logits = std::size_t{16} * (options.config.padded_vocab() / size) * 2;
    const std::size_t want = (std::max(rows, logits) + 15) / 16 * 16;
    const absl::StatusOr<std::size_t> got = TensorParallelExchangeBytes(options, size);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << "size " << size;
  }
  options.max_batch = 4;
  options.max_tokens_per_step = 2048;
  options.max_tokens_without_decodes = 0;
  const absl::StatusOr<std::size_t> rows = TensorParallelExchangeBytes(options, 2);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, std::size_t{2048} * 128 * 2);  // a chunk step's rows
  EXPECT_EQ(TensorParallelExchangeBytes(options, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.checkpoint = "/nonexistent/baton-model";
  EXPECT_EQ(TensorParallelExchangeBytes(options, 2).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton
