// A device step program: a step the dynamic-parallelism engine can launch
// from device code. Device code can launch only kernels linked into the same
// device link, so these are Baton's own step programs (in
// src/dynamic_parallelism), selected by kind; a StepProgram names one in
// StepProgram::device_step. Abseil-free: the device scheduler includes it.
//
// Adding a kind: one enumerator here, one `case` in dp_step_dispatch.cu, and
// one __device__ launch function (dp_step_launch.cuh) in its own .cu file.
#pragma once

#include <cstdint>

#include "baton/config.h"

namespace baton {

enum class DeviceStepKind : std::uint32_t {
  kNone = 0,       // no device step: the dynamic-parallelism engine refuses to start
  kSynthetic = 1,  // K tiny kernels per step (baton/synthetic_step.h)
  kDecoder = 2,    // the decoder model's step (baton/decoder_model.h, GEMV projections)
};

struct DeviceStepProgram {
  DeviceStepKind kind = DeviceStepKind::kNone;
  const void* params = nullptr;  // DEVICE pointer to the kind's parameter struct
  // Largest RuntimeOptions::max_batch the params serve (e.g. per-slot state
  // sized for it); 0 means any.
  std::uint32_t max_batch = 0;

  [[nodiscard]] BATON_HOST_DEVICE constexpr bool is_valid() const {
    return kind != DeviceStepKind::kNone && params != nullptr;
  }
};

}  // namespace baton
