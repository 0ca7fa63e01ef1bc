// The logit rules of SamplingParams' penalties (baton/decoder_config.h),
// written once for the device (token selection's adjust, frame/
// step_frame_body.cuh). vLLM's order (its apply_penalties): the repetition
// penalty on every token of the prompt or generated, then the frequency and
// presence penalties on the generated ones. Plain C++ for host and device;
// the tests' reference (tests/support/decoder_runs.cc) restates it in double
// from the definitions, not from this file.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "frame/request_table.h"

namespace baton::detail {

// `counts` is the slot's word for the token (kInPrompt | generated count).
BATON_HOST_DEVICE inline float PenalizedLogit(float logit, std::uint32_t counts, float presence,
                                              float frequency, float repetition) {
  if (counts == 0) return logit;
  logit = logit > 0.0f ? logit / repetition : logit * repetition;
  const std::uint32_t generated = counts & kGeneratedCount;
  return generated == 0 ? logit
                        : logit - frequency * static_cast<float>(generated) - presence;
}

}  // namespace baton::detail
