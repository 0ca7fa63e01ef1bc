#include "support/decode_reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "kernels/half_bits.h"

namespace baton::reference {

std::vector<float> ToFloat(const std::vector<std::uint16_t>& bits, DecoderDType dtype) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = HalfBitsToFloat(bits[i], dtype);
  return out;
}

double RelativeError(const std::vector<double>& out, const std::vector<double>& ref) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  return std::sqrt(diff) / std::sqrt(norm);  // NaN (poison) stays NaN and fails any bound
}

std::vector<double> RmsNorm(const float* x, const float* weight, int n, double eps) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / n + eps);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
  return out;
}

void Rope(double* head, int head_dim, int pos, double theta) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = head[2 * i], b = head[2 * i + 1];
    head[2 * i] = a * c - b * s;
    head[2 * i + 1] = a * s + b * c;
  }
}

void Rope(double* head, int head_dim, int pos, const std::vector<float>& inv_freq) {
  for (int i = 0; i < head_dim / 2; ++i) {
    // The angle as transformers and the kernels form it: the fp32 product
    // of position and frequency (its rounding grows with pos: ~1e-3 rad at
    // 40,000); the rotation itself in double.
    const double angle = static_cast<float>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = head[2 * i], b = head[2 * i + 1];
    head[2 * i] = a * c - b * s;
    head[2 * i + 1] = a * s + b * c;
  }
}

std::vector<double> Attention(const std::vector<double>& q, const std::vector<double>& keys,
                              const std::vector<double>& values, int head_dim) {
  const int context = static_cast<int>(keys.size() / head_dim);
  std::vector<double> scores(context);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int t = 0; t < context; ++t) {
    double dot = 0.0;
    for (int d = 0; d < head_dim; ++d)
      dot += q[d] * keys[static_cast<std::size_t>(t) * head_dim + d];
    scores[t] = dot / std::sqrt(static_cast<double>(head_dim));
    max_score = std::max(max_score, scores[t]);
  }
  double sum = 0.0;
  for (double& s : scores) sum += (s = std::exp(s - max_score));
  std::vector<double> out(head_dim, 0.0);
  for (int t = 0; t < context; ++t) {
    for (int d = 0; d < head_dim; ++d) {
      out[d] += scores[t] / sum * values[static_cast<std::size_t>(t) * head_dim + d];
    }
  }
  return out;
}

double SiluMul(double gate, double up) { return gate / (1.0 + std::exp(-gate)) * up; }

std::vector<double> Gemv(const float* w, const float* x, int out_features, int in_features) {
  std::vector<double> y(out_features, 0.0);
  for (int r = 0; r < out_features; ++r) {
    double acc = 0.0;
    for (int k = 0; k < in_features; ++k) {
      acc += static_cast<double>(w[static_cast<std::size_t>(r) * in_features + k]) * x[k];
    }
    y[r] = acc;
  }
  return y;
}

int Argmax(const float* logits, int vocab) {
  int best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    const float v = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
    if (v > best_value) {
      best_value = v;
      best = i;
    }
  }
  return best;
}

std::uint32_t PhiloxBits(std::uint64_t seed, std::uint64_t subsequence, std::uint64_t offset) {
  const std::uint64_t block = offset / 4;
  std::uint32_t ctr[4] = {
      static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
      static_cast<std::uint32_t>(subsequence), static_cast<std::uint32_t>(subsequence >> 32)};
  std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * ctr[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32),
                        lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32),
                        lo1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t next[4] = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    std::copy(next, next + 4, ctr);
  }
  return ctr[offset % 4];
}

std::vector<double> SampleScores(const float* logits, int vocab, double temperature,
                                 std::uint64_t seed, std::uint64_t sequence, std::uint32_t step) {
  std::vector<double> scores(vocab);
  for (int i = 0; i < vocab; ++i) {
    const std::uint32_t bits =
        PhiloxBits(seed, sequence, static_cast<std::uint64_t>(step) * vocab + i);
    const double u = ((bits >> 9) + 0.5) * 0x1.0p-23;
    const double logit =
        std::isnan(logits[i]) ? -std::numeric_limits<double>::infinity() : logits[i];
    scores[i] = logit / temperature - std::log(-std::log(u));
  }
  return scores;
}

