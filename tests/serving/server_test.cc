// The serving layer's checks that need no GPU (include/baton/server.h): the
// option names every front end parses, and ValidateServerOptions' refusals,
// each naming the option, the value and the fix.
#include <gtest/gtest.h>

#include <optional>
#include <string>

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
}

}  // namespace
}  // namespace baton
