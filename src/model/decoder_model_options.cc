// The decoder model's option and request checks: pure, CPU-testable
// (decoder_model_test.cc).
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/decoder_model.h"
#include "baton/status.h"
#include "kernels/decoder_config_check.h"
#include "ops/wide_gemv.h"
#include "plan/tensor_parallel.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxModelBatch = 1024;
constexpr std::uint32_t kMaxRequests = 1u << 20;
constexpr std::uint32_t kMaxStepRows = 1u << 16;
constexpr std::uint32_t kMaxStreamWindow = 1u << 16;
constexpr std::uint32_t kMinPageTokens = 16;
constexpr std::uint32_t kMaxPageTokens = 4096;

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& sampling, absl::string_view what) {
  if (std::isnan(sampling.temperature) || std::isinf(sampling.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".temperature is ", sampling.temperature,
                     "; use a finite value (<= 0 for greedy, e.g. 0.7 to sample)"));
  }
  if (!(sampling.top_p > 0.0f) || std::isinf(sampling.top_p)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".top_p is ", sampling.top_p,
                                                   "; use a value in (0, 1] (1: no top-p filter)"));
  }
  // OpenAI's range for its two penalties; NaN fails both comparisons.
  for (const auto& [name, value] : {std::pair<const char*, float>{"presence_penalty",
                                                                  sampling.presence_penalty},
                                    {"frequency_penalty", sampling.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".", name, " is ", value, "; use a value in [-2, 2] (0: off)"));
    }
  }
  if (!(sampling.repetition_penalty > 0.0f) || std::isinf(sampling.repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".repetition_penalty is ", sampling.repetition_penalty,
                     "; use a finite value > 0 (1: off; above 1 discourages repetition)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDecoderModelOptions(const DecoderModelOptions& options) {
  // A checkpoint's config is checked when it is read (DecoderModel::Create).
  if (options.checkpoint.empty()) BATON_RETURN_IF_ERROR(ValidateDecoderConfig(options.config));
  if (options.max_context > static_cast<std::uint32_t>(kDecoderMaxContext)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_context is %u; Baton serves at most %d tokens (the longest "
        "context its kernels were tested at): lower it (0: the checkpoint's, capped at %d)",
        options.max_context, kDecoderMaxContext, kDecoderMaxContext));
  }
  if (options.dtype.has_value() && *options.dtype != DecoderDType::kFloat16 &&
      *options.dtype != DecoderDType::kBFloat16) {
    return absl::InvalidArgumentError(
        "DecoderModelOptions::dtype is not a DecoderDType; use kFloat16, kBFloat16 or leave it "
        "empty (the checkpoint's)");
  }
  BATON_RETURN_IF_ERROR(ValidateSamplingParams(options.sampling, "DecoderModelOptions::sampling"));
  if (options.max_batch == 0 || options.max_batch > kMaxModelBatch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_batch is %u; it must be in [1, %u] (the runtime's max_batch)",
        options.max_batch, kMaxModelBatch));
  }
  if (options.max_tokens_per_step < options.max_batch ||
      options.max_tokens_per_step > kMaxStepRows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_tokens_per_step is %u; it must be in [max_batch = %u, %u] (a "
        "step holds one token of every decoding sequence; e.g. 768)",
        options.max_tokens_per_step, options.max_batch, kMaxStepRows));
  }
  if (options.max_tokens_without_decodes > kMaxStepRows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_tokens_without_decodes is %u; it must be at most %u (0 or at "
        "most max_tokens_per_step: steps without decodes keep max_tokens_per_step; e.g. 2048)",
        options.max_tokens_without_decodes, kMaxStepRows));
  }
  const std::uint32_t largest_budget = options.tokens().max_rows();
  if (options.max_chunk_tokens > largest_budget) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_chunk_tokens is %u, above the largest step budget %u "
        "(max_tokens_per_step, max_tokens_without_decodes); use at most that (0: the step's "
        "budget, 1: a prompt token per step)",
        options.max_chunk_tokens, largest_budget));
  }
  if (!IsPowerOfTwo(options.stream_window) || options.stream_window > kMaxStreamWindow) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::stream_window is %u; it must be a power of two in [1, %u] (e.g. "
        "256)",
        options.stream_window, kMaxStreamWindow));
  }
  if (options.max_requests == 0 || options.max_requests > kMaxRequests) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_requests is %u; it must be in [1, %u] (entries are reused once "
        "their completion is polled)",
        options.max_requests, kMaxRequests));
  }
  if (options.gemm != DecoderGemm::kCublasLt && options.gemm != DecoderGemm::kBatonGemv &&
      options.gemm != DecoderGemm::kAuto) {
    return absl::InvalidArgumentError(
        "DecoderModelOptions::gemm is not a DecoderGemm value; use kAuto, kCublasLt or kBatonGemv");
  }
  if (options.auto_wide_gemv_max_bucket > ops::kWideGemvMaxBucket) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::auto_wide_gemv_max_bucket is %u; it must be at most %u (a block of "
        "the wide GEMV owns up to %u sequences), or 0 to keep cuBLASLt above "
        "auto_gemv_max_bucket",
        options.auto_wide_gemv_max_bucket, ops::kWideGemvMaxBucket, ops::kWideGemvMaxBucket));
  }
  if (!IsPowerOfTwo(options.kv_page_tokens) || options.kv_page_tokens < kMinPageTokens ||
      options.kv_page_tokens > kMaxPageTokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::kv_page_tokens is %u; it must be a power of two in [%u, %u] (e.g. "
        "64)",
        options.kv_page_tokens, kMinPageTokens, kMaxPageTokens));
  }
  if (options.max_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_logprobs is %u; it must be in [0, %u] (0: logprobs off)",
        options.max_logprobs, kMaxLogprobs));
  }
  if (const TensorParallelOptions& tp = options.tensor_parallel; tp.group != nullptr) {
    if (tp.rank < 0 || tp.rank >= tp.group->ranks()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DecoderModelOptions::tensor_parallel.rank is %d; the group has %d ranks: use one in "
          "[0, %d)",
          tp.rank, tp.group->ranks(), tp.group->ranks()));
    }
    if (options.checkpoint.empty()) {
      BATON_RETURN_IF_ERROR(detail::ValidateTensorParallel(
          options.config, detail::TensorParallel{tp.group->ranks(), tp.rank}));
    }
  } else if (options.tensor_parallel.rank != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::tensor_parallel.rank is %d without a group; set "
        "tensor_parallel.group (a PeerGroup of the GPUs) or leave the rank 0",
        options.tensor_parallel.rank));
  }
  if (!IsPowerOfTwo(options.step_clock_size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::step_clock_size is %u; it must be a power of two (e.g. 65536)",
        options.step_clock_size));
  }
  return absl::OkStatus();
}

