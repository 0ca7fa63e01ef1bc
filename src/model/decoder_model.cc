#include "baton/decoder_model.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/cublaslt_matmul.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "decoder_device_step.h"
#include "decoder_step.h"
#include "kernels/decode_kernels.h"
#include "kernels/decoder_config_check.h"
#include "kernels/decoder_weights.h"
#include "kernels/half_bits.h"

namespace baton {
namespace {

MatmulDataType MatmulTypeOf(DecoderDType dtype) {
  return dtype == DecoderDType::kBFloat16 ? MatmulDataType::kBFloat16 : MatmulDataType::kFloat16;
}

// Every tensor in one allocation, 256-byte aligned (cuBLASLt and the GEMV
// read 16-byte vectors).
class Arena {
 public:
  std::size_t Reserve(std::size_t bytes) {
    const std::size_t offset = size_;
    size_ = (size_ + bytes + 255) / 256 * 256;
    return offset;
  }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  std::size_t size_ = 0;
};

// The five projections of one bucket size.
struct BucketPlans {
  std::vector<CublasLtLinear> linears;  // qkv, o, gate_up, down, lm_head
};

}  // namespace

class DecoderModel::Impl {
 public:
  absl::Status Init(const DecoderModelOptions& options) {
    options_ = options;
    const DecoderConfig& c = options.config;
    BATON_ASSIGN_OR_RETURN(DecoderHostWeights weights,
                           GenerateDecoderWeights(c, options.weight_seed));
    weight_bytes_ = weights.bytes() - weights.embedding.size() * sizeof(std::uint16_t);
    BATON_ASSIGN_OR_RETURN(stream_, CreateStream());

    // Weights: one arena, uploaded once.
    Arena arena;
    std::vector<std::pair<std::size_t, const std::vector<std::uint16_t>*>> tensors;
    auto place = [&](const std::vector<std::uint16_t>& tensor) {
      const std::size_t offset = arena.Reserve(tensor.size() * sizeof(std::uint16_t));
      tensors.emplace_back(offset, &tensor);
      return offset;
    };
    const std::size_t embedding = place(weights.embedding);
    struct LayerOffsets {
      std::size_t attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down;
    };
    std::vector<LayerOffsets> layer_offsets;
    for (const DecoderLayerWeights& layer : weights.layers) {
      layer_offsets.push_back({place(layer.attn_norm), place(layer.wqkv), place(layer.wo),
                               place(layer.ffn_norm), place(layer.w_gate_up), place(layer.w_down)});
    }
    const std::size_t final_norm = place(weights.final_norm);
    const std::size_t lm_head = place(weights.lm_head);
    BATON_ASSIGN_OR_RETURN(weights_, DeviceBuffer<unsigned char>::Create(arena.size()));
    for (const auto& [offset, tensor] : tensors) {
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(weights_.data() + offset, tensor->data(),
                                                 tensor->size() * sizeof(std::uint16_t),
                                                 cudaMemcpyHostToDevice, stream_.get()));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    auto at = [&](std::size_t offset) -> const void* { return weights_.data() + offset; };
    embedding_ = at(embedding);
    final_norm_ = at(final_norm);
    lm_head_ = at(lm_head);

    // KV cache: [max_batch slots, heads, max_context, head_dim] per layer, keys and values.
    const std::size_t kv_elements =
        static_cast<std::size_t>(options.max_batch) * c.heads * c.max_context * c.head_dim;
    BATON_ASSIGN_OR_RETURN(kv_, DeviceBuffer<std::uint16_t>::Create(2 * kv_elements * c.layers));
    BATON_RETURN_IF_ERROR(kv_.Fill(0, stream_.get()));
    for (int l = 0; l < c.layers; ++l) {
      const LayerOffsets& o = layer_offsets[l];
      detail::DecoderLayerView layer;
      layer.attn_norm = at(o.attn_norm);
      layer.wqkv = at(o.wqkv);
      layer.wo = at(o.wo);
      layer.ffn_norm = at(o.ffn_norm);
      layer.w_gate_up = at(o.w_gate_up);
      layer.w_down = at(o.w_down);
      layer.cache.keys = kv_.data() + (2 * l) * kv_elements;
      layer.cache.values = kv_.data() + (2 * l + 1) * kv_elements;
      layers_.push_back(layer);
    }

    // Activations, zeroed so rows past the live batch (which the cuBLASLt
    // plans of a bucket read and write) are always finite and initialized.
    const std::size_t b = options.max_batch;
    BATON_ASSIGN_OR_RETURN(hidden_, DeviceBuffer<float>::Create(b * c.d_model));
    BATON_ASSIGN_OR_RETURN(normed_, DeviceBuffer<std::uint16_t>::Create(b * c.d_model));
    BATON_ASSIGN_OR_RETURN(qkv_, DeviceBuffer<std::uint16_t>::Create(b * c.qkv_width()));
    BATON_ASSIGN_OR_RETURN(attention_,
                           DeviceBuffer<std::uint16_t>::Create(b * c.attention_width()));
    BATON_ASSIGN_OR_RETURN(projected_, DeviceBuffer<std::uint16_t>::Create(b * c.d_model));
    BATON_ASSIGN_OR_RETURN(gate_up_, DeviceBuffer<std::uint16_t>::Create(b * c.gate_up_width()));
    BATON_ASSIGN_OR_RETURN(ffn_act_, DeviceBuffer<std::uint16_t>::Create(b * c.ffn));
    BATON_ASSIGN_OR_RETURN(logits_, DeviceBuffer<std::uint16_t>::Create(b * c.vocab));
    BATON_ASSIGN_OR_RETURN(in_tokens_, DeviceBuffer<std::int32_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(out_tokens_, DeviceBuffer<std::int32_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(sequence_ids_, DeviceBuffer<std::uint64_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(sequence_steps_, DeviceBuffer<std::uint32_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(request_of_, DeviceBuffer<std::uint32_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(positions_, DeviceBuffer<std::int32_t>::Create(b));
    BATON_ASSIGN_OR_RETURN(step_end_ns_,
                           DeviceBuffer<unsigned long long>::Create(options.step_clock_size));
    BATON_ASSIGN_OR_RETURN(requests_,
                           DeviceBuffer<DecodeRequestInfo>::Create(options.max_requests));
    BATON_ASSIGN_OR_RETURN(sequences_, DeviceBuffer<std::int32_t>::Create(
                                           std::size_t{options.max_requests} * c.max_context));
    for (absl::Status s :
         {hidden_.Fill(0, stream_.get()), normed_.Fill(0, stream_.get()),
          qkv_.Fill(0, stream_.get()), attention_.Fill(0, stream_.get()),
          projected_.Fill(0, stream_.get()), gate_up_.Fill(0, stream_.get()),
          ffn_act_.Fill(0, stream_.get()), logits_.Fill(0, stream_.get()),
          in_tokens_.Fill(0, stream_.get()), out_tokens_.Fill(0, stream_.get()),
          sequence_ids_.Fill(0, stream_.get()), sequence_steps_.Fill(0, stream_.get()),
          request_of_.Fill(0, stream_.get()), positions_.Fill(0, stream_.get()),
          step_end_ns_.Fill(0, stream_.get()), requests_.Fill(0, stream_.get()),
          sequences_.Fill(0, stream_.get())}) {
      BATON_RETURN_IF_ERROR(s);
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));

    view_.config = c;
    view_.max_batch = options.max_batch;
    view_.max_requests = options.max_requests;
    view_.requests = requests_.data();
    view_.sequences = sequences_.data();
    view_.in_tokens = in_tokens_.data();
    view_.out_tokens = out_tokens_.data();
    view_.sequence_ids = sequence_ids_.data();
    view_.sequence_steps = sequence_steps_.data();
    view_.request_of = request_of_.data();
    view_.positions = positions_.data();
    view_.step_end_ns = step_end_ns_.data();
    view_.step_clock_size = options.step_clock_size;

    if (options.gemm != DecoderGemm::kBatonGemv) {
      BATON_ASSIGN_OR_RETURN(cublas_, CublasLtContext::Create());
    }
    return InitDeviceStep();
  }

  // The device step program (its DeviceStepProgram): the same buffers the
  // graph path uses, GEMV projections whatever options.gemm says.
  absl::Status InitDeviceStep() {
    detail::DecoderDeviceStep step;
    step.view = view_;
    step.embedding = embedding_;
    step.final_norm = final_norm_;
    step.lm_head = lm_head_;
    BATON_ASSIGN_OR_RETURN(layers_device_,
                           DeviceBuffer<detail::DecoderLayerView>::Create(layers_.size()));
    BATON_RETURN_IF_ERROR(layers_device_.CopyFrom(layers_));
    step.layers = layers_device_.data();
    step.hidden = hidden_.data();
    step.normed = normed_.data();
    step.qkv = qkv_.data();
    step.attention = attention_.data();
    step.gate_up = gate_up_.data();
    step.logits = logits_.data();
    step.sampling = options_.sampling;
    BATON_ASSIGN_OR_RETURN(device_step_, DeviceBuffer<detail::DecoderDeviceStep>::Create(1));
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(device_step_.data(), &step, sizeof(step), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  DeviceStepProgram device_step() const {
    DeviceStepProgram program;
    program.launch = detail::LaunchDecoderDynamicParallelism;
    program.params = device_step_.data();
    program.max_batch = options_.max_batch;
    program.max_batch_option = "DecoderModelOptions::max_batch";
    return program;
  }

  absl::Status WriteRequests(std::uint32_t first, absl::Span<const DecodeRequest> requests) {
    if (first > options_.max_requests || requests.size() > options_.max_requests - first) {
      return absl::OutOfRangeError(absl::StrFormat(
          "DecoderModel::WriteRequests: entries [%u, %u) exceed the request table's %u entries; "
          "reuse entries whose completions were polled or raise max_requests",
          first, std::uint64_t{first} + requests.size(), options_.max_requests));
    }
    for (std::size_t i = 0; i < requests.size(); ++i) {
      absl::Status valid = ValidateDecodeRequest(options_.config, requests[i]);
      if (!valid.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("request ", i, " (entry ", first + i, "): ", valid.message()));
      }
    }
    if (requests.empty()) return absl::OkStatus();
    const std::size_t row = options_.config.max_context;
    std::vector<DecodeRequestInfo> infos(requests.size());
    std::vector<std::int32_t> rows(requests.size() * row, 0);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const DecodeRequest& r = requests[i];
      infos[i].prompt_tokens = static_cast<std::uint32_t>(r.prompt.size());
      infos[i].max_new_tokens = r.max_new_tokens;
      infos[i].stop_token = r.stop_token;
      infos[i].sequence_id = r.sequence_id;
      std::copy(r.prompt.begin(), r.prompt.end(), rows.begin() + i * row);
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(requests_.data() + first, infos.data(),
                                               infos.size() * sizeof(DecodeRequestInfo),
                                               cudaMemcpyHostToDevice, stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sequences_.data() + first * row, rows.data(),
                                               rows.size() * sizeof(std::int32_t),
                                               cudaMemcpyHostToDevice, stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  }

  absl::Status EnqueueStep(const StepContext& ctx, cudaStream_t stream) {
    const std::uint32_t capacity = ctx.bucket_size;
    if (capacity == 0 || capacity > options_.max_batch) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DecoderModel: bucket size %u is outside [1, max_batch = %u]; register buckets no "
          "larger than the model's max_batch",
          capacity, options_.max_batch));
    }
    if (ctx.args.max_batch != options_.max_batch) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DecoderModel: the runtime's max_batch is %u but the model was created with %u; "
          "create both with the same max_batch",
          ctx.args.max_batch, options_.max_batch));
    }
    DecodeBatch batch{&ctx.args.header->batch, capacity, ctx.args.slots, positions_.data(),
                      options_.max_batch};
    BucketPlans* plans = nullptr;
    if (!UsesGemv(capacity)) {
      BATON_ASSIGN_OR_RETURN(plans, PlansFor(capacity));
    }
    BATON_CUDA_RETURN_IF_ERROR(detail::EnqueueStepBegin(view_, ctx.args, capacity, stream));
    if (plans == nullptr) {
      BATON_RETURN_IF_ERROR(EnqueueGemvLayers(batch, stream));
    } else {
      BATON_RETURN_IF_ERROR(EnqueueCublasLtLayers(*plans, batch, stream));
    }
    batch.settled = true;  // step_begin is many nodes back (see EnqueueGemvLayers)
    BATON_CUDA_RETURN_IF_ERROR(detail::EnqueueSelectAndEndStep(view_, ctx.args, logits_.data(),
                                                               batch, options_.sampling, stream));
    return absl::OkStatus();
  }

