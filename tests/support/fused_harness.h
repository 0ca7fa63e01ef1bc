// A table-driven check that a fused decode kernel equals the sequence of
// separate kernels it replaces (tests/ops/decode_fused_kernels_gpu_test.cc
// holds the table). A case names its buffers, the fused launcher, the separate
// launchers, which outputs must be bit-identical and which within
// ExpectClose's bounds (where the kernel's contract says the fusion is not
// bit-identical), an optional check against the CPU reference, and whether
// the contract promises batch invariance. RunFusedCase draws the inputs once,
// runs both sides on their own outputs (poisoned) and their own copies of
// the state, and checks, for every compared buffer:
//  - outputs: every live element written by both sides, every element past
//    the live batch left poisoned by both, live elements equal (bits) or
//    close (within);
//  - states (residual stream, qkv, KV cache): every element equal between
//    the sides, rows past the live batch unchanged, and where marked, most
//    live elements changed (so that two no-ops do not pass as equal);
//  - batch invariance: positions 0 and active - 1, each run alone in a
//    bucket of 1, give the bits of their rows in the full batch.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "baton/decoder_config.h"
#include "kernels/attention/attention_split.h"
#include "kernels/decode_batch.h"

namespace baton::kernel_test {

// A buffer's rows and columns, read from the case's shape.
enum class Dim {
  kOne,
  kCapacity,  // one row per batch position
  kDModel,
  kFfn,
  kTwoFfn,  // gate | up
  kVocab,
  kOut,  // the GEMV's out_features
  kQkvWidth,
  kAttentionWidth,
  kCacheRows,  // max_slots * heads * max_context
  kHeadDim,
};

enum class Elem { kStorage, kFloat32, kToken };  // the dtype's 16 bits, fp32, int32

enum class Role {
  kInput,    // drawn once, read by both sides
  kState,    // drawn once, each side updates its own copy
  kOutput,   // poisoned, written by both sides
  kScratch,  // poisoned, an intermediate of the separate kernels (not compared)
};

enum class Match {
  kNone,    // inputs and scratch
  kBits,    // the fused kernel gives the separate kernels' bits
  kWithin,  // within ExpectClose's bounds of the separate kernels' values
};

// stddev of a weight drawn so that a GEMV over it keeps unit variance.
inline constexpr double kFanIn = -1.0;
// A sequence position drawn uniformly from [0, max_context).
inline constexpr std::int32_t kAnyPosition = -1;

struct BufferSpec {
  const char* name;
  Elem elem;
  Role role;
  Dim rows, cols;
  double stddev = 0.0;  // inputs and states: N(0, stddev); kFanIn: 1 / sqrt(cols)
  Match match = Match::kNone;
  bool must_change = false;  // states: most live elements change
};

// [rows, cols] in the storage type, N(0, stddev), shared.
BufferSpec Weight(const char* name, Dim rows, Dim cols, double stddev = 1.0);
// [capacity, cols] drawn N(0, stddev), shared.
BufferSpec Activation(const char* name, Elem elem, Dim cols, double stddev);
// [capacity] token ids uniform in [0, vocab), with planted ones: the last
// row at position 0, -1 at position 1, vocab at position active - 2 (the
// kernels give a zero row for a token outside the table).
BufferSpec Tokens(const char* name);
// Drawn N(0, stddev); each side updates its own copy; compared bit for bit.
BufferSpec State(const char* name, Elem elem, Dim rows, Dim cols, double stddev, bool must_change);
// [capacity, cols], poisoned, compared as `match` says.
BufferSpec Output(const char* name, Elem elem, Dim cols, Match match);
// [capacity, cols] in the storage type, poisoned, not compared.
BufferSpec Scratch(const char* name, Dim cols);

// The dimensions a case runs with; zero fields keep DecoderConfig's defaults.
struct FusedShape {
  std::uint32_t capacity = 1, active = 1;
  int d_model = 0, ffn = 0, vocab = 0, out_features = 0;
  int heads = 0, head_dim = 0, max_context = 0;
  std::vector<std::int32_t> positions;  // by batch position (attention)

