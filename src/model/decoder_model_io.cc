// DecoderModel: the request table written from the host, and everything read
// back (generated tokens, the token stream, logits, the step clock).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"
#include "decoder_model_impl.h"
#include "kernels/half_bits.h"

namespace baton {

absl::Status DecoderModel::Impl::ValidateRequest(const DecodeRequest& request) const {
  const absl::Status valid = ValidateDecodeRequest(config_, request);
  const std::uint64_t total = request.prompt.size() + std::uint64_t{request.max_new_tokens};
  if (!valid.ok()) {
    if (total <= static_cast<std::uint64_t>(config_.max_context)) return valid;
    // Too long for the context: say what set the limit.
    return absl::InvalidArgumentError(
        absl::StrCat(valid.message(), " (max_context is set by ", info_.context_limit, ")"));
  }
  if (request.logprobs >= 0 && options_.max_logprobs == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeRequest::logprobs is %d, but DecoderModelOptions::max_logprobs is 0 (logprobs are "
        "off): build the model with max_logprobs >= %d, or set logprobs to -1",
        request.logprobs, std::max(request.logprobs, 1)));
  }
  if (request.logprobs > static_cast<std::int64_t>(options_.max_logprobs)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeRequest::logprobs is %d, above DecoderModelOptions::max_logprobs (%u); ask for "
        "fewer or raise max_logprobs (at most %u)",
        request.logprobs, options_.max_logprobs, kMaxLogprobs));
  }
  // The pages it reserves must fit the pool, or it would wait forever.
  const PagePolicy pages = page_policy();
  if (PagesFor(pages, total) > pages.pool_pages) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeRequest: prompt (%u tokens) + max_new_tokens (%u) = %u needs %u KV pages of %u "
        "tokens but the pool holds %u (set by %s); shorten the request or raise "
        "DecoderModelOptions::kv_pool_pages",
        request.prompt.size(), request.max_new_tokens, total, PagesFor(pages, total),
        pages.page_tokens, pages.pool_pages, info_.kv_pool_limit));
  }
  return absl::OkStatus();
}

absl::Status DecoderModel::Impl::WriteRequests(std::uint32_t first,
                                               absl::Span<const DecodeRequest> requests) {
  if (first > options_.max_requests || requests.size() > options_.max_requests - first) {
    return absl::OutOfRangeError(absl::StrFormat(
        "DecoderModel::WriteRequests: entries [%u, %u) exceed the request table's %u entries; "
        "reuse entries whose completions were polled or raise max_requests",
        first, std::uint64_t{first} + requests.size(), options_.max_requests));
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const absl::Status valid = ValidateRequest(requests[i]);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, " (entry ", first + i, "): ", valid.message()));
    }
  }
  if (requests.empty()) return absl::OkStatus();
  const std::size_t row = config_.max_context;
  std::vector<DecodeRequestInfo> infos(requests.size());
  std::vector<std::int32_t> rows(requests.size() * row, 0);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const DecodeRequest& r = requests[i];
    DecodeRequestInfo& info = infos[i];
    info.prompt_tokens = static_cast<std::uint32_t>(r.prompt.size());
    info.max_new_tokens = r.max_new_tokens;
    info.sequence_id = r.sequence_id;
    const SamplingParams sampling = r.sampling.value_or(options_.sampling);
    info.sampling =
        PositionSampling{sampling.temperature, sampling.top_k, sampling.top_p, 0, 0, sampling.seed};
    // The count + 1 (0: none); step_begin passes it on for the steps that
    // generate.
    info.sampling.logprobs = static_cast<std::uint16_t>(r.logprobs + 1);
    info.min_tokens = sampling.min_tokens;
    info.presence_penalty = sampling.presence_penalty;
    info.frequency_penalty = sampling.frequency_penalty;
    info.repetition_penalty = sampling.repetition_penalty;
    info.penalized = HasPenalties(sampling.presence_penalty, sampling.frequency_penalty,
                                  sampling.repetition_penalty)
                         ? 1u
                         : 0u;
    info.stop_count = static_cast<std::uint32_t>(r.stop_tokens.size());
    std::copy(r.stop_tokens.begin(), r.stop_tokens.end(), info.stop_tokens);
    std::copy(r.prompt.begin(), r.prompt.end(), rows.begin() + i * row);
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(requests_.data() + first, infos.data(),
                                             infos.size() * sizeof(DecodeRequestInfo),
                                             cudaMemcpyHostToDevice, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sequences_.data() + first * row, rows.data(),
                                             rows.size() * sizeof(std::int32_t),
                                             cudaMemcpyHostToDevice, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      cancel_.data() + first, 0, requests.size() * sizeof(std::uint32_t), stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  stream_words_.Clear(first, static_cast<std::uint32_t>(requests.size()));
  logprob_ring_.Clear(first, static_cast<std::uint32_t>(requests.size()));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    logprob_counts_[first + i] = requests[i].logprobs;
    prompt_lengths_[first + i] = infos[i].prompt_tokens;
    token_bounds_[first + i] = infos[i].prompt_tokens + infos[i].max_new_tokens;
  }
  return absl::OkStatus();
}

