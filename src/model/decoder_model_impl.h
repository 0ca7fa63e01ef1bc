// DecoderModel's state (private to the model): its weights, KV cache,
// activations by row, per-position and per-row step state, request table,
// token stream and step plans. decoder_model.cc builds it and runs steps;
// decoder_model_io.cc writes requests and reads results.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/cublaslt_matmul.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"
#include "decoder_device_step.h"
#include "frame/step_view.h"
#include "model_weights.h"
#include "ops/op.h"
#include "plan/step_plan.h"
#include "plan/tensor_parallel.h"
#include "token_stream.h"

namespace baton {

class DecoderModel::Impl {
 public:
  absl::Status Init(const DecoderModelOptions& options);

  absl::Status WriteRequests(std::uint32_t first, absl::Span<const DecodeRequest> requests);
  absl::Status ValidateRequest(const DecodeRequest& request) const;
  WorkItem WorkItemFor(std::uint32_t entry) const;
  absl::Status EnqueueStep(const StepContext& ctx, cudaStream_t stream);
  DeviceStepProgram device_step() const;
  std::vector<std::uint32_t> DefaultBuckets() const;
  std::uint32_t max_rows() const { return max_rows_; }
  PagePolicy page_policy() const {
    return PagePolicy{options_.kv_page_tokens, info_.kv_pool_pages, pages_per_slot_,
                      page_table_.data()};
  }

  absl::StatusOr<std::vector<std::int32_t>> ReadGenerated(std::uint32_t entry,
                                                          std::uint32_t count) const;
  absl::StatusOr<std::vector<float>> ReadLogits(std::uint32_t position) const;
  absl::StatusOr<std::vector<std::uint64_t>> ReadStepEnds(std::uint64_t first,
                                                          std::uint32_t count) const;
  absl::Status Cancel(std::uint32_t entry);
  absl::StatusOr<std::uint32_t> ReadStream(std::uint32_t entry, std::uint32_t from,
                                           std::vector<std::int32_t>& out) const;
  absl::Status ReadLogprobs(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                            std::vector<TokenLogprobs>& out) const;

  const DecoderModelOptions& options() const { return options_; }
  const DecoderConfig& config() const { return config_; }
  const DecoderModelInfo& info() const { return info_; }
  std::size_t weight_bytes() const { return weights_.step_bytes(); }
  int device() const { return device_; }

 private:
  // The cuBLASLt projections of one bucket, by ops::Projection (the LM
  // head's for the bucket's sequences, the others for its rows).
  struct BucketPlans {
    std::vector<CublasLtLinear> linears;
  };
  using PlanKey = std::pair<detail::PlanPath, detail::AttentionPlan>;

  absl::Status SizeKvPool(bool checkpoint, bool fit_context);
  absl::Status AllocateState();
  absl::Status InitDeviceStep();
  bool UsesGemv(std::uint32_t rows) const;
  bool UsesWideGemv(std::uint32_t rows) const;
  const std::vector<ops::OpNode>& Plan(detail::PlanPath path, detail::AttentionPlan attention);
  absl::StatusOr<BucketPlans*> PlansFor(std::uint32_t rows);

  absl::Status InitTensorParallel();
  absl::Status CheckDevice(const char* call) const;

  DecoderModelOptions options_;
  DecoderConfig config_;       // the whole model's (what callers and token selection see)
  DecoderConfig rank_config_;  // what this GPU's layers run: config_, or a rank's share
  detail::TensorParallel tp_;  // {1, 0}: one GPU
  int device_ = 0;
  DecoderModelInfo info_;
  std::uint32_t max_rows_ = 0;  // rows one step holds
  Stream stream_;               // uploads and reads; never the step's stream
  detail::ModelWeights weights_;
  DeviceBuffer<std::uint16_t> kv_;          // the KV pool, every layer
  DeviceBuffer<std::uint32_t> page_table_;  // written by the scheduler (page_policy.h)
  std::uint32_t pages_per_slot_ = 0;        // pages of one max_context sequence
  std::vector<KvCacheLayer> caches_;
  DeviceBuffer<float> hidden_;
  DeviceBuffer<float> attention_partials_;  // kernels/attention/attention_split.h
  DeviceBuffer<std::uint32_t> attention_arrivals_;
  DeviceBuffer<std::uint16_t> normed_, qkv_, attention_, projected_, gate_up_, ffn_act_, logits_;
  // By row.
  DeviceBuffer<std::int32_t> in_tokens_, row_positions_;
  DeviceBuffer<std::uint32_t> row_slots_, row_fresh_;
  // By position.
  DeviceBuffer<std::int32_t> out_tokens_, chunk_start_;
  DeviceBuffer<std::uint64_t> sequence_ids_;
  DeviceBuffer<std::uint32_t> sequence_steps_, request_of_, logit_rows_;
  DeviceBuffer<PositionSampling> sampling_;
  DeviceBuffer<std::uint32_t> token_counts_;  // [max_batch, padded_vocab] (step_view.h)
  DeviceBuffer<unsigned long long> step_end_ns_;
  DeviceBuffer<DecodeRequestInfo> requests_;
  DeviceBuffer<std::int32_t> sequences_;
  std::vector<std::uint32_t> prompt_lengths_;  // host mirror of the table, for WorkItemFor
  std::vector<std::uint32_t> token_bounds_;    // prompt + max_new_tokens, likewise
  detail::TokenStream stream_words_;
  detail::LogprobRing logprob_ring_;        // beside the stream (max_logprobs > 0)
  DeviceBuffer<std::uint16_t> raw_logits_;  // [max_batch, padded_vocab] (max_logprobs > 0)
  std::vector<std::int32_t> logprob_counts_;  // by entry: DecodeRequest::logprobs as written
  DeviceBuffer<std::uint32_t> cancel_;  // [max_requests] (DecoderModel::Cancel)
  DeviceBuffer<std::uint16_t> logits_part_;  // a rank's vocabulary rows of the logits
  std::optional<detail::TensorParallelStep> tp_step_;
  detail::StepBuffers buffers_;
  detail::DecoderStepView view_;
  std::map<PlanKey, std::vector<ops::OpNode>> plans_by_path_;
  DeviceBuffer<ops::OpNode> device_ops_;
  DeviceBuffer<detail::DecoderDeviceStep> device_step_;
  std::shared_ptr<CublasLtContext> cublas_;
  std::map<std::uint32_t, BucketPlans> plans_;
};

}  // namespace baton
