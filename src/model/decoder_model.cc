// DecoderModel: loading, the device state a step reads and writes, the step
// plans per bucket and the step itself (decoder_model_io.cc writes requests
// and reads results).
#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint_config.h"
#include "decoder_model_impl.h"
#include "exchange_bytes.h"
#include "ops/host_driver.h"

namespace baton {
namespace {

static_assert(kEntryStopTokens == kMaxStopTokens, "the request table holds every stop token");

MatmulDataType MatmulTypeOf(DecoderDType dtype) {
  return dtype == DecoderDType::kBFloat16 ? MatmulDataType::kBFloat16 : MatmulDataType::kFloat16;
}

template <class T>
absl::Status Allocate(DeviceBuffer<T>& buffer, std::size_t count, cudaStream_t stream) {
  BATON_ASSIGN_OR_RETURN(buffer, DeviceBuffer<T>::Create(count));
  return buffer.Fill(0, stream);
}

// Device memory a step needs besides the KV cache and the request table,
// kept free when the context is fitted to memory: activations of the
// largest step, cuBLASLt's workspaces and plans, the bucket graphs.
constexpr std::size_t kContextReserveBytes = std::size_t{2} << 30;

}  // namespace

absl::Status DecoderModel::Impl::Init(const DecoderModelOptions& options) {
  options_ = options;
  max_rows_ = StepRowsLimit(options.tokens(), options.max_batch);
  if (const TensorParallelOptions& tp = options.tensor_parallel; tp.group != nullptr) {
    tp_ = detail::TensorParallel{tp.group->ranks(), tp.rank};
  }
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
    info_.context_limit =
        options.max_context != 0
            ? absl::StrCat("DecoderModelOptions::max_context (", options.max_context, ")")
            : absl::StrCat("the checkpoint (max_position_embeddings ",
                           ckpt->spec().max_position_embeddings,
                           ckpt->spec().sliding_window.has_value()
                               ? absl::StrCat(", sliding_window ", *ckpt->spec().sliding_window)
                               : std::string(),
                           ") and the attention kernels' limit (", kDecoderMaxContext, ")");
  } else {
    config_ = options.config;
    info_.source = absl::StrCat("synthetic (seed ", options.weight_seed, ")");
    info_.architecture = "synthetic";
    info_.context_limit = absl::StrCat("DecoderConfig::max_context (", config_.max_context, ")");
  }
  if (const absl::Status split = detail::ValidateTensorParallel(config_, tp_); !split.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(info_.source, ": ", split.message(), " (DecoderModelOptions::tensor_parallel)"));
  }
  rank_config_ = tp_.size > 1 ? detail::RankConfig(config_, tp_) : config_;
  // The GPU work starts here, on the rank's device.
  if (tp_.size > 1) {
    const TensorParallelOptions& tp = options.tensor_parallel;
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(tp.group->device(tp.rank)));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device_));
  BATON_ASSIGN_OR_RETURN(stream_, CreateStream());
  if (ckpt.has_value()) {
    BATON_ASSIGN_OR_RETURN(weights_,
                           detail::ModelWeights::FromCheckpoint(*ckpt, config_, stream_.get(),
                                                                options.load_progress, tp_));
  } else {
    BATON_ASSIGN_OR_RETURN(
        weights_, detail::ModelWeights::Generate(config_, options.weight_seed, stream_.get(),
                                                      options.load_progress, tp_));
  }
  BATON_RETURN_IF_ERROR(SizeKvPool(ckpt.has_value(), ckpt.has_value() && options.max_context == 0));
  rank_config_.max_context = config_.max_context;
  BATON_RETURN_IF_ERROR(AllocateState());
  BATON_RETURN_IF_ERROR(InitTensorParallel());
  if (options.gemm != DecoderGemm::kBatonGemv) {
    BATON_ASSIGN_OR_RETURN(cublas_, CublasLtContext::Create());
  }
  return InitDeviceStep();
}

