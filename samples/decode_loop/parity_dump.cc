#include "decode_loop/parity_dump.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "nlohmann/json.hpp"

namespace baton::samples {

absl::StatusOr<std::vector<ParitySequence>> FinalSequences(
    const DecoderModel& model, const std::vector<DecodeRequest>& requests,
    const std::vector<std::vector<std::int32_t>>& generated) {
  if (generated.size() != requests.size()) {
    return absl::InternalError(absl::StrCat("parity dump: ", generated.size(),
                                            " generated sequences for ", requests.size(),
                                            " requests"));
  }
  std::vector<ParitySequence> out;
  bool all_ended_last = true;
  for (std::uint32_t p = 0; p < requests.size(); ++p) {
    ParitySequence s;
    s.entry = p;
    s.prompt = requests[p].prompt;
    s.generated = generated[p];
    if (s.generated.size() != requests[p].max_new_tokens) {
      return absl::InternalError(absl::StrCat("parity dump: entry ", p, " generated ",
                                              s.generated.size(), " tokens, not ",
                                              requests[p].max_new_tokens));
    }
    BATON_ASSIGN_OR_RETURN(s.last_logits, model.ReadLogits(p));
    const auto best = std::max_element(s.last_logits.begin(), s.last_logits.end());
    all_ended_last = all_ended_last && static_cast<std::int32_t>(best - s.last_logits.begin()) ==
                                           s.generated.back();
    out.push_back(std::move(s));
  }
  if (!all_ended_last) {
    for (ParitySequence& s : out) s.last_logits.clear();
  }
  return out;
}

absl::Status WriteParityDump(const std::string& prefix, const ParityDump& dump) {
  const std::uint32_t vocab = dump.vocab;
  const std::string logits_path = prefix + ".logits.f32";
  std::ofstream logits(logits_path, std::ios::binary);
  if (!logits) {
    return absl::InvalidArgumentError(
        absl::StrCat("--parity_out: cannot open ", logits_path, " for writing"));
  }
  nlohmann::ordered_json json = {{"checkpoint", dump.checkpoint},
                                 {"dtype", dump.dtype == DecoderDType::kBFloat16 ? "bf16" : "fp16"},
                                 {"vocab", vocab},
                                 {"logits_file", logits_path},
                                 {"runs", nlohmann::ordered_json::array()}};
  std::int64_t row = 0;
  for (const ParityRun& run : dump.runs) {
    nlohmann::ordered_json sequences = nlohmann::ordered_json::array();
    for (const ParitySequence& s : run.sequences) {
      if (s.last_logits.empty()) {  // ended before the last step: tokens only
        sequences.push_back({{"entry", s.entry},
                             {"prompt", s.prompt},
                             {"generated", s.generated},
                             {"logits_row", nullptr}});
        continue;
      }
      if (s.last_logits.size() != vocab) {
        return absl::InternalError(absl::StrCat("parity dump: entry ", s.entry, " has ",
                                                s.last_logits.size(), " logits, not ", vocab));
      }
      // The machines Baton runs on are little-endian, as the format says.
      logits.write(reinterpret_cast<const char*>(s.last_logits.data()),
                   static_cast<std::streamsize>(s.last_logits.size() * sizeof(float)));
      sequences.push_back({{"entry", s.entry},
                           {"prompt", s.prompt},
                           {"generated", s.generated},
                           {"logits_row", row++}});
    }
    json["runs"].push_back(
        {{"batch", run.batch}, {"driver", run.driver}, {"sequences", std::move(sequences)}});
  }
  logits.close();
  if (!logits.good()) {
    return absl::DataLossError(absl::StrCat("--parity_out: writing ", logits_path, " failed"));
  }
  const std::string json_path = prefix + ".json";
  std::ofstream file(json_path);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--parity_out: cannot open ", json_path, " for writing"));
  }
  file << json.dump() << "\n";
  if (!file.good()) {
    return absl::DataLossError(absl::StrCat("--parity_out: writing ", json_path, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace baton::samples
