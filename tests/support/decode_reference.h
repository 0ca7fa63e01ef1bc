// CPU references of the decode-step kernels (baton/decode_kernels.h), in
// double from the same 16-bit inputs the device reads, plus a host
// re-implementation of the curand Philox mapping EnqueueSample documents.
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

// EnqueueSample's Gumbel-max scores of one row: logit / T - log(-log(u_i)).
[[nodiscard]] std::vector<double> SampleScores(const float* logits, int vocab, double temperature,
                                               std::uint64_t seed, std::uint64_t sequence,
                                               std::uint32_t step);

}  // namespace baton::reference
