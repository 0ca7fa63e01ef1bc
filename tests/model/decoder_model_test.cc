// DecoderModel's option and request checks: each refusal names the field, the
// value and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "baton/decoder_model.h"

namespace baton {
namespace {

DecoderConfig Config() {
  DecoderConfig c;
  c.vocab = 256;
  c.max_context = 32;
  return c;
}

DecodeRequest Valid() {
  DecodeRequest r;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 4;
  return r;
}

void ExpectInvalid(const absl::Status& status, const std::string& fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find(fragment), std::string::npos)
      << "message: " << status.message() << "\nexpected to contain: " << fragment;
}

TEST(DecodeRequestTest, AValidRequestPasses) {
  EXPECT_TRUE(ValidateDecodeRequest(Config(), Valid()).ok());
  DecodeRequest r = Valid();
  r.prompt.assign(28, 5);  // 28 + 4 == max_context exactly
  r.stop_tokens = {255, 0, 7};
  r.sampling = SamplingParams{0.7f, 42, 50, 0.9f};
  EXPECT_TRUE(ValidateDecodeRequest(Config(), r).ok());
}

TEST(DecodeRequestTest, EachBadFieldIsNamedWithItsFix) {
  DecodeRequest r = Valid();
  r.prompt.clear();
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::prompt is empty; give at least one token");
  r = Valid();
  r.prompt[1] = 256;
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::prompt[1] is 256; tokens must be in [0, vocab = 256)");
  r.prompt[1] = -3;
  ExpectInvalid(ValidateDecodeRequest(Config(), r), "DecodeRequest::prompt[1] is -3");
  r = Valid();
  r.max_new_tokens = 0;
  ExpectInvalid(ValidateDecodeRequest(Config(), r), "DecodeRequest::max_new_tokens is 0");
  r = Valid();
  r.prompt.assign(29, 5);
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "prompt (29 tokens) + max_new_tokens (4) = 33 exceeds max_context 32");
  r = Valid();
  r.stop_tokens = {3, 256};
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::stop_tokens[1] is 256; tokens must be in [0, vocab = 256)");
  r.stop_tokens = {-2};
  ExpectInvalid(ValidateDecodeRequest(Config(), r), "DecodeRequest::stop_tokens[0] is -2");
  r.stop_tokens.assign(9, 1);
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::stop_tokens holds 9 tokens; at most 8 are supported");
  r = Valid();
  r.sampling = SamplingParams{NAN, 1};
  ExpectInvalid(ValidateDecodeRequest(Config(), r), "DecodeRequest::sampling.temperature is nan");
  r.sampling = SamplingParams{1.0f, 1, 0, 0.0f};
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::sampling.top_p is 0; use a value in (0, 1]");
  r.sampling = SamplingParams{1.0f, 1, 0, 1.0f, 2.5f};
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::sampling.presence_penalty is 2.5; use a value in [-2, 2]");
  r.sampling = SamplingParams{1.0f, 1, 0, 1.0f, 0.0f, NAN};
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::sampling.frequency_penalty is nan");
  r.sampling = SamplingParams{1.0f, 1, 0, 1.0f, 0.0f, 0.0f, 0.0f};
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::sampling.repetition_penalty is 0; use a finite value > 0");
  r.sampling = SamplingParams{1.0f, 1, 0, 1.0f, -2.0f, 2.0f, 0.5f, r.max_new_tokens};
  EXPECT_TRUE(ValidateDecodeRequest(Config(), r).ok()) << "the limits themselves pass";
  r.sampling->min_tokens = r.max_new_tokens + 1;
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                absl::StrCat("DecodeRequest::sampling.min_tokens is ", r.max_new_tokens + 1,
                             ", more than max_new_tokens"));
  r.sampling.reset();
  for (std::int32_t logprobs : {-1, 0, static_cast<std::int32_t>(kMaxLogprobs)}) {
    r.logprobs = logprobs;
    EXPECT_TRUE(ValidateDecodeRequest(Config(), r).ok()) << "logprobs " << logprobs;
  }
  r.logprobs = kMaxLogprobs + 1;
  ExpectInvalid(ValidateDecodeRequest(Config(), r),
                "DecodeRequest::logprobs is 21; it must be -1 (none) or in [0, 20]");
  r.logprobs = -2;
  ExpectInvalid(ValidateDecodeRequest(Config(), r), "DecodeRequest::logprobs is -2");
}

