// decode_loop --soak_steps=N: one engine serves a continuous stream of random
// requests for at least N decode steps, entries of the request table reused
// as their completions arrive. Reports the counter balance (submitted =
// completed + in flight, then everything drained), device memory at start
// and end, and p50/p99 step time in the first and last windows (drift).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "common/report.h"

namespace baton::samples {

struct SoakOptions {
  DecoderModelOptions model;
  Engine engine = Engine::kTailLaunch;
  std::uint64_t steps = 1000000;
  std::uint32_t max_prompt = 32;
  std::uint32_t max_new = 200;
  std::uint64_t seed = 1;
};

[[nodiscard]] absl::Status RunSoak(const SoakOptions& options, Report& report);

}  // namespace baton::samples
