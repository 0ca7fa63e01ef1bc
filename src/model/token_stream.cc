#include "token_stream.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"
#include "frame/step_view.h"

namespace baton::detail {
absl::StatusOr<TokenStream> TokenStream::Create(std::uint32_t entries, std::uint32_t window) {
  TokenStream stream;
  BATON_ASSIGN_OR_RETURN(
      stream.words_, MappedHostBuffer<unsigned long long>::Create(std::size_t{entries} * window));
  std::memset(stream.words_.host(), 0, stream.words_.size() * sizeof(unsigned long long));
  stream.entries_ = entries;
  stream.window_ = window;
  return stream;
}

void TokenStream::Clear(std::uint32_t first, std::uint32_t count) {
  if (first >= entries_) return;
  count = std::min(count, entries_ - first);
  std::memset(words_.host() + std::size_t{first} * window_, 0,
              std::size_t{count} * window_ * sizeof(unsigned long long));
}

unsigned long long TokenStream::Word(std::uint32_t entry, std::uint32_t index) const {
  // The device writes each word with one 8-byte store; an aligned 8-byte
  // load sees it whole, and the acquire keeps the token reads after it.
  return __atomic_load_n(words_.host() + StreamSlot(entry, index, window_), __ATOMIC_ACQUIRE);
}

absl::StatusOr<std::uint32_t> TokenStream::Read(std::uint32_t entry, std::uint32_t from,
                                                std::vector<std::int32_t>& out,
                                                const CopyMissed& copy_missed) const {
  if (entry >= entries_) {
    return absl::OutOfRangeError(absl::StrCat("DecoderModel::ReadStream: entry ", entry,
                                              " is past the table's ", entries_, " entries"));
  }
  std::uint32_t next = from;
  for (;;) {
    const unsigned long long word = Word(entry, next);
    const std::uint32_t index = StreamWordIndexPlusOne(word);
    if (index == next + 1) {
      out.push_back(StreamWordToken(word));
      ++next;
      continue;
    }
    // A word other than this token's, or an older one: nothing newer yet
    // (index < next + 1 includes an empty slot and the last lap's token).
    if (index < next + 1) return next;
    // A later lap overwrote it: the reader fell behind by more than the
    // window. Every token before the newest visible one is final on the
    // device; copy those that left the window.
    std::uint32_t newest = index;
    for (std::uint32_t i = 0; i < window_; ++i)
      newest = std::max(newest, StreamWordIndexPlusOne(Word(entry, i)));
    const std::uint32_t upto = newest - window_;  // the oldest index still in the ring
    if (upto <= next) continue;                   // it advanced meanwhile; read the ring again
    const std::size_t at = out.size();
    out.resize(at + (upto - next));
    BATON_RETURN_IF_ERROR(copy_missed(entry, next, upto, out.data() + at));
    next = upto;
  }
}

absl::StatusOr<LogprobRing> LogprobRing::Create(std::uint32_t entries, std::uint32_t window,
                                                std::uint32_t capacity) {
  LogprobRing ring;
  ring.entries_ = entries;
  ring.window_ = window;
  ring.capacity_ = capacity;
  if (capacity == 0) return ring;
  const std::size_t words = std::size_t{entries} * window * LogprobWords(capacity);
  BATON_ASSIGN_OR_RETURN(ring.words_, MappedHostBuffer<std::uint32_t>::Create(words));
  std::memset(ring.words_.host(), 0, words * sizeof(std::uint32_t));
  return ring;
}

void LogprobRing::Clear(std::uint32_t first, std::uint32_t count) {
  if (capacity_ == 0 || first >= entries_) return;
  count = std::min(count, entries_ - first);
  const std::size_t per_entry = std::size_t{window_} * LogprobWords(capacity_);
  std::memset(words_.host() + first * per_entry, 0, count * per_entry * sizeof(std::uint32_t));
}

absl::Status LogprobRing::Read(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                               std::uint32_t count, std::vector<TokenLogprobs>& out) const {
  if (entry >= entries_) {
    return absl::OutOfRangeError(absl::StrCat("DecoderModel::ReadLogprobs: entry ", entry,
                                              " is past the table's ", entries_, " entries"));
  }
  const auto as_float = [](std::uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  for (std::uint32_t i = from; i < to; ++i) {
    const std::uint32_t* record = words_.host() + StreamSlot(entry, i, window_) * LogprobWords(capacity_);
    // A seqlock read: the index before and after the rest, both this token's.
    const std::uint32_t before = __atomic_load_n(record + kLogprobIndexWord, __ATOMIC_ACQUIRE);
    TokenLogprobs t;
    t.logprob = as_float(__atomic_load_n(record + kLogprobChosenWord, __ATOMIC_RELAXED));
    for (std::uint32_t j = 0; j < count; ++j) {
      t.top_tokens.push_back(static_cast<std::int32_t>(
          __atomic_load_n(record + LogprobTokenWord(j), __ATOMIC_RELAXED)));
      t.top_logprobs.push_back(
          as_float(__atomic_load_n(record + LogprobValueWord(capacity_, j), __ATOMIC_RELAXED)));
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    const std::uint32_t after = __atomic_load_n(record + kLogprobIndexWord, __ATOMIC_RELAXED);
    if (before != i + 1 || after != i + 1) {
      return absl::DataLossError(absl::StrFormat(
          "DecoderModel::ReadLogprobs: entry %u holds no record of token %u: it left the window "
          "of %u tokens before it was read (read the stream more often or raise "
          "DecoderModelOptions::stream_window), or the token was not generated yet",
          entry, i, window_));
    }
    out.push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace baton::detail
