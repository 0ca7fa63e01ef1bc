#include "baton/decoder_model.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/cublaslt_matmul.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint_config.h"
#include "decoder_device_step.h"
#include "decoder_step.h"
#include "kernels/half_bits.h"
#include "model_weights.h"
#include "step_launch.h"
#include "step_plan.h"

namespace baton {
namespace {

static_assert(kEntryStopTokens == kMaxStopTokens, "the request table holds every stop token");

MatmulDataType MatmulTypeOf(DecoderDType dtype) {
  return dtype == DecoderDType::kBFloat16 ? MatmulDataType::kBFloat16 : MatmulDataType::kFloat16;
}

// The cuBLASLt projections of one bucket size, by detail::Projection.
struct BucketPlans {
  std::vector<CublasLtLinear> linears;
};

template <class T>
absl::Status Allocate(DeviceBuffer<T>& buffer, std::size_t count, cudaStream_t stream) {
  BATON_ASSIGN_OR_RETURN(buffer, DeviceBuffer<T>::Create(count));
  return buffer.Fill(0, stream);
}

}  // namespace

class DecoderModel::Impl {
 public:
  absl::Status Init(const DecoderModelOptions& options) {
    options_ = options;
    // The checkpoint is opened, mapped and checked against its config (and
    // the config against the kernels) before any GPU work.
    std::optional<checkpoint::Checkpoint> ckpt;
    if (!options.checkpoint.empty()) {
      BATON_ASSIGN_OR_RETURN(ckpt, checkpoint::Checkpoint::Open(options.checkpoint));
      BATON_ASSIGN_OR_RETURN(config_,
                             detail::DecoderConfigFromCheckpoint(
                                 ckpt->spec(), ckpt->dtype(), options.checkpoint + "/config.json",
                                 static_cast<int>(options.max_context), options.dtype));
      info_.source = options.checkpoint;
      info_.architecture = std::string(ckpt->spec().architecture_name);
      info_.eos_token_ids.assign(ckpt->spec().eos_token_ids.begin(),
                                 ckpt->spec().eos_token_ids.end());
    } else {
      config_ = options.config;
      info_.source = absl::StrCat("synthetic (seed ", options.weight_seed, ")");
      info_.architecture = "synthetic";
    }
    BATON_ASSIGN_OR_RETURN(stream_, CreateStream());
    if (ckpt.has_value()) {
      BATON_ASSIGN_OR_RETURN(weights_,
                             detail::ModelWeights::FromCheckpoint(*ckpt, config_, stream_.get()));
    } else {
      BATON_ASSIGN_OR_RETURN(
          weights_, detail::ModelWeights::Generate(config_, options.weight_seed, stream_.get()));
    }
    BATON_RETURN_IF_ERROR(AllocateState());
    const detail::ModelTensors& w = weights_.tensors();
    gemv_plan_ = detail::PlanDecoderStep(config_, w, caches_, buffers_, detail::PlanPath::kGemv);
    if (options.gemm != DecoderGemm::kBatonGemv) {
      cublas_plan_ =
          detail::PlanDecoderStep(config_, w, caches_, buffers_, detail::PlanPath::kCublasLt);
      BATON_ASSIGN_OR_RETURN(cublas_, CublasLtContext::Create());
    }
    return InitDeviceStep();
  }

