#include "kernels/rope.h"

#include <cmath>

namespace baton {

std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> out(half > 0 ? static_cast<std::size_t>(half) : 0);
  constexpr double kPi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(static_cast<double>(rope.theta), (2.0 * i) / head_dim);
    if (rope.scaling == RopeScalingType::kLinear) {
      inv /= rope.factor;
    } else if (rope.scaling == RopeScalingType::kLlama3) {
      // transformers' _compute_llama3_parameters.
      const double original = rope.original_max_position_embeddings;
      const double low_freq_wavelen = original / rope.low_freq_factor;
      const double high_freq_wavelen = original / rope.high_freq_factor;
      const double wavelen = 2.0 * kPi / inv;
      if (wavelen > low_freq_wavelen) {
        inv /= rope.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (original / wavelen - rope.low_freq_factor) /
                              (rope.high_freq_factor - rope.low_freq_factor);
        inv = (1.0 - smooth) * inv / rope.factor + smooth * inv;
      }
    }
    out[static_cast<std::size_t>(i)] = static_cast<float>(inv);
  }
  return out;
}

}  // namespace baton