// The KV pool: the option's pages, or max_batch sequences at max_context;
// with a checkpoint, at most what the GPU's free memory holds after the
// weights, the request table and kContextReserveBytes for the rest. When
// the context is the default and the pool cannot hold one sequence of it,
// the context shrinks to what the pool holds.
absl::Status DecoderModel::Impl::SizeKvPool(bool checkpoint, bool fit_context) {
  const DecoderConfig& c = config_;
  const std::uint32_t page = options_.kv_page_tokens;
  // (A tensor-parallel rank holds its key/value heads' share of a page.)
  const std::size_t page_bytes =
      std::size_t{2} * c.layers * rank_config_.kv_width() * page * sizeof(std::uint16_t);
  const auto pages_for = [page](std::uint64_t tokens) {
    return static_cast<std::uint32_t>((tokens + page - 1) / page);
  };
  std::uint64_t pool = std::uint64_t{options_.max_batch} * pages_for(c.max_context);
  info_.kv_pool_limit = absl::StrFormat("max_batch (%u) sequences at max_context (%d)",
                                        options_.max_batch, c.max_context);
  if (options_.kv_pool_pages != 0) {
    pool = options_.kv_pool_pages;
    info_.kv_pool_limit = absl::StrCat("DecoderModelOptions::kv_pool_pages (", pool, ")");
  } else if (checkpoint) {
    std::size_t free_bytes = 0, total_bytes = 0;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::size_t table =
        std::size_t{options_.max_requests} * c.max_context * sizeof(std::int32_t);
    const std::size_t kept = kContextReserveBytes + table;
    const std::size_t fits = free_bytes > kept ? (free_bytes - kept) / page_bytes : 0;
    if (fits == 0) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "DecoderModel: %u MiB of GPU memory are free after the weights, too little for one KV "
          "page (%u KiB: %u tokens) beside the request table (%u MiB) and %u MiB kept for the "
          "step: lower DecoderModelOptions::max_requests or max_context, or use a smaller model",
          free_bytes >> 20, page_bytes >> 10, page, table >> 20, kContextReserveBytes >> 20));
    }
    if (fits < pool) {
      pool = fits;
      info_.kv_pool_limit = absl::StrFormat(
          "GPU memory: %u MiB free after the weights hold %u pages of %u KiB, with %u MiB kept "
          "for the step and the request table",
          free_bytes >> 20, fits, page_bytes >> 10, kept >> 20);
    }
  }
  pool = std::min<std::uint64_t>(pool, 0x7fffffffu);
  if (fit_context && pool * page < static_cast<std::uint64_t>(c.max_context)) {
    // A multiple of 256 tokens, so that the limit reads as a round number.
    const std::uint64_t held = pool * page;
    config_.max_context = static_cast<int>(held >= 256 ? held / 256 * 256 : held);
    info_.context_limit = absl::StrCat("the KV pool (", info_.kv_pool_limit, ")");
  }
  info_.kv_page_tokens = page;
  info_.kv_pool_pages = static_cast<std::uint32_t>(pool);
  pages_per_slot_ = pages_for(config_.max_context);
  return absl::OkStatus();
}

