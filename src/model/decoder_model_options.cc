// The decoder model's option and request checks: pure, CPU-testable
// (decoder_model_test.cc).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/decoder_model.h"
#include "baton/status.h"
#include "kernels/decoder_config_check.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxModelBatch = 1024;
constexpr std::uint32_t kMaxRequests = 1u << 20;

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

}  // namespace

absl::Status ValidateDecoderModelOptions(const DecoderModelOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateDecoderConfig(options.config));
  if (options.max_batch == 0 || options.max_batch > kMaxModelBatch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::max_batch is %u; it must be in [1, %u] (the runtime's max_batch)",
        options.max_batch, kMaxModelBatch));
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
  if (request.stop_token < -1 || request.stop_token >= config.vocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DecodeRequest::stop_token is %d; use -1 (none) or a token in [0, %d)",
                        request.stop_token, config.vocab));
  }
  return absl::OkStatus();
}

}  // namespace baton
