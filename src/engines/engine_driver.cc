#include "engines/engine_driver.h"

#include "baton/status.h"

namespace baton::detail {

absl::Status EngineDriver::Prepare(const StepProgram& program, const EngineSetup& setup) {
  if (prepared_) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(Build(program, setup));
  prepared_ = true;
  return absl::OkStatus();
}

absl::StatusOr<DeviceBucketTable> UploadBucketSizes(absl::Span<const DeviceBucketEntry> entries,
                                                    DeviceBuffer<DeviceBucketEntry>& storage) {
  BATON_ASSIGN_OR_RETURN(storage, DeviceBuffer<DeviceBucketEntry>::Create(entries.size()));
  BATON_RETURN_IF_ERROR(storage.CopyFrom(entries));
  return DeviceBucketTable{storage.data(), static_cast<std::uint32_t>(entries.size())};
}

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
