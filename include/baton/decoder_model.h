// baton::DecoderModel: the small decoder-only transformer as a Baton step
// program, with its weights, KV cache and request table in device memory.
//
//   auto model = DecoderModel::Create(options);           // weights from a seed
//   model->WriteRequests(0, requests);                    // prompts and limits -> entries 0..n-1
//   runtime->RegisterStepProgram(model->MakeStepProgram({1, 2, 4, 8}));
//   runtime->Submit({DecoderModel::WorkItemFor(0), ...}); // the device admits them
//   ... Poll: Completion{item, value = tokens generated} ...
//   model->ReadGenerated(entry)                           // the tokens
//
// One step feeds every active sequence one token: a prompt token while the
// sequence is still reading its prompt (simple prefill, one token per step),
// then the token it generated last. A sequence finishes when it emits its
// stop token or reaches max_new_tokens; the scheduler then retires it and
// admits the next request into its slot in the same step (continuous
// batching on the device). Tokens depend only on the weights, the prompt and
// (when sampling) (seed, sequence_id, token index): not on batch position,
// bucket or engine when the GEMMs are batch-invariant (DecoderGemm::kBatonGemv;
// with cuBLASLt, different bucket sizes may pick different algorithms, and
// the default kAuto switches GEMM above auto_gemv_max_bucket).
//
// The step program also carries the model's device step
// (DeviceStepKind::kDecoder) for Engine::kDynamicParallelism: the same kernel
// bodies launched from the device, grids sized for the actual batch, so that
// engine serves batches above every bucket. Its projections are always
// Baton's GEMV: with kBatonGemv its tokens are bit-identical to the graph
// engines' and the host loop's; with kCublasLt (or kAuto and buckets above
// auto_gemv_max_bucket) they match a kBatonGemv model's (same weights).
//
// Thread safety: one host thread at a time; the model serves one runtime (or
// host loop) at a time, since every step writes its activations and KV cache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/decoder_config.h"
#include "baton/step_program.h"
#include "baton/work_item.h"

namespace baton {

// How the projections (QKV, attention output, FFN, logits) are computed.
enum class DecoderGemm : std::uint32_t {
  kCublasLt = 0,   // cuBLASLt plans per bucket size, explicit workspace (fastest for large
                   // buckets; graph engines only: the dynamic-parallelism step runs the GEMV)
  kBatonGemv = 1,  // Baton's own GEMV: every row computed alike at any batch size, so
                   // tokens are bit-identical across buckets, engines and host loops;
                   // RMSNorms and residual adds fused in (five kernels per layer)
  kAuto = 2,       // (default) kBatonGemv for buckets up to
                   // DecoderModelOptions::auto_gemv_max_bucket, where the step is latency-bound
                   // and the fused GEMV path runs fewer, shorter kernels (one tile of 8
                   // positions reads the weights once); kCublasLt above, where the GEMV would
                   // re-read the weights per tile. A sequence's tokens then depend on the
                   // buckets it ran in, as with kCublasLt.
};

struct DecodeRequest {
  std::vector<std::int32_t> prompt;  // >= 1 token, each in [0, vocab)
  std::uint32_t max_new_tokens = 16;
  std::int32_t stop_token = -1;   // -1: none, else in [0, vocab)
  std::uint64_t sequence_id = 0;  // sampling key (ignored when greedy)
};

struct DecoderModelOptions {
  DecoderConfig config;
  std::uint64_t weight_seed = 1;
  // The runtime's RuntimeOptions::max_batch: equal to it on the graph engines,
  // at least it on the dynamic-parallelism engine.
  std::uint32_t max_batch = 32;
  std::uint32_t max_requests = 1024;  // request-table entries
  DecoderGemm gemm = DecoderGemm::kAuto;
  std::uint32_t auto_gemv_max_bucket = 8;   // DecoderGemm::kAuto: largest bucket on the GEMV
  SamplingParams sampling{0.0f, 0};         // temperature <= 0: greedy
  std::uint32_t step_clock_size = 1 << 16;  // power of two: step end stamps kept
};

class DecoderModel {
 public:
  // InvalidArgument for options out of range (names the option and the fix).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DecoderModel>> Create(
      const DecoderModelOptions& options);
  ~DecoderModel();
  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  // InvalidArgument naming the field and the fix, for a request this model
  // cannot run (empty prompt, token outside the vocabulary, limits past
  // max_context).
  [[nodiscard]] absl::Status ValidateRequest(const DecodeRequest& request) const;

  // Writes requests into entries [first_entry, first_entry + size) and waits
  // for the copy. Nothing is written unless every request validates. An entry
  // must not be rewritten while its item is queued or active (it may be once
  // its completion was polled).
  [[nodiscard]] absl::Status WriteRequests(std::uint32_t first_entry,
                                           absl::Span<const DecodeRequest> requests);

  // The work item that runs entry `entry`.
  [[nodiscard]] static WorkItem WorkItemFor(std::uint32_t entry) {
    return WorkItem::make(kDecodeRequestKind, entry, 0);
  }

  // The step program to register with a Runtime: one graph per bucket on the
  // graph engines, and the device step (above) on the dynamic-parallelism
  // engine, where `buckets` only guide the scheduler and may all lie below
  // max_batch. The program refers to this model: keep the model alive while
  // a runtime uses it.
  [[nodiscard]] StepProgram MakeStepProgram(std::vector<std::uint32_t> buckets);

  // Enqueues one step for ctx (what MakeStepProgram's enqueue does): usable
  // by a host-driven loop over the same kernels.
  [[nodiscard]] absl::Status EnqueueStep(const StepContext& ctx, cudaStream_t stream);

  // The first `count` generated tokens of an entry (count = its completion's
  // value), synchronously.
  [[nodiscard]] absl::StatusOr<std::vector<std::int32_t>> ReadGenerated(std::uint32_t entry,
                                                                        std::uint32_t count) const;

  // The logits row the last step computed at batch position `position`.
  [[nodiscard]] absl::StatusOr<std::vector<float>> ReadLogits(std::uint32_t position) const;

  // Global-timer stamps (ns) of steps [first, first + count), taken as each
  // step's last node (token selection, which also ends the step) starts;
  // count <= step_clock_size and the steps must be the last ones run.
  [[nodiscard]] absl::StatusOr<std::vector<std::uint64_t>> ReadStepEnds(std::uint64_t first,
                                                                        std::uint32_t count) const;

  [[nodiscard]] const DecoderModelOptions& options() const;
  // Bytes of weights one step streams (the HBM floor's numerator).
  [[nodiscard]] std::size_t weight_bytes() const;

  class Impl;

 private:
  explicit DecoderModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Pure checks (CPU-testable).
[[nodiscard]] absl::Status ValidateDecoderModelOptions(const DecoderModelOptions& options);
[[nodiscard]] absl::Status ValidateDecodeRequest(const DecoderConfig& config,
                                                 const DecodeRequest& request);

}  // namespace baton
