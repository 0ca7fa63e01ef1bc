// baton::DecoderModel: a Llama-family decoder-only transformer as a Baton step
// program, with its weights, KV cache and request table in device memory. It
// serves a Hugging Face checkpoint (Llama 3.x, TinyLlama, SmolLM2, Mistral,
// Qwen2/2.5 from safetensors) or a synthetic model from a seed.
//
//   options.checkpoint = "/models/Llama-3.2-1B";          // or options.config + weight_seed
//   auto model = DecoderModel::Create(options);           // loaded, fused, on the GPU
//   model->WriteRequests(0, requests);                    // prompts and limits -> entries 0..n-1
//   runtime->RegisterStepProgram(model->MakeStepProgram());
//   runtime->Submit({model->WorkItemFor(0), ...});        // the device admits them
//   ... model->ReadStream(entry, from, tokens)            // tokens as each step ends
//   ... Poll: Completion{item, value = tokens generated} ...
//   model->ReadGenerated(entry, count)                    // the whole generation
//
// A step serves a token budget (DecoderModelOptions::max_tokens_per_step,
// baton/batch_policy.h): every decoding sequence feeds its last token, and
// sequences still reading their prompt feed chunks of it with what the
// budget leaves, so a prompt costs what its arithmetic costs (its chunks'
// projections are GEMMs) and decoding never waits more than one budget's
// work; a step in which nobody decodes may hold more
// (max_tokens_without_decodes). The device scheduler decides the chunks; the
// step's graph is chosen by its rows. A sequence finishes when it emits one of its stop tokens or
// reaches max_new_tokens; the scheduler then retires it and admits the next
// request into its slot in the same step (continuous batching on the device).
//
// Tokens depend only on the weights, the prompt and (when sampling) (seed,
// sequence_id, token index), given the kernels each step runs: with
// DecoderGemm::kBatonGemv every engine runs Baton's own kernels for a given
// bucket (its GEMV and fused attention up to max_batch rows, its tensor-core
// GEMM and chunk attention above), so a request's tokens are the same on
// every engine and host loop for the same schedule, and bit-identical to a
// prompt fed a token per step while its chunks stay within max_batch rows
// (both compute every row alike: see README, "Tokens and chunking"). With
// kCublasLt, and with kAuto above auto_gemv_max_bucket (Baton's wide GEMV up
// to auto_wide_gemv_max_bucket, then cuBLASLt), the bits depend on the
// bucket a step ran in; the graph engines and host loops still agree with
// each other for the same schedule.
//
// The step is a plan built once from the config (a list of ops with their
// fusions) that the graph engines capture per bucket and the
// dynamic-parallelism engine's device step walks from the device (grids sized
// for the actual rows, so it serves steps above every bucket).
//
// Thread safety: one host thread at a time; the model serves one runtime (or
// host loop) at a time, since every step writes its activations and KV cache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "baton/decoder_config.h"
#include "baton/peer_group.h"
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
                   // positions reads the weights once); above it, decode buckets up to
                   // DecoderModelOptions::auto_wide_gemv_max_bucket run Baton's wide GEMV (a
                   // block owns every sequence of the bucket, so the weights are still read
                   // once; graph engines only) and larger ones cuBLASLt. A sequence's tokens
                   // then depend on the buckets it ran in, as with kCublasLt.
};

// The most stop tokens one request may name (Llama 3 instruct stops on any of
// three).
inline constexpr std::size_t kMaxStopTokens = 8;

struct DecodeRequest {
  std::vector<std::int32_t> prompt;  // >= 1 token, each in [0, vocab)
  std::uint32_t max_new_tokens = 16;
  // Generation ends after emitting any of these (each in [0, vocab); at most
  // kMaxStopTokens), or at max_new_tokens.
  std::vector<std::int32_t> stop_tokens;
  // How its tokens are picked (greedy when temperature <= 0); absent:
  // DecoderModelOptions::sampling. Sampling is deterministic, keyed by
  // (seed, sequence_id, token index): the same tokens on every engine and
  // bucket with DecoderGemm::kBatonGemv.
  std::optional<SamplingParams> sampling;
  std::uint64_t sequence_id = 0;  // sampling key (ignored when greedy)
  // -1: none. 0..DecoderModelOptions::max_logprobs: each generated token's
  // log-probability and this many top alternatives (ReadLogprobs), computed
  // on the device by the step that chose it: the log-softmax, in float, of
  // the model's own logits (vLLM's default "raw" logprobs: before the
  // penalties, min_tokens, temperature, top-k and top-p).
  std::int32_t logprobs = -1;
};

// One generated token's log-probabilities (DecoderModel::ReadLogprobs).
struct TokenLogprobs {
  float logprob = 0.0f;                  // the chosen token's
  std::vector<std::int32_t> top_tokens;  // the best `logprobs` tokens, best first (ties: lower id)
  std::vector<float> top_logprobs;       // theirs
};

