// The engines every engine-parameterized test runs on: adding an engine to
// the runtime means adding one line here.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/engine.h"

namespace baton::testing {

// (The dynamic-parallelism engine runs only Baton's own device step programs,
// so tests of graph step programs cannot include it; its own tests run the
// synthetic program on every engine.)
inline std::vector<Engine> AllEngines() { return {Engine::kTailLaunch, Engine::kConditional}; }

inline std::string EngineTestName(const ::testing::TestParamInfo<Engine>& info) {
  switch (info.param) {
    case Engine::kTailLaunch:
      return "TailLaunch";
    case Engine::kConditional:
      return "Conditional";
    case Engine::kDynamicParallelism:
      return "DynamicParallelism";
  }
  return "Engine" + std::to_string(static_cast<int>(info.param));
}

}  // namespace baton::testing
