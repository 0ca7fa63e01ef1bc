// The rotary embedding's inverse frequencies, the table the attention kernels
// read (ops/attention.h, ops/rope_append.h). Host code, pure.
#pragma once

#include <vector>

#include "baton/decoder_config.h"

namespace baton {

// head_dim / 2 values: inv_freq[i] = theta^(-2i / head_dim), then scaled as
// transformers scales them: "linear" divides every frequency by factor;
// "llama3" (Llama 3.1/3.2) divides those whose wavelength 2π / inv_freq
// exceeds original_max_position_embeddings / low_freq_factor, keeps those
// below original / high_freq_factor and blends in between. Computed in double,
// rounded once to float.
[[nodiscard]] std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim);

}  // namespace baton