absl::Status ValidateDecodeRequest(const DecoderConfig& config, const DecodeRequest& request) {
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError(
        "DecodeRequest::prompt is empty; give at least one token (e.g. a BOS token)");
  }
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= config.vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("DecodeRequest::prompt[%u] is %d; tokens must be in [0, vocab = %d)", i,
                          request.prompt[i], config.vocab));
    }
  }
  if (request.max_new_tokens == 0) {
    return absl::InvalidArgumentError("DecodeRequest::max_new_tokens is 0; ask for at least 1");
  }
  const std::uint64_t total = request.prompt.size() + std::uint64_t{request.max_new_tokens};
  if (total > static_cast<std::uint64_t>(config.max_context)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeRequest: prompt (%u tokens) + max_new_tokens (%u) = %u exceeds max_context %d; "
        "shorten the prompt, lower max_new_tokens or build the model with a longer context",
        request.prompt.size(), request.max_new_tokens, total, config.max_context));
  }
  if (request.stop_tokens.size() > kMaxStopTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DecodeRequest::stop_tokens holds %u tokens; at most %u are supported",
                        request.stop_tokens.size(), kMaxStopTokens));
  }
  for (std::size_t i = 0; i < request.stop_tokens.size(); ++i) {
    if (request.stop_tokens[i] < 0 || request.stop_tokens[i] >= config.vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("DecodeRequest::stop_tokens[%u] is %d; tokens must be in [0, vocab = %d)",
                          i, request.stop_tokens[i], config.vocab));
    }
  }
  if (request.logprobs < -1 || request.logprobs > static_cast<std::int32_t>(kMaxLogprobs)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeRequest::logprobs is %d; it must be -1 (none) or in [0, %u] (top alternatives)",
        request.logprobs, kMaxLogprobs));
  }
  if (request.sampling.has_value()) {
    BATON_RETURN_IF_ERROR(ValidateSamplingParams(*request.sampling, "DecodeRequest::sampling"));
    if (request.sampling->min_tokens > request.max_new_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DecodeRequest::sampling.min_tokens is %u, more than max_new_tokens (%u): lower it",
          request.sampling->min_tokens, request.max_new_tokens));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
