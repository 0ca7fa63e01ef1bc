// The soak's token check. Counting completions cannot tell a device that
// ignores stop tokens, mixes up sequences or samples with the wrong key from
// a correct one; comparing the tokens with a reference can. Every
// check_every-th submitted request is checked:
//   - its tokens must obey its limits: no stop token before the last one, and
//     a stop token last whenever it ended before max_new_tokens;
//   - every other checked request repeats an earlier checked request that ran
//     to its limit (same prompt, sampling and sequence id, so the same
//     tokens) with one of that request's tokens as its only stop token: it
//     must end exactly at that token's first occurrence, which the host
//     computes, so the stop path is exercised and judged independently of
//     the kernels;
//   - after the soak, a host-driven loop (HostLoop) over the same model
//     replays every checked request and must produce the same tokens.
// Tokens depend only on the weights, the prompt and (seed, sequence id,
// token index) when the GEMMs are batch-invariant (DecoderGemm::kBatonGemv),
// so the replays and repeats must agree although their batches differ.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "baton/decoder_model.h"

namespace baton::samples {

class SoakChecker {
 public:
  // check_every >= 1; `entries`: the request table's entries.
  SoakChecker(std::uint64_t check_every, std::uint32_t entries);

  // Before request number `index` (0, 1, ... in submission order) is written
  // into `entry`: when it is to be checked, remembers it, and every other
  // time turns it into a repeat of an earlier checked request.
  void OnSubmit(std::uint64_t index, std::uint32_t entry, std::mt19937_64& rng,
                DecodeRequest& request);
  // Whether the completion of `entry` is checked (then read its tokens).
  [[nodiscard]] bool Wants(std::uint32_t entry) const { return pending_[entry].has_value(); }
  // The checked request in `entry` completed with `tokens`.
  void OnComplete(std::uint32_t entry, std::vector<std::int32_t> tokens);
  // The request in `entry` completed wrongly (counted elsewhere): not checked.
  void Forget(std::uint32_t entry) { pending_[entry].reset(); }

  // After the engine stopped: replays every checked request, up to the
  // request table's size at a time, in a host loop over `model` (which must
  // be idle) with the model's own step program.
  [[nodiscard]] absl::Status Replay(DecoderModel& model);

  [[nodiscard]] std::uint64_t checked() const { return records_.size(); }
  [[nodiscard]] std::uint64_t repeats() const { return repeats_; }  // stop-token repeats
  [[nodiscard]] std::uint64_t mismatched() const { return mismatched_; }
  [[nodiscard]] std::uint64_t tokens() const { return tokens_; }  // tokens checked
  // The first few mismatches, one line each.
  [[nodiscard]] const std::vector<std::string>& examples() const { return examples_; }

 private:
  struct Record {
    std::uint64_t index = 0;  // submission number
    DecodeRequest request;
    bool repeat = false;
    std::vector<std::int32_t> expected;  // a repeat's tokens, computed on the host
    std::vector<std::int32_t> tokens;    // what the engine generated
    bool mismatched = false;
  };
  void Mismatch(Record& record, const std::string& what);

  std::uint64_t check_every_;
  std::vector<std::optional<Record>> pending_;  // by entry
  std::vector<Record> records_;                 // completed checked requests
  std::optional<Record> repeat_source_;         // the last one that ran to its limit
  bool repeat_next_ = false;
  std::uint64_t repeats_ = 0;
  std::uint64_t mismatched_ = 0;
  std::uint64_t tokens_ = 0;
  std::vector<std::string> examples_;
};

}  // namespace baton::samples
