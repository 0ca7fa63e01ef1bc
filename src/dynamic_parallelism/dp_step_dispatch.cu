#include "dp_step_launch.cuh"

namespace baton::detail {

__device__ DeviceStepLaunch launch_device_step(const DeviceStepProgram& step, const StepArgs& args,
                                               std::uint32_t batch) {
  switch (step.kind) {
    case DeviceStepKind::kSynthetic:
      return launch_synthetic_step(args, step.params, batch);
    case DeviceStepKind::kDecoder:
      return launch_decoder_step(args, step.params, batch);
    case DeviceStepKind::kNone:
      break;
  }
  DeviceStepLaunch unknown;
  unknown.known_kind = false;
  return unknown;
}

}  // namespace baton::detail