// Tensor parallelism (Megatron's split, as vLLM applies it to Llama): one
// model over the GPUs of a PeerGroup, one DecoderModel per rank, each on its
// own GPU with its share of the weights (q | k | v and gate | up by output
// rows, the attention output and down projections by input columns, the LM
// head by vocabulary rows; embedding and norms whole) and of the KV cache
// (its key/value heads). Inside every step the ranks' partial sums are
// all-reduced over peer memory (a kernel node; sum in rank order, so every
// rank holds the same bits) and the logits gathered before selection, so
// every rank chooses the same tokens. The size must divide the key/value
// heads, and the group's max_bytes must hold a step's largest exchange
// (Create says how much).
//
// The ranks must run the same steps in the same order (the same rows,
// buckets and requests), or their all-reduces wait for each other until
// PeerGroupOptions::wait_timeout and the step's outputs are garbage
// (PeerGroup::CheckFaults names the rank): either one host loop decides
// every step and launches it on every rank (samples/tensor_parallel), or the
// ranks' device schedulers run in lockstep (baton/lockstep_group.h; Server
// with ServerOptions::tensor_parallel_size does this).
struct TensorParallelOptions {
  std::shared_ptr<const PeerGroup> group;  // null: one GPU (the current device)
  int rank = 0;                            // this model's rank in the group
};

struct DecoderModelOptions {
  // The model: a Hugging Face model directory (config.json, and
  // model.safetensors or model.safetensors.index.json with its shards;
  // LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM), or, when
  // empty, the synthetic model of `config` with weights from `weight_seed`.
  std::string checkpoint;
  DecoderConfig config;           // the synthetic model's shape (ignored with a checkpoint)
  std::uint64_t weight_seed = 1;  // the synthetic model's weights
  // With a checkpoint: tokens one sequence may hold (prompt + generated), at
  // most max_position_embeddings and kDecoderMaxContext (2^20); 0: the most
  // the checkpoint, the attention kernels and the KV pool allow. info() says
  // what limited it.
  std::uint32_t max_context = 0;
  // The KV cache is one pool of pages of kv_page_tokens tokens (a power of
  // two in [16, 4096]), handed to sequences by the device scheduler as they
  // grow and taken back when they finish (baton/page_policy.h: a request
  // reserves its prompt + max_new_tokens at admission and waits while the
  // pool cannot cover it). 64: a page is a whole tile of the chunk
  // attention, and a sequence wastes less than one page.
  std::uint32_t kv_page_tokens = 64;
  // Pages in the pool; 0: enough for max_batch sequences at max_context, or,
  // with a checkpoint, what the GPU's free memory holds after the weights,
  // the request table and a reserve for the step's activations, if less.
  std::uint32_t kv_pool_pages = 0;
  // With a checkpoint: the weights' and activations' type (default: the
  // checkpoint's fp16/bf16; a float32 checkpoint converts to bf16).
  std::optional<DecoderDType> dtype;
  // Sequences decoded together (KV-cache slots); the step program carries it
  // to the runtime (leave RuntimeOptions::max_batch 0).
  std::uint32_t max_batch = 32;
  // Rows one step may hold: a token of each decoding sequence plus chunks of
  // the prompts being read (at least max_batch, at most 65536). 768 on the
  // H100 (Llama-3.2-1B, results/h100-2026-11-25-token-budget-sweep-
  // llama-3.2-1b.json): 16 sequences decoding beside a 2000-token prompt
  // wait 2.2x their steady step at most (512: 1.9x, 1024: 3.0x), and 8
  // prompts of 1000 tokens all have their first token in 36.7 ms (512:
  // 41.6 ms, 1024: 35.0 ms): larger steps run their GEMMs nearer peak but
  // make every decoding sequence wait longer.
  std::uint32_t max_tokens_per_step = 768;
  // Rows a step in which no sequence decodes may hold (at most 65536; 0 or
  // at most max_tokens_per_step: that budget). Such a step delays no
  // sequence's next token, so prompts read alone take fewer, larger steps:
  // 2048 on the H100 (the same sweep: a lone 1000-token prompt is one step,
  // its first token in 4.7 ms against 5.9 in two steps of 512; 4096 gained
  // nothing). A request that arrives meanwhile waits for the step.
  std::uint32_t max_tokens_without_decodes = 2048;
  // Most prompt tokens one sequence reads in one step (0: the step's
  // budget). 1 feeds prompts a token per step.
  std::uint32_t max_chunk_tokens = 0;
  std::uint32_t max_requests = 1024;  // request-table entries
  DecoderGemm gemm = DecoderGemm::kAuto;
  std::uint32_t auto_gemv_max_bucket = 8;  // DecoderGemm::kAuto: largest bucket on the GEMV
  // DecoderGemm::kAuto: largest decode bucket on Baton's wide GEMV, above
  // auto_gemv_max_bucket (0: none, cuBLASLt there; at most 64). 16: on an
  // H100 its Llama-3.2-1B step beat cuBLASLt's at b16 (1370 against 1545 us)
  // and lost at b32 and b64 (results/h100-2026-11-27-wide-gemv.json).
  std::uint32_t auto_wide_gemv_max_bucket = 16;
  SamplingParams sampling{0.0f, 0};         // requests' default; temperature <= 0: greedy
  std::uint32_t step_clock_size = 1 << 16;  // power of two: step end stamps kept
  // The token stream (ReadStream): each entry's newest this many generated
  // tokens stay in mapped host memory (a power of two in [1, 65536]); older
  // ones a reader missed are copied from the device.
  std::uint32_t stream_window = 256;
  // Top alternatives a request's logprobs may ask for (at most kMaxLogprobs;
  // 0: logprobs off, no buffers). Each generated token's record (8 + 8 *
  // max_logprobs bytes: 168 at 20) sits beside its token in the stream's
  // window of mapped host memory: max_requests * stream_window records
  // (42 MiB at the defaults); a reader more than stream_window tokens behind
  // loses them (ReadLogprobs says so). A request with logprobs also keeps a
  // raw copy of the logits its penalties rewrite ([max_batch, vocab] of the
  // model's dtype on the device).
  std::uint32_t max_logprobs = kMaxLogprobs;
  // Called from Create's thread as the weights reach the GPU: bytes uploaded
  // so far and in all (after each tensor; a front end draws a progress bar).
  // Empty: none.
  std::function<void(std::uint64_t done, std::uint64_t total)> load_progress;
  // One rank of a tensor-parallel model (above); default: the whole model on
  // the current device. Create makes the rank's GPU (group->device(rank))
  // current on the calling thread; make it current again before any later
  // call on another thread (the step's launches, EnqueueStep and the graphs
  // captured from it, refuse another device with FailedPrecondition).
  TensorParallelOptions tensor_parallel;