std::uint16_t LogitKey(std::uint16_t bits, DecoderDType dtype) {
  const unsigned infinity = dtype == DecoderDType::kFloat16 ? 0x7C00u : 0x7F80u;
  unsigned b = bits;
  if ((b & 0x7FFFu) > infinity) b = 0x8000u | infinity;  // NaN as -inf
  if ((b & 0x7FFFu) == 0) b = 0;                         // -0 as +0
  return static_cast<std::uint16_t>((b & 0x8000u) != 0 ? ~b & 0xFFFFu : b | 0x8000u);
}

double KeyLogit(std::uint16_t key, DecoderDType dtype) {
  const unsigned bits =
      (key & 0x8000u) != 0 ? key & 0x7FFFu : ~static_cast<unsigned>(key) & 0xFFFFu;
  return HalfBitsToFloat(static_cast<std::uint16_t>(bits), dtype);
}

SamplingThresholds SamplingFilter(const std::uint16_t* logits, int vocab, DecoderDType dtype,
                                  const TokenSampling& sampling, double margin) {
  SamplingThresholds out;
  const bool by_k = sampling.top_k > 0 && sampling.top_k < static_cast<std::uint32_t>(vocab);
  const bool by_p = sampling.top_p < 1.0;
  if (!(sampling.temperature > 0.0) || (!by_k && !by_p)) return out;
  std::vector<std::uint16_t> keys(vocab);
  for (int i = 0; i < vocab; ++i) keys[i] = LogitKey(logits[i], dtype);
  // Top-k: the K-th largest key, counting multiplicity.
  std::uint16_t theta_k = 0;
  if (by_k) {
    std::vector<std::uint16_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    theta_k = sorted[sampling.top_k - 1];
  }
  out.loose = out.exact = out.strict = theta_k;
  if (!by_p) return out;
  // Top-p over the kept tokens, a key group at a time from the top.
  std::map<std::uint16_t, int, std::greater<>> groups;  // key -> kept tokens with it
  for (std::uint16_t key : keys) {
    if (key >= theta_k) ++groups[key];
  }
  const std::uint16_t max_key = groups.begin()->first;
  const double max_logit = KeyLogit(max_key, dtype);
  std::vector<double> group_mass;
  double total = 0.0;
  for (const auto& [key, count] : groups) {
    const double w =
        key == max_key ? 1.0 : std::exp((KeyLogit(key, dtype) - max_logit) / sampling.temperature);
    group_mass.push_back(count * w);
    total += count * w;
  }
  double above = 0.0;
  std::size_t g = 0;
  for (const auto& group : groups) {
    const double a = above / total;
    if (above == 0.0 || a < sampling.top_p + margin) out.loose = group.first;
    if (above == 0.0 || a < sampling.top_p) out.exact = group.first;
    if (above == 0.0 || a < sampling.top_p - margin) out.strict = group.first;
    above += group_mass[g++];
  }
  out.ambiguous = out.loose != out.strict;
  return out;
}

int BestSurvivor(const std::uint16_t* logits, int vocab, DecoderDType dtype,
                 const std::vector<double>& scores, std::uint16_t threshold) {
  int best = -1;
  for (int i = 0; i < vocab; ++i) {
    if (LogitKey(logits[i], dtype) < threshold) continue;
    if (best < 0 || scores[i] > scores[best]) best = i;
  }
  return best;
}

int SampleToken(const std::uint16_t* logits, int vocab, DecoderDType dtype,
                const TokenSampling& sampling) {
  std::vector<float> f(vocab);
  for (int i = 0; i < vocab; ++i) f[i] = HalfBitsToFloat(logits[i], dtype);
  if (!(sampling.temperature > 0.0)) return Argmax(f.data(), vocab);
  const std::vector<double> scores = SampleScores(f.data(), vocab, sampling.temperature,
                                                  sampling.seed, sampling.sequence, sampling.step);
  const SamplingThresholds thresholds = SamplingFilter(logits, vocab, dtype, sampling, 0.0);
  return BestSurvivor(logits, vocab, dtype, scores, thresholds.exact);
}

}  // namespace baton::reference
