#include "decode_loop/soak_check.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/bucket_table.h"
#include "baton/status.h"
#include "decode_loop/host_loop.h"

namespace baton::samples {
namespace {

bool IsStop(const DecodeRequest& request, std::int32_t token) {
  return std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) !=
         request.stop_tokens.end();
}

// "37 tokens, the reference 12, first difference at token 5".
std::string Difference(const std::vector<std::int32_t>& got,
                       const std::vector<std::int32_t>& reference) {
  const std::size_t common = std::min(got.size(), reference.size());
  const std::size_t at =
      std::mismatch(got.begin(), got.begin() + common, reference.begin()).first - got.begin();
  return absl::StrCat(got.size(), " tokens, the reference ", reference.size(),
                      ", first difference at token ", at);
}

}  // namespace

SoakChecker::SoakChecker(std::uint64_t check_every, std::uint32_t entries)
    : check_every_(std::max<std::uint64_t>(check_every, 1)), pending_(entries) {}

void SoakChecker::OnSubmit(std::uint64_t index, std::uint32_t entry, std::mt19937_64& rng,
                           DecodeRequest& request) {
  pending_[entry].reset();
  if (index % check_every_ != 0) return;
  Record record;
  record.index = index;
  if (repeat_source_.has_value()) {
    const Record& source = *repeat_source_;
    // Any of its tokens but the last, so the repeat ends before its limit:
    // at that token's first occurrence.
    const std::size_t pick =
        std::uniform_int_distribution<std::size_t>(0, source.tokens.size() - 2)(rng);
    const std::int32_t stop = source.tokens[pick];
    const auto end = std::find(source.tokens.begin(), source.tokens.end(), stop) + 1;
    request.prompt = source.request.prompt;
    request.max_new_tokens = source.request.max_new_tokens;
    request.sampling = source.request.sampling;
    request.sequence_id = source.request.sequence_id;  // the same sampling key
    request.stop_tokens = {stop};
    record.repeat = true;
    record.expected.assign(source.tokens.begin(), end);
    repeat_source_.reset();
  }
  record.request = request;
  pending_[entry] = std::move(record);
}

void SoakChecker::Mismatch(Record& record, const std::string& what) {
  if (!record.mismatched) {
    record.mismatched = true;
    ++mismatched_;
  }
  if (examples_.size() < 5) {
    examples_.push_back(absl::StrCat("request #", record.index, " (sequence id ",
                                     record.request.sequence_id,
                                     record.repeat ? ", stop-token repeat" : "", "): ", what));
  }
}

void SoakChecker::OnComplete(std::uint32_t entry, std::vector<std::int32_t> tokens) {
  if (!pending_[entry].has_value()) return;
  Record record = std::move(*pending_[entry]);
  pending_[entry].reset();
  record.tokens = std::move(tokens);
  tokens_ += record.tokens.size();
  const DecodeRequest& r = record.request;
  const std::vector<std::int32_t>& t = record.tokens;
  if (t.empty() || t.size() > r.max_new_tokens) {
    Mismatch(record, absl::StrCat(t.size(), " tokens for a limit of ", r.max_new_tokens));
  } else {
    const auto first_stop =
        std::find_if(t.begin(), t.end() - 1, [&](std::int32_t token) { return IsStop(r, token); });
    if (first_stop != t.end() - 1) {
      Mismatch(record, absl::StrCat("went on after stop token ", *first_stop, " at token ",
                                    first_stop - t.begin(), " of ", t.size()));
    } else if (t.size() < r.max_new_tokens && !IsStop(r, t.back())) {
      Mismatch(record, absl::StrCat("ended after ", t.size(), " of ", r.max_new_tokens,
                                    " tokens on token ", t.back(), ", not a stop token"));
    }
  }
  if (record.repeat) {
    ++repeats_;
    if (t != record.expected) {
      Mismatch(record,
               absl::StrCat("expected to end on its stop token: ", Difference(t, record.expected)));
    }
  } else if (!record.mismatched && t.size() == r.max_new_tokens && t.size() >= 2) {
    repeat_source_ = record;
  }
  records_.push_back(std::move(record));
}

absl::Status SoakChecker::Replay(DecoderModel& model) {
  if (records_.empty()) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<HostLoop> loop, HostLoop::Create(model.MakeStepProgram()));
  const std::size_t group = model.options().max_requests;
  for (std::size_t first = 0; first < records_.size(); first += group) {
    const std::size_t n = std::min(group, records_.size() - first);
    std::vector<DecodeRequest> requests;
    std::vector<WorkItem> items;
    for (std::size_t i = 0; i < n; ++i) {
      requests.push_back(records_[first + i].request);
      items.push_back(WorkItem::invalid());  // set once the entry is written
    }
    BATON_RETURN_IF_ERROR(model.WriteRequests(0, requests));
    for (std::size_t i = 0; i < n; ++i) items[i] = model.WorkItemFor(static_cast<std::uint32_t>(i));
    std::vector<Completion> completions;
    BATON_RETURN_IF_ERROR(loop->Run(items, loop->steps(), completions));
    std::vector<bool> replayed(n, false);
    for (const Completion& c : completions) {
      if (c.id >= n || replayed[c.id]) {
        return absl::InternalError(
            absl::StrCat("soak check: the reference loop completed entry ", c.id, " wrongly"));
      }
      replayed[c.id] = true;
      Record& record = records_[first + c.id];
      if (c.value == kRefusedRequest) {
        Mismatch(record, "the reference loop refused it");
        continue;
      }
      BATON_ASSIGN_OR_RETURN(const std::vector<std::int32_t> reference,
                             model.ReadGenerated(c.id, c.value));
      if (reference != record.tokens) {
        Mismatch(record, absl::StrCat("differs from the host loop's replay: ",
                                      Difference(record.tokens, reference)));
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!replayed[i]) Mismatch(records_[first + i], "the reference loop did not complete it");
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::samples
