// decode_loop --soak_steps=N: one engine serves a continuous stream of random
// requests (random prompts, limits, stop tokens; greedy, the model's sampling
// or their own seed) for at least N decode steps, entries of the request
// table reused as their completions arrive. Reports the counter balance
// (submitted = completed + in flight, then everything drained), the tokens of
// every check_every-th request checked against a reference (soak_check.h),
// device memory at start and end, and p50/p99 step time in the first and last
// windows (drift).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "common/report.h"

namespace baton::samples {

struct SoakOptions {
  DecoderModelOptions model;  // gemm must be kBatonGemv (the check needs batch invariance)
  Engine engine = Engine::kTailLaunch;
  std::uint64_t steps = 1000000;
  std::uint32_t max_prompt = 32;
  std::uint32_t max_new = 200;
  std::uint64_t seed = 1;
  std::uint64_t check_every = 256;  // >= 1: every this many requests' tokens are checked
};

[[nodiscard]] absl::Status RunSoak(const SoakOptions& options, Report& report);

}  // namespace baton::samples