  // KV cache, activations (zeroed so rows past the live batch, which a
  // bucket's cuBLASLt plans read and write, are always finite), per-position
  // and per-slot state, the request table and the step clock.
  absl::Status AllocateState() {
    const DecoderConfig& c = config_;
    cudaStream_t s = stream_.get();
    // [max_batch slots, kv_heads, max_context, head_dim] per layer, keys and values.
    const std::size_t kv_elements = static_cast<std::size_t>(options_.max_batch) *
                                    c.key_value_heads() * c.max_context * c.head_dim;
    BATON_RETURN_IF_ERROR(Allocate(kv_, 2 * kv_elements * c.layers, s));
    for (int l = 0; l < c.layers; ++l) {
      caches_.push_back(
          KvCacheLayer{kv_.data() + (2 * l) * kv_elements, kv_.data() + (2 * l + 1) * kv_elements});
    }
    const std::size_t b = options_.max_batch;
    BATON_RETURN_IF_ERROR(Allocate(hidden_, b * c.d_model, s));
    BATON_RETURN_IF_ERROR(Allocate(normed_, b * c.d_model, s));
    BATON_RETURN_IF_ERROR(Allocate(qkv_, b * c.qkv_width(), s));
    BATON_RETURN_IF_ERROR(Allocate(attention_, b * c.attention_width(), s));
    BATON_RETURN_IF_ERROR(Allocate(projected_, b * c.d_model, s));
    BATON_RETURN_IF_ERROR(Allocate(gate_up_, b * c.gate_up_width(), s));
    BATON_RETURN_IF_ERROR(Allocate(ffn_act_, b * c.ffn, s));
    BATON_RETURN_IF_ERROR(Allocate(logits_, b * c.vocab, s));
    BATON_RETURN_IF_ERROR(Allocate(in_tokens_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(out_tokens_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(sequence_ids_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(sequence_steps_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(sampling_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(request_of_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(positions_, b, s));
    BATON_RETURN_IF_ERROR(Allocate(step_end_ns_, options_.step_clock_size, s));
    BATON_RETURN_IF_ERROR(Allocate(requests_, options_.max_requests, s));
    BATON_RETURN_IF_ERROR(
        Allocate(sequences_, std::size_t{options_.max_requests} * c.max_context, s));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));

    buffers_.hidden = hidden_.data();
    buffers_.normed = normed_.data();
    buffers_.qkv = qkv_.data();
    buffers_.attention = attention_.data();
    buffers_.projected = projected_.data();
    buffers_.gate_up = gate_up_.data();
    buffers_.ffn_act = ffn_act_.data();
    buffers_.logits = logits_.data();
    buffers_.in_tokens = in_tokens_.data();

    view_.config = c;
    view_.max_batch = options_.max_batch;
    view_.max_requests = options_.max_requests;
    view_.requests = requests_.data();
    view_.sequences = sequences_.data();
    view_.in_tokens = in_tokens_.data();
    view_.out_tokens = out_tokens_.data();
    view_.sequence_ids = sequence_ids_.data();
    view_.sequence_steps = sequence_steps_.data();
    view_.sampling = sampling_.data();
    view_.request_of = request_of_.data();
    view_.positions = positions_.data();
    view_.step_end_ns = step_end_ns_.data();
    view_.step_clock_size = options_.step_clock_size;
    return absl::OkStatus();
  }

  // The device step program: the GEMV plan, whatever options.gemm says, in
  // device memory for the dynamic-parallelism engine to walk.
  absl::Status InitDeviceStep() {
    BATON_ASSIGN_OR_RETURN(device_ops_, DeviceBuffer<detail::StepOp>::Create(gemv_plan_.size()));
    BATON_RETURN_IF_ERROR(device_ops_.CopyFrom(gemv_plan_));
    detail::DecoderDeviceStep step;
    step.view = view_;
    step.ops = device_ops_.data();
    step.op_count = static_cast<std::uint32_t>(gemv_plan_.size());
    step.rope_inv_freq = weights_.tensors().rope_inv_freq;
    step.hidden = hidden_.data();
    step.normed = normed_.data();
    step.qkv = qkv_.data();
    step.attention = attention_.data();
    step.logits = logits_.data();
    step.in_tokens = in_tokens_.data();
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
      absl::Status valid = ValidateDecodeRequest(config_, requests[i]);
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
          PositionSampling{sampling.temperature, sampling.top_k, sampling.top_p, 0, sampling.seed};
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
    detail::PlanLaunch launch;
    launch.view = &view_;
    launch.args = ctx.args;
    launch.capacity = capacity;
    launch.buffers = &buffers_;
    launch.rope_inv_freq = weights_.tensors().rope_inv_freq;
    if (UsesGemv(capacity)) return detail::EnqueuePlan(gemv_plan_, launch, stream);
    BATON_ASSIGN_OR_RETURN(BucketPlans * plans, PlansFor(capacity));
    for (int i = 0; i < detail::kProjections; ++i) launch.linears[i] = &plans->linears[i];
    return detail::EnqueuePlan(cublas_plan_, launch, stream);
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

  absl::StatusOr<std::vector<std::int32_t>> ReadGenerated(std::uint32_t entry,
                                                          std::uint32_t count) const;
  absl::StatusOr<std::vector<float>> ReadLogits(std::uint32_t position) const;
  absl::StatusOr<std::vector<std::uint64_t>> ReadStepEnds(std::uint64_t first,
                                                          std::uint32_t count) const;

  const DecoderModelOptions& options() const { return options_; }
  const DecoderConfig& config() const { return config_; }
  const DecoderModelInfo& info() const { return info_; }
  std::size_t weight_bytes() const { return weights_.step_bytes(); }

 private:
  absl::StatusOr<BucketPlans*> PlansFor(std::uint32_t tokens) {
    auto it = plans_.find(tokens);
    if (it != plans_.end()) return &it->second;
    const DecoderConfig& c = config_;
    // (in_features, out_features, bias) of each projection, by detail::Projection.
    const struct {
      int in, out;
      bool bias;
    } shapes[detail::kProjections] = {{c.d_model, c.qkv_width(), c.qkv_bias},
                                      {c.attention_width(), c.d_model, c.o_bias},
                                      {c.d_model, c.gate_up_width(), false},
                                      {c.ffn, c.d_model, false},
                                      {c.d_model, c.vocab, false}};
    BucketPlans plans;
    for (int i = 0; i < detail::kProjections; ++i) {
      LinearOptions linear;
      linear.tokens = static_cast<int>(tokens);
      linear.in_features = shapes[i].in;
      linear.out_features = shapes[i].out;
      linear.data_type = MatmulTypeOf(c.dtype);
      linear.epilogue = shapes[i].bias ? MatmulEpilogue::kBias : MatmulEpilogue::kNone;
      BATON_ASSIGN_OR_RETURN(CublasLtLinear plan, CublasLtLinear::Create(cublas_, linear));
      plans.linears.push_back(std::move(plan));
    }
    return &plans_.emplace(tokens, std::move(plans)).first->second;
  }

  DecoderModelOptions options_;
  DecoderConfig config_;
  DecoderModelInfo info_;
  Stream stream_;  // uploads and reads; never the step's stream
  detail::ModelWeights weights_;
  DeviceBuffer<std::uint16_t> kv_;
  std::vector<KvCacheLayer> caches_;
  DeviceBuffer<float> hidden_;
  DeviceBuffer<std::uint16_t> normed_, qkv_, attention_, projected_, gate_up_, ffn_act_, logits_;
  DeviceBuffer<std::int32_t> in_tokens_, out_tokens_, positions_;
  DeviceBuffer<std::uint64_t> sequence_ids_;
  DeviceBuffer<std::uint32_t> sequence_steps_, request_of_;
  DeviceBuffer<PositionSampling> sampling_;
  DeviceBuffer<unsigned long long> step_end_ns_;
  DeviceBuffer<DecodeRequestInfo> requests_;
  DeviceBuffer<std::int32_t> sequences_;
  detail::StepBuffers buffers_;
  detail::DecoderStepView view_;
  std::vector<detail::StepOp> gemv_plan_;
  std::vector<detail::StepOp> cublas_plan_;
  DeviceBuffer<detail::StepOp> device_ops_;
  DeviceBuffer<detail::DecoderDeviceStep> device_step_;
  std::shared_ptr<CublasLtContext> cublas_;
  std::map<std::uint32_t, BucketPlans> plans_;
};

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

absl::StatusOr<std::vector<float>> DecoderModel::Impl::ReadLogits(std::uint32_t position) const {
  if (position >= options_.max_batch) {
    return absl::OutOfRangeError(
        absl::StrFormat("DecoderModel::ReadLogits: position %u is past max_batch %u", position,
                        options_.max_batch));
  }
  const int vocab = config_.vocab;
  std::vector<std::uint16_t> bits(vocab);
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(bits.data(), logits_.data() + std::size_t{position} * vocab,
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
  return ValidateDecodeRequest(impl_->config(), request);
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
const DecoderConfig& DecoderModel::config() const { return impl_->config(); }
const DecoderModelInfo& DecoderModel::info() const { return impl_->info(); }
std::size_t DecoderModel::weight_bytes() const { return impl_->weight_bytes(); }

}  // namespace baton
