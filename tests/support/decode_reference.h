// CPU references of the decode-step kernels (src/ops), in
// double from the same 16-bit inputs the device reads, plus a host
// re-implementation of the curand Philox mapping ops::Select::sample documents.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/decoder_config.h"

namespace baton::reference {

[[nodiscard]] std::vector<float> ToFloat(const std::vector<std::uint16_t>& bits,
                                         DecoderDType dtype);

// ‖out − ref‖₂ / ‖ref‖₂ (the tolerance measure every kernel test states).
[[nodiscard]] double RelativeError(const std::vector<double>& out, const std::vector<double>& ref);

[[nodiscard]] std::vector<double> RmsNorm(const float* x, const float* weight, int n, double eps);

// Rotates pairs (2i, 2i+1) of one head in place by pos * theta^(-2i/head_dim).
void Rope(double* head, int head_dim, int pos, double theta);
// The same with the kernels' frequency table (kernels/rope.h): pair i turns
// by pos * inv_freq[i], computed in double.
void Rope(double* head, int head_dim, int pos, const std::vector<float>& inv_freq);

// softmax(q · Kᵀ / sqrt(head_dim)) · V for one head; keys/values [context, head_dim].
[[nodiscard]] std::vector<double> Attention(const std::vector<double>& q,
                                            const std::vector<double>& keys,
                                            const std::vector<double>& values, int head_dim);

[[nodiscard]] double SiluMul(double gate, double up);

// y = W x, W [out, in] row-major.
[[nodiscard]] std::vector<double> Gemv(const float* w, const float* x, int out_features,
                                       int in_features);

// Greedy rule: NaN as -inf, ties to the lowest index.
[[nodiscard]] int Argmax(const float* logits, int vocab);

// The 32 bits curand() returns first after curand_init(seed, subsequence,
// offset, &philox_state): Philox4x32-10 with key = seed, counter =
// (offset / 4 as 64 bits, subsequence as 64 bits), word offset % 4.
[[nodiscard]] std::uint32_t PhiloxBits(std::uint64_t seed, std::uint64_t subsequence,
                                       std::uint64_t offset);

// ops::Select::sample's Gumbel-max scores of one row: logit / T - log(-log(u_i)).
[[nodiscard]] std::vector<double> SampleScores(const float* logits, int vocab, double temperature,
                                               std::uint64_t seed, std::uint64_t sequence,
                                               std::uint32_t step);

// ops::Select::sample_positions' semantics (src/ops), in double from
// the stored 16-bit logits of one row.
//
// The order-preserving key of a stored logit: a larger logit, a larger key;
// NaN gets -inf's key, -0 gets +0's.
[[nodiscard]] std::uint16_t LogitKey(std::uint16_t bits, DecoderDType dtype);
// The logit a key stands for.
[[nodiscard]] double KeyLogit(std::uint16_t key, DecoderDType dtype);

struct TokenSampling {
  double temperature = 0.0;  // <= 0: greedy
  std::uint32_t top_k = 0;   // 0 or >= vocab: off
  double top_p = 1.0;        // >= 1: off
  std::uint64_t seed = 0;
  std::uint64_t sequence = 0;
  std::uint32_t step = 0;
};

// The survivors of top-k then top-p are the tokens whose key >= a threshold.
// `exact` decides every key group by its normalized mass above (in double)
// against P. Groups whose mass above lies within `margin` of P may be decided
// either way by a device summing in other precision: `loose` keeps all of
// them, `strict` none (loose <= exact <= strict); between them lie the
// thresholds a correct device may use. `ambiguous` says loose != strict.
// Unfiltered rows (T <= 0, or no top-k and no top-p) get 0: every token.
struct SamplingThresholds {
  std::uint16_t loose = 0;
  std::uint16_t exact = 0;
  std::uint16_t strict = 0;
  bool ambiguous = false;
};
[[nodiscard]] SamplingThresholds SamplingFilter(const std::uint16_t* logits, int vocab,
                                                DecoderDType dtype, const TokenSampling& sampling,
                                                double margin);

// The argmax of scores[i] over tokens whose key >= threshold, ties to the
// lowest index; -1 when none survives.
[[nodiscard]] int BestSurvivor(const std::uint16_t* logits, int vocab, DecoderDType dtype,
                               const std::vector<double>& scores, std::uint16_t threshold);

// The token the semantics choose: Argmax for T <= 0, else the Gumbel-max
// (SampleScores) over the survivors of SamplingFilter's exact threshold.
[[nodiscard]] int SampleToken(const std::uint16_t* logits, int vocab, DecoderDType dtype,
                              const TokenSampling& sampling);

}  // namespace baton::reference