// KV cache, activations by row (zeroed so rows past the live ones, which a
// bucket's cuBLASLt plans read and write, are always finite), per-row and
// per-position state, the request table, the token stream and the step
// clock.
absl::Status DecoderModel::Impl::AllocateState() {
  const DecoderConfig& c = rank_config_;  // (the logits and selection's tables: config_'s vocabulary)
  cudaStream_t s = stream_.get();
  // [pool pages, kv_heads, page_tokens, head_dim] per layer, keys and values,
  // and the page table the scheduler writes ([max_batch][pages_per_slot]).
  const std::uint32_t page = options_.kv_page_tokens;
  const std::size_t kv_elements =
      std::size_t{info_.kv_pool_pages} * c.key_value_heads() * page * c.head_dim;
  BATON_RETURN_IF_ERROR(Allocate(kv_, 2 * kv_elements * c.layers, s));
  BATON_ASSIGN_OR_RETURN(page_table_, DeviceBuffer<std::uint32_t>::Create(
                                          std::size_t{options_.max_batch} * pages_per_slot_));
  BATON_RETURN_IF_ERROR(page_table_.Fill(0xFF, s));  // kNoPage: nothing mapped
  std::uint32_t shift = 0;
  while ((1u << shift) < page) ++shift;
  for (int l = 0; l < c.layers; ++l) {
    KvCacheLayer cache;
    cache.keys = kv_.data() + (2 * l) * kv_elements;
    cache.values = kv_.data() + (2 * l + 1) * kv_elements;
    cache.page_table = page_table_.data();
    cache.pages_per_slot = pages_per_slot_;
    cache.page_shift = shift;
    cache.pool_pages = info_.kv_pool_pages;
    caches_.push_back(cache);
  }
  const std::size_t r = max_rows_;
  const std::size_t b = options_.max_batch;
  BATON_RETURN_IF_ERROR(Allocate(hidden_, r * c.d_model, s));
  BATON_RETURN_IF_ERROR(Allocate(normed_, r * c.d_model, s));
  BATON_RETURN_IF_ERROR(Allocate(qkv_, r * c.qkv_width(), s));
  BATON_RETURN_IF_ERROR(Allocate(attention_, r * c.attention_width(), s));
  BATON_RETURN_IF_ERROR(Allocate(projected_, r * c.d_model, s));
  BATON_RETURN_IF_ERROR(Allocate(gate_up_, r * c.gate_up_width(), s));
  BATON_RETURN_IF_ERROR(Allocate(ffn_act_, r * c.ffn, s));
  BATON_RETURN_IF_ERROR(Allocate(logits_, b * config_.padded_vocab(), s));
  // The split attention's scratch, for the largest bucket that runs row
  // attention (chunk steps run the chunk attention when the head size
  // allows).
  const std::uint32_t attention_rows = detail::AttentionFor(c, max_rows_, options_.max_batch) ==
                                               detail::AttentionPlan::kAppendThenRows
                                           ? max_rows_
                                           : options_.max_batch;
  const std::size_t partials = attention_scratch_floats(c, attention_rows);
  if (partials != 0) {
    BATON_RETURN_IF_ERROR(Allocate(attention_partials_, partials, s));
    BATON_RETURN_IF_ERROR(
        Allocate(attention_arrivals_, attention_scratch_arrivals(c, attention_rows), s));
    buffers_.attention_scratch = {attention_partials_.data(), attention_arrivals_.data(),
                                  attention_rows};
  }
  BATON_RETURN_IF_ERROR(Allocate(in_tokens_, r, s));
  BATON_RETURN_IF_ERROR(Allocate(row_slots_, r, s));
  BATON_RETURN_IF_ERROR(Allocate(row_positions_, r, s));
  BATON_RETURN_IF_ERROR(Allocate(row_fresh_, r, s));
  BATON_RETURN_IF_ERROR(Allocate(out_tokens_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(chunk_start_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(sequence_ids_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(sequence_steps_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(sampling_, b, s));
  // Penalties' token counts: a word per vocabulary entry per slot (128256
  // entries: 0.5 MB a slot), reset by step_begin when a penalized request
  // takes the slot.
  BATON_RETURN_IF_ERROR(Allocate(token_counts_, std::size_t{b} * config_.padded_vocab(), s));
  BATON_RETURN_IF_ERROR(Allocate(request_of_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(logit_rows_, b, s));
  BATON_RETURN_IF_ERROR(Allocate(step_end_ns_, options_.step_clock_size, s));
  BATON_RETURN_IF_ERROR(Allocate(requests_, options_.max_requests, s));
  BATON_RETURN_IF_ERROR(
      Allocate(sequences_, std::size_t{options_.max_requests} * c.max_context, s));
  BATON_ASSIGN_OR_RETURN(
      stream_words_, detail::TokenStream::Create(options_.max_requests, options_.stream_window));
  BATON_ASSIGN_OR_RETURN(logprob_ring_,
                         detail::LogprobRing::Create(options_.max_requests, options_.stream_window,
                                                     options_.max_logprobs));
  if (options_.max_logprobs > 0) {
    BATON_RETURN_IF_ERROR(Allocate(raw_logits_, std::size_t{b} * config_.padded_vocab(), s));
  }
  logprob_counts_.assign(options_.max_requests, -1);
  BATON_RETURN_IF_ERROR(Allocate(cancel_, options_.max_requests, s));
  prompt_lengths_.assign(options_.max_requests, 0);
  token_bounds_.assign(options_.max_requests, 0);
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

  view_.config = config_;
  view_.max_batch = options_.max_batch;
  view_.max_rows = max_rows_;
  view_.max_requests = options_.max_requests;
  view_.requests = requests_.data();
  view_.sequences = sequences_.data();
  view_.in_tokens = in_tokens_.data();
  view_.row_slots = row_slots_.data();
  view_.row_positions = row_positions_.data();
  view_.row_fresh = row_fresh_.data();
  view_.out_tokens = out_tokens_.data();
  view_.sequence_ids = sequence_ids_.data();
  view_.sequence_steps = sequence_steps_.data();
  view_.sampling = sampling_.data();
  view_.request_of = request_of_.data();
  view_.logit_rows = logit_rows_.data();
  view_.chunk_start = chunk_start_.data();
  view_.step_end_ns = step_end_ns_.data();
  view_.step_clock_size = options_.step_clock_size;
  view_.stream = stream_words_.device();
  view_.stream_window = stream_words_.window();
  view_.cancel = cancel_.data();
  view_.token_counts = token_counts_.data();
  view_.logprob_words = logprob_ring_.device();
  view_.logprob_capacity = logprob_ring_.capacity();
  view_.raw_logits = options_.max_logprobs > 0 ? raw_logits_.data() : nullptr;
  return absl::OkStatus();
}

// A tensor-parallel rank's share of the step: its view of the group, its
// slice of the logits, and the check that the group's staging holds the
// step's largest exchange (a chunk step's rows, or every sequence's logits).
absl::Status DecoderModel::Impl::InitTensorParallel() {
  if (tp_.size == 1) return absl::OkStatus();
  const PeerGroup& group = *options_.tensor_parallel.group;
  const int vocab_rows = static_cast<int>(detail::LogitsSliceRows(config_, tp_.size));
  const std::size_t needed =
      detail::ExchangeBytes(config_, max_rows_, options_.max_batch, tp_.size);
  if (group.max_bytes() < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModelOptions::tensor_parallel: the group's max_bytes is %u, but this model's "
        "steps exchange up to %u bytes (%u rows of %d, or %u sequences' logits of %d rows a "
        "rank); create the PeerGroup with PeerGroupOptions::max_bytes >= %u",
        group.max_bytes(), needed, max_rows_, config_.d_model, options_.max_batch, vocab_rows,
        needed));
  }
  BATON_RETURN_IF_ERROR(
      Allocate(logits_part_, std::size_t{options_.max_batch} * vocab_rows, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  tp_step_ = detail::TensorParallelStep{group.view(tp_.rank), vocab_rows, logits_part_.data()};
  return absl::OkStatus();
}

absl::Status DecoderModel::Impl::CheckDevice(const char* call) const {
  int current = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current == device_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "DecoderModel::%s: the current CUDA device is %d, but the model lives on device %d; call "
      "cudaSetDevice(model->device()) on this thread first",
      call, current, device_));
}

// The plan of a path and attention, built once.
const std::vector<ops::OpNode>& DecoderModel::Impl::Plan(detail::PlanPath path,
                                                         detail::AttentionPlan attention) {
  const PlanKey key{path, attention};
  auto it = plans_by_path_.find(key);
  if (it == plans_by_path_.end()) {
    it = plans_by_path_
             .emplace(key, detail::PlanDecoderStep(rank_config_, weights_.tensors(), caches_,
                                                   buffers_, view_, path, attention,
                                                   tp_step_.has_value() ? &*tp_step_ : nullptr))
             .first;
  }
  return it->second;
}

// The device step walks Baton's own kernels: the GEMV plan with fused
// attention for buckets up to max_batch rows, the GEMM plan with the
// appended chunks' attention above (what kBatonGemv captures for the same
// buckets, so every engine runs the same kernels). Every kernel the two
// plans launch is opted in to its shared memory now, from the host.
absl::Status DecoderModel::Impl::InitDeviceStep() {
  const auto& decode = Plan(detail::PlanPath::kGemv, detail::AttentionPlan::kFusedRows);
  const auto& prefill =
      Plan(detail::PlanPath::kBatonGemm,
           detail::AttentionFor(config_, options_.max_batch + 1, options_.max_batch));
  std::vector<ops::OpNode> nodes(decode);
  nodes.insert(nodes.end(), prefill.begin(), prefill.end());
  BATON_ASSIGN_OR_RETURN(device_ops_, DeviceBuffer<ops::OpNode>::Create(nodes.size()));
  BATON_RETURN_IF_ERROR(device_ops_.CopyFrom(nodes));
  detail::DecoderDeviceStep step;
  step.decode_ops = device_ops_.data();
  step.decode_count = static_cast<std::uint32_t>(decode.size());
  step.prefill_ops = device_ops_.data() + decode.size();
  step.prefill_count = static_cast<std::uint32_t>(prefill.size());
  step.max_batch = options_.max_batch;
  BATON_ASSIGN_OR_RETURN(device_step_, DeviceBuffer<detail::DecoderDeviceStep>::Create(1));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(device_step_.data(), &step, sizeof(step), cudaMemcpyHostToDevice));
  BATON_CUDA_RETURN_IF_ERROR(
      detail::PrepareDecoderDynamicParallelism(nodes, max_rows_, options_.max_batch));
  return absl::OkStatus();
}

DeviceStepProgram DecoderModel::Impl::device_step() const {
  DeviceStepProgram program;
  program.launch = detail::LaunchDecoderDynamicParallelism;
  program.params = device_step_.data();
  program.max_batch = options_.max_batch;
  program.max_batch_option = "DecoderModelOptions::max_batch";
  return program;
}

std::vector<std::uint32_t> DecoderModel::Impl::DefaultBuckets() const {
  std::vector<std::uint32_t> buckets;
  for (std::uint32_t b = 1; b < options_.max_batch; b *= 2) buckets.push_back(b);
  buckets.push_back(options_.max_batch);
  // Above max_batch (chunk steps, whose GEMMs run over the whole bucket):
  // powers of two, and from 256 on the points halfway too (384, 768, 1536,
  // ...), so a step's rows fill its bucket's 128-row tiles to at least 2/3.
  std::uint32_t b = 1;
  while (b <= options_.max_batch) b *= 2;
  for (; b < max_rows_; b *= 2) {
    buckets.push_back(b);
    if (b >= 256 && b + b / 2 < max_rows_) buckets.push_back(b + b / 2);
  }
  if (buckets.back() < max_rows_) buckets.push_back(max_rows_);
  return buckets;
}

absl::Status DecoderModel::Impl::EnqueueStep(const StepContext& ctx, cudaStream_t stream) {
  BATON_RETURN_IF_ERROR(CheckDevice("EnqueueStep"));
  const std::uint32_t rows = ctx.bucket_size;
  if (rows == 0 || rows > max_rows_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModel: bucket size %u is outside [1, %u] (the rows of a step: max_batch, "
        "max_tokens_per_step and max_tokens_without_decodes); register buckets no larger than "
        "that",
        rows, max_rows_));
  }
  if (ctx.args.max_batch != options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecoderModel: the runtime's max_batch is %u but the model was created with %u; leave "
        "RuntimeOptions::max_batch 0 (the program carries the model's) or make them equal",
        ctx.args.max_batch, options_.max_batch));
  }
  ops::OpFrame frame;
  frame.args = ctx.args;
  frame.rows = rows;
  frame.sequences = std::min(rows, options_.max_batch);
  const detail::AttentionPlan attention = detail::AttentionFor(config_, rows, options_.max_batch);
  const auto enqueue = [&](detail::PlanPath path) {
    const std::vector<ops::OpNode>& plan = Plan(path, attention);
    return ops::EnqueueNodes(plan.data(), plan.size(), frame, stream);
  };
  if (UsesGemv(rows)) return enqueue(detail::PlanPath::kGemv);
  if (options_.gemm == DecoderGemm::kBatonGemv) return enqueue(detail::PlanPath::kBatonGemm);
  if (UsesWideGemv(rows)) return enqueue(detail::PlanPath::kWideGemv);
  BATON_ASSIGN_OR_RETURN(BucketPlans * plans, PlansFor(rows));
  std::array<CublasLtLinear*, ops::kProjections> linears{};
  for (int i = 0; i < ops::kProjections; ++i) linears[i] = &plans->linears[i];
  frame.linears = linears.data();
  return enqueue(detail::PlanPath::kCublasLt);
}