WorkItem DecoderModel::Impl::WorkItemFor(std::uint32_t entry) const {
  const bool known = entry < prompt_lengths_.size();
  const std::uint32_t prompt = known ? prompt_lengths_[entry] : 0;
  // An entry never written reserves one page (the device refuses it at once).
  const std::uint32_t bound = known && token_bounds_[entry] != 0 ? token_bounds_[entry] : 1;
  return WorkItem::make(kDecodeRequestKind, entry, std::uint64_t{bound} << 32 | prompt);
}

absl::StatusOr<std::vector<std::int32_t>> DecoderModel::Impl::ReadGenerated(
    std::uint32_t entry, std::uint32_t count) const {
  if (entry >= options_.max_requests) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::ReadGenerated: entry %u is past the table's %u entries",
                        entry, options_.max_requests));
  }
  DecodeRequestInfo info;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&info, requests_.data() + entry, sizeof(info),
                                             cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  if (count > info.max_new_tokens) {
    return absl::OutOfRangeError(absl::StrFormat(
        "DecoderModel::ReadGenerated: %u tokens asked of entry %u, which generates at most %u",
        count, entry, info.max_new_tokens));
  }
  std::vector<std::int32_t> tokens(count);
  const std::size_t offset = std::size_t{entry} * config_.max_context + info.prompt_tokens;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens.data(), sequences_.data() + offset,
                                             count * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                             stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  return tokens;
}

absl::StatusOr<std::uint32_t> DecoderModel::Impl::ReadStream(std::uint32_t entry,
                                                             std::uint32_t from,
                                                             std::vector<std::int32_t>& out) const {
  // Tokens a slow reader missed are final in the sequence table.
  const auto copy_missed = [this](std::uint32_t e, std::uint32_t begin, std::uint32_t end,
                                  std::int32_t* to) -> absl::Status {
    const std::size_t offset = std::size_t{e} * config_.max_context + prompt_lengths_[e] + begin;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, sequences_.data() + offset,
                                               (end - begin) * sizeof(std::int32_t),
                                               cudaMemcpyDeviceToHost, stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  };
  return stream_words_.Read(entry, from, out, copy_missed);
}

absl::Status DecoderModel::Impl::ReadLogprobs(std::uint32_t entry, std::uint32_t from,
                                              std::uint32_t to,
                                              std::vector<TokenLogprobs>& out) const {
  if (entry >= options_.max_requests) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::ReadLogprobs: entry %u is past the table's %u entries",
                        entry, options_.max_requests));
  }
  if (logprob_counts_[entry] < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "DecoderModel::ReadLogprobs: entry %u's request did not ask for logprobs (set "
        "DecodeRequest::logprobs to 0 or more)",
        entry));
  }
  return logprob_ring_.Read(entry, from, to, static_cast<std::uint32_t>(logprob_counts_[entry]),
                            out);
}