TEST(DecoderModelOptionsTest, OutOfRangeOptionsAreRefused) {
  DecoderModelOptions options;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  options.max_logprobs = kMaxLogprobs + 1;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_logprobs is 21; it must be in [0, 20] (0: logprobs off)");
  options.max_logprobs = 0;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok()) << "logprobs off";
  options.max_batch = 0;
  ExpectInvalid(ValidateDecoderModelOptions(options), "DecoderModelOptions::max_batch is 0");
  options = DecoderModelOptions{};
  // A rank without a group of GPUs to be a rank of (tests/model/
  // decoder_tp_gpu_test.cc checks the group's refusals on GPUs).
  options.tensor_parallel.rank = 1;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::tensor_parallel.rank is 1 without a group");
  options = DecoderModelOptions{};
  options.max_requests = 0;
  ExpectInvalid(ValidateDecoderModelOptions(options), "DecoderModelOptions::max_requests is 0");
  options = DecoderModelOptions{};
  options.step_clock_size = 1000;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::step_clock_size is 1000; it must be a power of two");
  options = DecoderModelOptions{};
  options.gemm = static_cast<DecoderGemm>(3);
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::gemm is not a DecoderGemm value; use kAuto, kCublasLt or "
                "kBatonGemv");
  for (DecoderGemm gemm : {DecoderGemm::kAuto, DecoderGemm::kCublasLt, DecoderGemm::kBatonGemv}) {
    options.gemm = gemm;
    EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  }
  options = DecoderModelOptions{};
  options.auto_wide_gemv_max_bucket = 64;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  options.auto_wide_gemv_max_bucket = 65;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::auto_wide_gemv_max_bucket is 65; it must be at most 64 (a "
                "block of the wide GEMV owns up to 64 sequences), or 0 to keep cuBLASLt above "
                "auto_gemv_max_bucket");
  options = DecoderModelOptions{};
  options.config.d_model = 100;  // not a multiple of 8: the config check's own message
  EXPECT_EQ(ValidateDecoderModelOptions(options).code(), absl::StatusCode::kInvalidArgument);
}

// The token budget holds a token of every decoding sequence; a chunk cap
// stays within the largest budget; the stream's window is a power of two.
TEST(DecoderModelOptionsTest, TheBudgetTheChunkAndTheStreamWindowAreChecked) {
  DecoderModelOptions options;
  options.max_batch = 64;
  options.max_tokens_per_step = 32;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_tokens_per_step is 32; it must be in [max_batch = 64, "
                "65536] (a step holds one token of every decoding sequence");
  options.max_tokens_per_step = 70000;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_tokens_per_step is 70000");
  options.max_tokens_per_step = 64;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  options.max_tokens_without_decodes = 0;
  options.max_chunk_tokens = 65;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_chunk_tokens is 65, above the largest step budget 64");
  // A chunk may take a step without decodes whole.
  options.max_tokens_without_decodes = 128;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  options.max_chunk_tokens = 129;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_chunk_tokens is 129, above the largest step budget 128");
  options.max_chunk_tokens = 1;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  // At most max_tokens_per_step: steps without decodes keep the budget.
  options.max_tokens_without_decodes = 8;
  EXPECT_TRUE(ValidateDecoderModelOptions(options).ok());
  options.max_tokens_without_decodes = 70000;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::max_tokens_without_decodes is 70000; it must be at most "
                "65536");
  options = DecoderModelOptions{};
  options.stream_window = 100;
  ExpectInvalid(ValidateDecoderModelOptions(options),
                "DecoderModelOptions::stream_window is 100; it must be a power of two in [1, "
                "65536]");
  options.stream_window = 0;
  ExpectInvalid(ValidateDecoderModelOptions(options), "DecoderModelOptions::stream_window is 0");
}

// KV pages hold a power of two of tokens, within [16, 4096].
TEST(DecoderModelOptionsTest, ThePageSizeIsAPowerOfTwoInRange) {
  DecoderModelOptions options;
  for (std::uint32_t page : {0u, 8u, 48u, 8192u}) {
    options.kv_page_tokens = page;
    ExpectInvalid(ValidateDecoderModelOptions(options),
                  "DecoderModelOptions::kv_page_tokens is " + std::to_string(page) +
                      "; it must be a power of two in [16, 4096] (e.g. 64)");
  }
  for (std::uint32_t page : {16u, 64u, 4096u}) {
    options.kv_page_tokens = page;
    EXPECT_TRUE(ValidateDecoderModelOptions(options).ok()) << page;
  }
}

}  // namespace
}  // namespace baton