// Whether a bucket's projections run Baton's GEMV (else Baton's GEMM or
// cuBLASLt).
bool DecoderModel::Impl::UsesGemv(std::uint32_t rows) const {
  switch (options_.gemm) {
    case DecoderGemm::kBatonGemv:
      return rows <= options_.max_batch;
    case DecoderGemm::kAuto:
      return rows <= options_.auto_gemv_max_bucket;
    case DecoderGemm::kCublasLt:
      break;
  }
  return false;
}

// Whether a bucket's projections run Baton's wide GEMV: kAuto's decode
// buckets above the GEMV's, up to auto_wide_gemv_max_bucket (at most one
// tile of the wide GEMV's positions: beyond it each tile reads the weights
// again).
bool DecoderModel::Impl::UsesWideGemv(std::uint32_t rows) const {
  return options_.gemm == DecoderGemm::kAuto && rows > options_.auto_gemv_max_bucket &&
         rows <= options_.auto_wide_gemv_max_bucket && rows <= options_.max_batch;
}

absl::StatusOr<DecoderModel::Impl::BucketPlans*> DecoderModel::Impl::PlansFor(std::uint32_t rows) {
  auto it = plans_.find(rows);
  if (it != plans_.end()) return &it->second;
  const DecoderConfig& c = rank_config_;
  // (in_features, out_features, bias, tokens) of each projection, by
  // ops::Projection: the LM head reads each sequence's last row only (a
  // tensor-parallel rank's: its vocabulary rows; the attention output's
  // bias on rank 0 alone).
  const int head_rows = tp_step_.has_value() ? tp_step_->vocab_rows : c.padded_vocab();
  const bool o_bias = c.o_bias && tp_.rank == 0;
  const std::uint32_t sequences = std::min(rows, options_.max_batch);
  const struct {
    int in, out;
    bool bias;
    std::uint32_t tokens;
  } shapes[ops::kProjections] = {{c.d_model, c.qkv_width(), c.qkv_bias, rows},
                                 {c.attention_width(), c.d_model, o_bias, rows},
                                 {c.d_model, c.gate_up_width(), false, rows},
                                 {c.ffn, c.d_model, false, rows},
                                 {c.d_model, head_rows, false, sequences}};
  BucketPlans plans;
  for (int i = 0; i < ops::kProjections; ++i) {
    LinearOptions linear;
    linear.tokens = static_cast<int>(shapes[i].tokens);
    linear.in_features = shapes[i].in;
    linear.out_features = shapes[i].out;
    linear.data_type = MatmulTypeOf(c.dtype);
    linear.epilogue = shapes[i].bias ? MatmulEpilogue::kBias : MatmulEpilogue::kNone;
    BATON_ASSIGN_OR_RETURN(CublasLtLinear plan, CublasLtLinear::Create(cublas_, linear));
    plans.linears.push_back(std::move(plan));
  }
  return &plans_.emplace(rows, std::move(plans)).first->second;
}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const DecoderModelOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateDecoderModelOptions(options));
  auto impl = std::make_unique<Impl>();
  BATON_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<DecoderModel>(new DecoderModel(std::move(impl)));
}