  // Whether a bucket's projections run Baton's GEMV (else cuBLASLt).
  bool UsesGemv(std::uint32_t capacity) const {
    switch (options_.gemm) {
      case DecoderGemm::kBatonGemv:
        return true;
      case DecoderGemm::kAuto:
        return capacity <= options_.auto_gemv_max_bucket;
      case DecoderGemm::kCublasLt:
        break;
    }
    return false;
  }

  // Embedding through the final projection on Baton's GEMV, five kernels per
  // layer: every RMSNorm is fused into the GEMV that reads it where
  // GemvFusesRmsNorm allows (the first one with the embedding), and every
  // residual add into the GEMV that produces its delta. The device step
  // (src/dynamic_parallelism/dp_decoder_step.cu) launches the same sequence.
  //
  // The QKV projections of layers >= 1 let attention launch before their
  // wait (DecodeBatch::launch_next_early): attention's loads before its own
  // wait (the batch, from the scheduler and step_begin, and the KV-cache
  // history, from earlier steps) are final by then, and its prologue no
  // longer delays it (H200, tiny model b1: 35.7 -> 34.6 us per step). Not
  // the first layer's (step_begin, just before, writes the positions that
  // attention reads early). Early launches after the O, down and logits
  // projections measured no gain, and one after the down projection cost
  // 1 us (it launches the next QKV projection and attention even earlier).
  absl::Status EnqueueGemvLayers(DecodeBatch batch, cudaStream_t stream) {
    const DecoderConfig& c = options_.config;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const detail::DecoderLayerView& layer = layers_[l];
      if (l == 0) {
        // Right after step_begin, which writes the input tokens: not settled.
        if (GemvFusesRmsNorm(c.qkv_width(), c.d_model)) {
          BATON_CUDA_RETURN_IF_ERROR(EnqueueEmbeddingRmsNormGemv(
              c, embedding_, in_tokens_.data(), layer.wqkv, c.qkv_width(), layer.attn_norm, batch,
              hidden_.data(), qkv_.data(), stream));
        } else {
          BATON_CUDA_RETURN_IF_ERROR(EnqueueEmbeddingRmsNorm(c, embedding_, in_tokens_.data(),
                                                             layer.attn_norm, batch, hidden_.data(),
                                                             normed_.data(), stream));
          BATON_CUDA_RETURN_IF_ERROR(EnqueueGemv(c.dtype, layer.wqkv, c.qkv_width(), c.d_model,
                                                 normed_.data(), batch, qkv_.data(), stream));
        }
        // From here on step_begin (which writes positions) is two or more
        // nodes back and the scheduler (header, slots) further, and the
        // residual GEMVs are never adjacent: the batch is settled.
        batch.settled = true;
      } else {
        BATON_RETURN_IF_ERROR(NormedGemv(layer.wqkv, c.qkv_width(), layer.attn_norm, batch,
                                         qkv_.data(), stream, /*next_early=*/true));
      }
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueRopeAttention(c, qkv_.data(), layer.cache, batch, attention_.data(), stream));
      BATON_CUDA_RETURN_IF_ERROR(EnqueueGemvResidualAdd(
          c, layer.wo, c.attention_width(), attention_.data(), batch, hidden_.data(), stream));
      BATON_RETURN_IF_ERROR(NormedGemv(layer.w_gate_up, c.gate_up_width(), layer.ffn_norm, batch,
                                       gate_up_.data(), stream, /*next_early=*/false));
      BATON_CUDA_RETURN_IF_ERROR(EnqueueGatedGemvResidualAdd(
          c, layer.w_down, c.ffn, gate_up_.data(), batch, hidden_.data(), stream));
    }
    return NormedGemv(lm_head_, c.vocab, final_norm_, batch, logits_.data(), stream,
                      /*next_early=*/false);
  }

  // y = W · RMSNorm(hidden) * norm: fused where GemvFusesRmsNorm says so,
  // else the norm's row kernel, then the GEMV. `next_early` applies to the
  // node after y's GEMV.
  absl::Status NormedGemv(const void* w, int out_features, const void* norm, DecodeBatch batch,
                          void* y, cudaStream_t stream, bool next_early) {
    const DecoderConfig& c = options_.config;
    DecodeBatch last = batch;
    last.launch_next_early = next_early;
    if (GemvFusesRmsNorm(out_features, c.d_model)) {
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueRmsNormGemv(c, w, out_features, hidden_.data(), norm, last, y, stream));
    } else {
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueRmsNorm(c, hidden_.data(), norm, batch, normed_.data(), stream));
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueGemv(c.dtype, w, out_features, c.d_model, normed_.data(), last, y, stream));
    }
    return absl::OkStatus();
  }

  // Embedding through the final projection on cuBLASLt plans (no prologue
  // or residual epilogue there): every residual add is fused with the norm
  // that follows it (the next layer's attention norm, or the final norm), the
  // embedding with the first norm, RoPE with attention.
  absl::Status EnqueueCublasLtLayers(BucketPlans& plans, DecodeBatch batch, cudaStream_t stream) {
    const DecoderConfig& c = options_.config;
    // y[capacity, out] = x · wᵀ.
    auto linear = [&](int which, const void* x, const void* w, void* y) {
      return plans.linears[which].Enqueue(stream, x, w, nullptr, y);
    };
    BATON_CUDA_RETURN_IF_ERROR(EnqueueEmbeddingRmsNorm(c, embedding_, in_tokens_.data(),
                                                       layers_.front().attn_norm, batch,
                                                       hidden_.data(), normed_.data(), stream));
    batch.settled = true;  // as in EnqueueGemvLayers
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const detail::DecoderLayerView& layer = layers_[l];
      BATON_RETURN_IF_ERROR(linear(0, normed_.data(), layer.wqkv, qkv_.data()));
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueRopeAttention(c, qkv_.data(), layer.cache, batch, attention_.data(), stream));
      BATON_RETURN_IF_ERROR(linear(1, attention_.data(), layer.wo, projected_.data()));
      BATON_CUDA_RETURN_IF_ERROR(EnqueueResidualAddRmsNorm(
          c, hidden_.data(), projected_.data(), layer.ffn_norm, batch, normed_.data(), stream));
      BATON_RETURN_IF_ERROR(linear(2, normed_.data(), layer.w_gate_up, gate_up_.data()));
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueSiluMul(c, gate_up_.data(), batch, ffn_act_.data(), stream));
      BATON_RETURN_IF_ERROR(linear(3, ffn_act_.data(), layer.w_down, projected_.data()));
      const void* next_norm = l + 1 < layers_.size() ? layers_[l + 1].attn_norm : final_norm_;
      BATON_CUDA_RETURN_IF_ERROR(EnqueueResidualAddRmsNorm(
          c, hidden_.data(), projected_.data(), next_norm, batch, normed_.data(), stream));
    }
    return linear(4, normed_.data(), lm_head_, logits_.data());
  }

  absl::StatusOr<std::vector<std::int32_t>> ReadGenerated(std::uint32_t entry,
                                                          std::uint32_t count) const {
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
    const std::size_t offset =
        std::size_t{entry} * options_.config.max_context + info.prompt_tokens;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens.data(), sequences_.data() + offset,
                                               count * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                               stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return tokens;
  }

  absl::StatusOr<std::vector<float>> ReadLogits(std::uint32_t position) const;

  absl::StatusOr<std::vector<std::uint64_t>> ReadStepEnds(std::uint64_t first,
                                                          std::uint32_t count) const {
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

  const DecoderModelOptions& options() const { return options_; }
  std::size_t weight_bytes() const { return weight_bytes_; }

 private:
  absl::StatusOr<BucketPlans*> PlansFor(std::uint32_t tokens) {
    auto it = plans_.find(tokens);
    if (it != plans_.end()) return &it->second;
    const DecoderConfig& c = options_.config;
    const int shapes[5][2] = {{c.d_model, c.qkv_width()},
                              {c.attention_width(), c.d_model},
                              {c.d_model, c.gate_up_width()},
                              {c.ffn, c.d_model},
                              {c.d_model, c.vocab}};
    BucketPlans plans;
    for (const auto& shape : shapes) {
      LinearOptions linear;
      linear.tokens = static_cast<int>(tokens);
      linear.in_features = shape[0];
      linear.out_features = shape[1];
      linear.data_type = MatmulTypeOf(c.dtype);
      BATON_ASSIGN_OR_RETURN(CublasLtLinear plan, CublasLtLinear::Create(cublas_, linear));
      plans.linears.push_back(std::move(plan));
    }
    return &plans_.emplace(tokens, std::move(plans)).first->second;
  }

  DecoderModelOptions options_;
  std::size_t weight_bytes_ = 0;
  Stream stream_;  // uploads and reads; never the step's stream
  DeviceBuffer<unsigned char> weights_;
  const void* embedding_ = nullptr;
  const void* final_norm_ = nullptr;
  const void* lm_head_ = nullptr;
  std::vector<detail::DecoderLayerView> layers_;
  DeviceBuffer<std::uint16_t> kv_;
  DeviceBuffer<float> hidden_;
  DeviceBuffer<std::uint16_t> normed_, qkv_, attention_, projected_, gate_up_, ffn_act_, logits_;
  DeviceBuffer<std::int32_t> in_tokens_, out_tokens_, positions_;
  DeviceBuffer<std::uint64_t> sequence_ids_;
  DeviceBuffer<std::uint32_t> sequence_steps_, request_of_;
  DeviceBuffer<unsigned long long> step_end_ns_;
  DeviceBuffer<DecodeRequestInfo> requests_;
  DeviceBuffer<std::int32_t> sequences_;
  detail::DecoderStepView view_;
  DeviceBuffer<detail::DecoderLayerView> layers_device_;
  DeviceBuffer<detail::DecoderDeviceStep> device_step_;
  std::shared_ptr<CublasLtContext> cublas_;
  std::map<std::uint32_t, BucketPlans> plans_;
};

