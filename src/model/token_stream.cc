#include "token_stream.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
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

}  // namespace baton::detail