  // The token policy of the step program (MakeStepProgram) these options make.
  [[nodiscard]] TokenPolicy tokens() const {
    return TokenPolicy{max_tokens_per_step, max_chunk_tokens, max_tokens_without_decodes};
  }
};

struct DecoderModelInfo {
  std::string source;                       // the checkpoint directory, or "synthetic (seed N)"
  std::string architecture;                 // "LlamaForCausalLM", ...; "synthetic"
  std::vector<std::int32_t> eos_token_ids;  // config.json's eos_token_id (empty: none)
  std::string context_limit;                // what set config().max_context
  std::uint32_t kv_page_tokens = 0;         // the KV pool: pages of this many tokens
  std::uint32_t kv_pool_pages = 0;          // pages in the pool
  std::string kv_pool_limit;                // what set kv_pool_pages
};

// The largest all-reduce a rank of `options`' model split `size` ways
// exchanges in a step, in bytes (a multiple of 16): what the ranks'
// PeerGroupOptions::max_bytes must hold. Reads a checkpoint's config.json
// (no weights); ignores options.tensor_parallel.
[[nodiscard]] absl::StatusOr<std::size_t> TensorParallelExchangeBytes(
    const DecoderModelOptions& options, int size);

class DecoderModel {
 public:
  // InvalidArgument for options out of range (names the option and the fix)
  // and for a checkpoint Baton cannot serve (names the file, the field or
  // tensor, the value and what is supported); NotFound for a missing file.
  // Every check happens before any GPU work.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DecoderModel>> Create(
      const DecoderModelOptions& options);
  ~DecoderModel();
  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  // InvalidArgument naming the field and the fix, for a request this model
  // cannot run (empty prompt, token outside the vocabulary, limits past
  // max_context, naming what set it).
  [[nodiscard]] absl::Status ValidateRequest(const DecodeRequest& request) const;

  // Writes requests into entries [first_entry, first_entry + size) and waits
  // for the copy. Nothing is written unless every request validates. An entry
  // must not be rewritten while its item is queued or active (it may be once
  // its completion was polled).
  [[nodiscard]] absl::Status WriteRequests(std::uint32_t first_entry,
                                           absl::Span<const DecodeRequest> requests);

  // The work item that runs entry `entry` as last written: it carries the
  // prompt's length (its input, by which the scheduler chunks it) and, in
  // its payload's high 32 bits, prompt + max_new_tokens (the tokens whose KV
  // pages it reserves). An entry
  // never written gives an item the device refuses (kRefusedRequest).
  [[nodiscard]] WorkItem WorkItemFor(std::uint32_t entry) const;

  // The step program to register with a Runtime: one graph per bucket on the
  // graph engines, and the device step (above) on the dynamic-parallelism
  // engine, where `buckets` only guide the scheduler. Buckets count a step's
  // rows; the largest must hold a whole step (max_tokens_per_step). Without
  // buckets: DefaultBuckets(). It carries max_batch and the token budget. The
  // program refers to this model: keep the model alive while a runtime uses
  // it.
  [[nodiscard]] StepProgram MakeStepProgram(std::vector<std::uint32_t> buckets = {});
  // Powers of two from 1 up to max_batch (and max_batch), then powers of two
  // and, from 256 on, the points halfway between them (384, 768, ...) up to
  // the largest step (the last one exactly: max_tokens_per_step or
  // max_tokens_without_decodes).
  [[nodiscard]] std::vector<std::uint32_t> DefaultBuckets() const;

  // The token stream: appends to `out` the tokens entry `entry` generated
  // from index `from` on that are visible now, and returns the index after
  // the last one appended. It never synchronizes with the loop: each token
  // becomes visible once its step has chosen it (mapped host memory written
  // by the step's last kernel); a reader that fell more than stream_window
  // tokens behind gets the missed ones copied from the device. `from` past
  // the tokens produced appends nothing.
  [[nodiscard]] absl::StatusOr<std::uint32_t> ReadStream(std::uint32_t entry, std::uint32_t from,
                                                         std::vector<std::int32_t>& out) const;

  // The log-probabilities of entry `entry`'s generated tokens [from, to)
  // (a request written with logprobs >= 0), appended to `out`: like
  // ReadStream, without synchronizing, for tokens already read from the
  // stream or counted by the completion. FailedPrecondition for a request
  // without logprobs or a token not yet generated; DataLoss when a token's
  // record left the window (the reader fell more than stream_window tokens
  // behind: raise stream_window or read more often); OutOfRange past the
  // table.
  [[nodiscard]] absl::Status ReadLogprobs(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                                          std::vector<TokenLogprobs>& out) const;

  // Ends entry `entry`'s generation early: the step that generates its next
  // token finishes the item with it, as a stop token would (its completion's
  // value counts the tokens generated; a request still reading its prompt
  // ends at its first token). No synchronization: a 4-byte memset on the
  // model's stream, seen by a step microseconds later; tokens already
  // streamed stay. WriteRequests clears it. OutOfRange past the table.
  [[nodiscard]] absl::Status Cancel(std::uint32_t entry);

  // Enqueues one step for ctx (what MakeStepProgram's enqueue does): usable
  // by a host-driven loop over the same kernels.
  [[nodiscard]] absl::Status EnqueueStep(const StepContext& ctx, cudaStream_t stream);

  // The first `count` generated tokens of an entry (count = its completion's
  // value), synchronously.
  [[nodiscard]] absl::StatusOr<std::vector<std::int32_t>> ReadGenerated(std::uint32_t entry,
                                                                        std::uint32_t count) const;

  // The logits row the last step computed at batch position `position` (of
  // the sequence's last row that step).
  [[nodiscard]] absl::StatusOr<std::vector<float>> ReadLogits(std::uint32_t position) const;

  // Global-timer stamps (ns) of steps [first, first + count), taken as each
  // step's last node (token selection, which also ends the step) starts;
  // count <= step_clock_size and the steps must be the last ones run.
  [[nodiscard]] absl::StatusOr<std::vector<std::uint64_t>> ReadStepEnds(std::uint64_t first,
                                                                        std::uint32_t count) const;

  [[nodiscard]] const DecoderModelOptions& options() const;
  // The shape the model runs: options().config for the synthetic model, the
  // checkpoint's otherwise.
  [[nodiscard]] const DecoderConfig& config() const;
  // Where the model came from: the checkpoint's architecture and end-of-text
  // tokens (for a request's stop_tokens), or the synthetic model.
  [[nodiscard]] const DecoderModelInfo& info() const;
  // Bytes of weights one step streams (the HBM floor's numerator); a
  // tensor-parallel rank's, its share's.
  [[nodiscard]] std::size_t weight_bytes() const;
  // The CUDA device the model lives on.
  [[nodiscard]] int device() const;

  class Impl;

 private:
  explicit DecoderModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Pure checks (CPU-testable).
[[nodiscard]] absl::Status ValidateDecoderModelOptions(const DecoderModelOptions& options);
[[nodiscard]] absl::Status ValidateDecodeRequest(const DecoderConfig& config,
                                                 const DecodeRequest& request);
[[nodiscard]] absl::Status ValidateSamplingParams(const SamplingParams& sampling,
                                                  absl::string_view what);

}  // namespace baton
