// decode_loop --parity_out=PREFIX: what scripts/checkpoints/parity.py compares
// with transformers. Per (batch, driver) run, every sequence's prompt, its
// generated tokens and the logits of the step that produced its last token.
//
//   PREFIX.json        {"checkpoint", "dtype": "bf16"|"fp16", "vocab", "logits_file",
//                       "runs": [{"batch", "driver", "sequences": [{"entry", "prompt",
//                       "generated", "logits_row"}]}]}
//   PREFIX.logits.f32  float32 little-endian rows of `vocab` values
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/decoder_model.h"

namespace baton::samples {

struct ParitySequence {
  std::uint32_t entry = 0;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> generated;
  std::vector<float> last_logits;  // [vocab]
};

struct ParityRun {
  std::uint32_t batch = 0;
  std::string driver;  // host, tail, tail2, conditional, conditional2, dp
  std::vector<ParitySequence> sequences;
};

// The sequences of a run that has just finished on `model`, where every
// request was admitted in the first step (entry p at batch position p), had
// the same length and decoded greedily, so that the last step computed every
// sequence's final logits. Checks that position p's logits end entry p's
// tokens (their argmax, lowest index on ties, is its last token) and says so
// when they do not.
[[nodiscard]] absl::StatusOr<std::vector<ParitySequence>> FinalSequences(
    const DecoderModel& model, const std::vector<DecodeRequest>& requests,
    const std::vector<std::vector<std::int32_t>>& generated);

struct ParityDump {
  std::string checkpoint;
  DecoderDType dtype = DecoderDType::kBFloat16;  // as the model served it
  std::uint32_t vocab = 0;
  std::vector<ParityRun> runs;
};

// Writes PREFIX.json and PREFIX.logits.f32.
[[nodiscard]] absl::Status WriteParityDump(const std::string& prefix, const ParityDump& dump);

}  // namespace baton::samples