DecoderModel::DecoderModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
int DecoderModel::device() const { return impl_->device(); }
DecoderModel::~DecoderModel() = default;

StepProgram DecoderModel::MakeStepProgram(std::vector<std::uint32_t> buckets) {
  StepProgram program;
  program.name = "decoder";
  program.buckets = buckets.empty() ? impl_->DefaultBuckets() : std::move(buckets);
  Impl* impl = impl_.get();
  program.enqueue = [impl](const StepContext& ctx, cudaStream_t stream) {
    return impl->EnqueueStep(ctx, stream);
  };
  program.device_step = impl->device_step();
  program.max_batch = impl->options().max_batch;
  program.tokens = impl->options().tokens();
  program.pages = impl->page_policy();
  return program;
}

absl::StatusOr<std::size_t> TensorParallelExchangeBytes(const DecoderModelOptions& options,
                                                        int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorParallelExchangeBytes: size is ", size, "; pass 1 or more"));
  }
  DecoderConfig config = options.config;
  if (!options.checkpoint.empty()) {
    BATON_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt,
                           checkpoint::Checkpoint::Open(options.checkpoint));
    BATON_ASSIGN_OR_RETURN(config,
                           detail::DecoderConfigFromCheckpoint(
                               ckpt.spec(), ckpt.dtype(), options.checkpoint + "/config.json",
                               static_cast<int>(options.max_context), options.dtype));
  }
  const std::size_t bytes = detail::ExchangeBytes(
      config, StepRowsLimit(options.tokens(), options.max_batch), options.max_batch, size);
  return (bytes + 15) / 16 * 16;  // PeerGroupOptions::max_bytes is a multiple of 16
}

}  // namespace baton