  FusedShape DModel(int v) const;
  FusedShape Ffn(int v) const;
  FusedShape Vocab(int v) const;
  FusedShape Out(int v) const;
  FusedShape Attention(int heads, int head_dim, int max_context,
                       std::vector<std::int32_t> positions) const;

  [[nodiscard]] DecoderConfig Config(DecoderDType dtype) const;
  [[nodiscard]] std::uint32_t MaxSlots() const;
  [[nodiscard]] std::size_t Size(Dim dim) const;
  [[nodiscard]] std::string Name() const;  // e.g. "vocab1000_d264_b6of7"
};
// A shape of `capacity` positions, the first `active` live.
FusedShape Batch(std::uint32_t capacity, std::uint32_t active);

// What a launcher of the table sees: the config, the batch, the stream and
// its side's buffers by name.
class Launch {
 public:
  Launch(const DecoderConfig& config, int out_features, DecodeBatch batch, cudaStream_t stream,
         const std::map<std::string, void*>& buffers)
      : config(config),
        dtype(config.dtype),
        out_features(out_features),
        batch(batch),
        stream(stream),
        buffers_(buffers) {}
  const DecoderConfig& config;
  DecoderDType dtype;
  int out_features;
  DecodeBatch batch;
  cudaStream_t stream;
  AttentionScratch scratch;  // the split attention's (SplitScratch), for every launch alike

  void* operator[](const std::string& name) const;  // fails the test for an unknown name
  [[nodiscard]] float* f32(const std::string& name) const;
  [[nodiscard]] const std::int32_t* tokens(const std::string& name) const;
  [[nodiscard]] KvCacheLayer cache() const;  // "keys" and "values"

 private:
  const std::map<std::string, void*>& buffers_;
};
using LaunchFn = cudaError_t (*)(const Launch&);

// A buffer on the host: raw elements of its Elem, [rows, cols].
struct HostBuffer {
  Elem elem = Elem::kStorage;
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> bytes;

  template <class T>
  [[nodiscard]] std::vector<T> As() const {
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
  [[nodiscard]] std::size_t element_bytes() const { return elem == Elem::kStorage ? 2 : 4; }
  [[nodiscard]] std::size_t elements() const { return rows * cols; }
  // Element i as a number (storage and fp32 values, token ids).
  [[nodiscard]] double Value(std::size_t i, DecoderDType dtype) const;
  [[nodiscard]] std::vector<float> Floats(DecoderDType dtype) const;
};

// A finished run, for a case's reference check.
struct FusedResult {
  std::string key;  // the case's key, for ExpectClose
  const FusedShape& shape;
  DecoderDType dtype;
  DecoderConfig config;
  std::map<std::string, HostBuffer> initial;  // inputs and states as drawn
  std::map<std::string, HostBuffer> fused;    // states and outputs after the fused kernel
};
using ReferenceFn = void (*)(const FusedResult&);

struct FusedCase {
  const char* name;  // the test's name, e.g. "GatedGemv"
  const char* key;   // ExpectClose's keys, e.g. "gated_gemv"
  std::vector<BufferSpec> buffers;
  LaunchFn fused;
  std::vector<LaunchFn> separate;
  ReferenceFn reference;  // the fused outputs against the CPU reference; may be null
  bool batch_invariant;   // the contract promises it
  std::vector<FusedShape> shapes;
};

// One test per (case, shape, dtype).
struct FusedParam {
  const FusedCase* fused_case;
  std::size_t shape;
  DecoderDType dtype;
};
[[nodiscard]] std::vector<FusedParam> FusedParams(const std::vector<FusedCase>& cases);
// "<case>_<shape>_<dtype>", e.g. "GatedGemv_ffn2824_out777_b10of11_fp16".
[[nodiscard]] std::string FusedParamName(const ::testing::TestParamInfo<FusedParam>& info);
void PrintTo(const FusedParam& param, std::ostream* os);

void RunFusedCase(const FusedCase& fused_case, const FusedShape& shape, DecoderDType dtype,
                  cudaStream_t stream);

}  // namespace baton::kernel_test