absl::StatusOr<std::vector<float>> DecoderModel::Impl::ReadLogits(std::uint32_t position) const {
  if (position >= options_.max_batch) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::ReadLogits: position %u is past max_batch %u", position,
                        options_.max_batch));
  }
  const int vocab = options_.config.vocab;
  std::vector<std::uint16_t> bits(vocab);
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(bits.data(), logits_.data() + std::size_t{position} * vocab,
                      vocab * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  std::vector<float> out(vocab);
  for (int i = 0; i < vocab; ++i) out[i] = HalfBitsToFloat(bits[i], options_.config.dtype);
  return out;
}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const DecoderModelOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateDecoderModelOptions(options));
  auto impl = std::make_unique<Impl>();
  BATON_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<DecoderModel>(new DecoderModel(std::move(impl)));
}

DecoderModel::DecoderModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecoderModel::~DecoderModel() = default;

absl::Status DecoderModel::ValidateRequest(const DecodeRequest& request) const {
  return ValidateDecodeRequest(impl_->options().config, request);
}
absl::Status DecoderModel::WriteRequests(std::uint32_t first_entry,
                                         absl::Span<const DecodeRequest> requests) {
  return impl_->WriteRequests(first_entry, requests);
}
StepProgram DecoderModel::MakeStepProgram(std::vector<std::uint32_t> buckets) {
  StepProgram program;
  program.name = "decoder";
  program.buckets = std::move(buckets);
  Impl* impl = impl_.get();
  program.enqueue = [impl](const StepContext& ctx, cudaStream_t stream) {
    return impl->EnqueueStep(ctx, stream);
  };
  program.device_step = impl->device_step();
  return program;
}
absl::Status DecoderModel::EnqueueStep(const StepContext& ctx, cudaStream_t stream) {
  return impl_->EnqueueStep(ctx, stream);
}
absl::StatusOr<std::vector<std::int32_t>> DecoderModel::ReadGenerated(std::uint32_t entry,
                                                                      std::uint32_t count) const {
  return impl_->ReadGenerated(entry, count);
}
absl::StatusOr<std::vector<float>> DecoderModel::ReadLogits(std::uint32_t position) const {
  return impl_->ReadLogits(position);
}
absl::StatusOr<std::vector<std::uint64_t>> DecoderModel::ReadStepEnds(std::uint64_t first,
                                                                      std::uint32_t count) const {
  return impl_->ReadStepEnds(first, count);
}
const DecoderModelOptions& DecoderModel::options() const { return impl_->options(); }
std::size_t DecoderModel::weight_bytes() const { return impl_->weight_bytes(); }

}  // namespace baton
