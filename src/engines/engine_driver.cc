#include "engines/engine_driver.h"

namespace baton::detail {

// Each engine's own file (tail_launch_engine.cc, conditional_engine.cc,
// dynamic_parallelism_engine.cc) defines its maker.
std::unique_ptr<EngineDriver> CreateTailLaunchEngine();
std::unique_ptr<EngineDriver> CreateConditionalEngine();
std::unique_ptr<EngineDriver> CreateDynamicParallelismEngine();

std::unique_ptr<EngineDriver> CreateEngineDriver(Engine engine) {
  switch (engine) {
    case Engine::kTailLaunch:
      return CreateTailLaunchEngine();
    case Engine::kConditional:
      return CreateConditionalEngine();
    case Engine::kDynamicParallelism:
      return CreateDynamicParallelismEngine();
  }
  return nullptr;
}

}  // namespace baton::detail
