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
  std::vector<float> last_logits;  // [vocab], or empty when unknown (see FinalSequences)
};

struct ParityRun {
  std::uint32_t batch = 0;
  std::string driver;  // host, tail, tail2, conditional, conditional2, dp
  std::vector<ParitySequence> sequences;
};

// The sequences of a run that has just finished on `model`, where every
// request was admitted in the first step (entry p at batch position p) and
// decoded greedily. When every sequence ended in the run's last step (equal
// lengths read in one step), that step computed each one's final logits:
// position p's logits end entry p's tokens (their argmax, lowest index on
// ties, is its last token), and they are dumped. When sequences ended in
// different steps (prompts split into chunks of the token budget, staggered
// by admission order), the last step's rows no longer belong to them: the
// logits are left out (empty) and only the tokens are compared.
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