absl::Status DecoderModel::Impl::Cancel(std::uint32_t entry) {
  if (entry >= options_.max_requests) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::Cancel: entry %u is past the table's %u entries", entry,
                        options_.max_requests));
  }
  // Device memory, set by a memset on the model's stream that runs beside the
  // engine's steps (not waited for): the step's end reads the flag at each
  // token it generates from L2, where mapped host memory would cost a PCIe
  // round trip on every step's critical path. Any nonzero word cancels.
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(cancel_.data() + entry, 1, sizeof(std::uint32_t), stream_.get()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DecoderModel::Impl::ReadLogits(std::uint32_t position) const {
  if (position >= options_.max_batch) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::ReadLogits: position %u is past max_batch %u", position,
                        options_.max_batch));
  }
  const int vocab = config_.vocab;
  std::vector<std::uint16_t> bits(vocab);
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(bits.data(), logits_.data() + std::size_t{position} * config_.padded_vocab(),
                      vocab * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  std::vector<float> out(vocab);
  for (int i = 0; i < vocab; ++i) out[i] = HalfBitsToFloat(bits[i], config_.dtype);
  return out;
}

absl::StatusOr<std::vector<std::uint64_t>> DecoderModel::Impl::ReadStepEnds(
    std::uint64_t first, std::uint32_t count) const {
  if (count > options_.step_clock_size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "DecoderModel::ReadStepEnds: %u steps asked, the step clock keeps %u (raise "
        "DecoderModelOptions::step_clock_size)",
        count, options_.step_clock_size));
  }
  std::vector<unsigned long long> ring(options_.step_clock_size);
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ring.data(), step_end_ns_.data(),
                                             ring.size() * sizeof(unsigned long long),
                                             cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  std::vector<std::uint64_t> out(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    out[i] = ring[(first + i) & (options_.step_clock_size - 1)];
  }
  return out;
}

absl::Status DecoderModel::ValidateRequest(const DecodeRequest& request) const {
  return impl_->ValidateRequest(request);
}
absl::Status DecoderModel::WriteRequests(std::uint32_t first_entry,
                                         absl::Span<const DecodeRequest> requests) {
  return impl_->WriteRequests(first_entry, requests);
}
WorkItem DecoderModel::WorkItemFor(std::uint32_t entry) const { return impl_->WorkItemFor(entry); }
absl::Status DecoderModel::Cancel(std::uint32_t entry) { return impl_->Cancel(entry); }
std::vector<std::uint32_t> DecoderModel::DefaultBuckets() const { return impl_->DefaultBuckets(); }
absl::Status DecoderModel::EnqueueStep(const StepContext& ctx, cudaStream_t stream) {
  return impl_->EnqueueStep(ctx, stream);
}
absl::StatusOr<std::vector<std::int32_t>> DecoderModel::ReadGenerated(std::uint32_t entry,
                                                                      std::uint32_t count) const {
  return impl_->ReadGenerated(entry, count);
}
absl::StatusOr<std::uint32_t> DecoderModel::ReadStream(std::uint32_t entry, std::uint32_t from,
                                                       std::vector<std::int32_t>& out) const {
  return impl_->ReadStream(entry, from, out);
}
absl::Status DecoderModel::ReadLogprobs(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                                        std::vector<TokenLogprobs>& out) const {
  return impl_->ReadLogprobs(entry, from, to, out);
}
absl::StatusOr<std::vector<float>> DecoderModel::ReadLogits(std::uint32_t position) const {
  return impl_->ReadLogits(position);
}
absl::StatusOr<std::vector<std::uint64_t>> DecoderModel::ReadStepEnds(std::uint64_t first,
                                                                      std::uint32_t count) const {
  return impl_->ReadStepEnds(first, count);
}
const DecoderModelOptions& DecoderModel::options() const { return impl_->options(); }
const DecoderConfig& DecoderModel::config() const { return impl_->config(); }
const DecoderModelInfo& DecoderModel::info() const { return impl_->info(); }
std::size_t DecoderModel::weight_bytes() const { return impl_->weight_bytes(); }

}  // namespace baton
