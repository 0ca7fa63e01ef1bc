// The drivers decode_loop times over one model or its ranks (--tp, common/
// ranks.h): the host loop (graph launch + sync per step) and each engine
// through Runtime, each running a scenario's requests to completion and
// reading back their tokens and the step clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "baton/runtime.h"
#include "common/ranks.h"
#include "decode_loop/host_loop.h"

namespace baton::samples {

struct RunResult {
  double seconds = 0;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  std::vector<double> step_us;  // consecutive step-end differences
  std::map<std::uint32_t, std::vector<std::int32_t>> tokens_by_entry;
};

struct EngineChoice {
  std::string key;  // the --engines name
  std::string label;
  bool host = false;
  Engine engine = Engine::kTailLaunch;
  std::uint32_t tail_steps_per_launch = RuntimeOptions{}.tail_steps_per_launch;
  std::uint32_t conditional_steps_per_iteration = RuntimeOptions{}.conditional_steps_per_iteration;
};

// --engines: host first (the baseline), then any of tail, tail2, conditional,
// conditional2, dp. dp only with --gemm=gemv (its device step runs Baton's
// GEMV) and at tp 1 (its lockstep is not one the tests run).
[[nodiscard]] absl::StatusOr<std::vector<EngineChoice>> ParseEngines(const std::string& text,
                                                                     const std::string& gemm,
                                                                     int tp);

// The requests (entries 0..) run to completion on the host loop over `ranks`.
[[nodiscard]] absl::StatusOr<RunResult> RunHost(ModelRanks& ranks, HostLoop& loop,
                                                const std::vector<DecodeRequest>& requests);

// The requests run to completion on `choice`'s engine, submitted at once
// after it starts, stopped (drained) after the last completion. At tp 1 the
// runtime is made once (in `runtimes`) and restarted for every run; at tp > 1
// a lockstep group runs once, so every run makes its own, and the last run's
// stay in `runtimes` (for its trace).
[[nodiscard]] absl::StatusOr<RunResult> RunEngine(ModelRanks& ranks, const RuntimeOptions& options,
                                                  const EngineChoice& choice,
                                                  const std::vector<DecodeRequest>& requests,
                                                  std::optional<RankRuntimes>& runtimes);

}  // namespace baton::samples
