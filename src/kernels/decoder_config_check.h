// Host-side check of a DecoderConfig (pure, CPU-testable).
#pragma once

#include "absl/status/status.h"
#include "baton/decoder_config.h"

namespace baton {

// OK when every kernel and cuBLASLt plan can run `config`; otherwise
// InvalidArgument naming the field, its value and the fix.
[[nodiscard]] absl::Status ValidateDecoderConfig(const DecoderConfig& config);

}  // namespace baton
