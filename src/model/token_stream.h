// The host side of the decoder's token stream (DecoderModel::ReadStream) and
// of the logprob records beside it (ReadLogprobs): a
// ring of stream_window words per request-table entry in mapped host memory,
// which the step's last kernel writes as it chooses each token
// (frame/step_frame_body.cuh, end_position) and the host reads without
// synchronizing. Internal to the model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"

namespace baton::detail {

class TokenStream {
 public:
  // Copies tokens [from, to) of an entry's generation from the device (the
  // ones a slow reader missed): the model's sequence table.
  using CopyMissed = std::function<absl::Status(std::uint32_t entry, std::uint32_t from,
                                                std::uint32_t to, std::int32_t* out)>;

  TokenStream() = default;
  [[nodiscard]] static absl::StatusOr<TokenStream> Create(std::uint32_t entries,
                                                          std::uint32_t window);

  // Forgets entries [first, first + count): the host rewrites them, and the
  // words of their last requests must not read as the new ones' tokens. Call
  // only while no step can write them (their items completed and were polled).
  void Clear(std::uint32_t first, std::uint32_t count);

  // Appends the entry's tokens from index `from` on that are visible now;
  // returns the index after the last appended. See DecoderModel::ReadStream.
  [[nodiscard]] absl::StatusOr<std::uint32_t> Read(std::uint32_t entry, std::uint32_t from,
                                                   std::vector<std::int32_t>& out,
                                                   const CopyMissed& copy_missed) const;

  // The ring as the device writes it.
  [[nodiscard]] unsigned long long* device() const { return words_.device(); }
  [[nodiscard]] std::uint32_t window() const { return window_; }

 private:
  [[nodiscard]] unsigned long long Word(std::uint32_t entry, std::uint32_t index) const;

  MappedHostBuffer<unsigned long long> words_;
  std::uint32_t entries_ = 0;
  std::uint32_t window_ = 0;
};

// The logprob records beside the token stream (frame/step_view.h's layout):
// the same window of slots per entry, a record of LogprobWords(capacity)
// words per slot, in mapped host memory the step's last kernel writes before
// the token's stream word. No copy of what leaves the window is kept on the
// device (a record is ~40 times a token): a reader that fell behind gets
// DataLoss.
class LogprobRing {
 public:
  LogprobRing() = default;
  // capacity 0: no ring (device() is null).
  [[nodiscard]] static absl::StatusOr<LogprobRing> Create(std::uint32_t entries,
                                                          std::uint32_t window,
                                                          std::uint32_t capacity);
  void Clear(std::uint32_t first, std::uint32_t count);  // as TokenStream::Clear
  // Appends the records of tokens [from, to) of an entry whose request asked
  // for `count` top alternatives; every token before `to` must have been
  // seen in the stream (its record was written first).
  [[nodiscard]] absl::Status Read(std::uint32_t entry, std::uint32_t from, std::uint32_t to,
                                  std::uint32_t count, std::vector<TokenLogprobs>& out) const;
  [[nodiscard]] std::uint32_t* device() const { return words_.device(); }
  [[nodiscard]] std::uint32_t capacity() const { return capacity_; }

 private:
  MappedHostBuffer<std::uint32_t> words_;
  std::uint32_t entries_ = 0;
  std::uint32_t window_ = 0;
  std::uint32_t capacity_ = 0;
};

}  // namespace baton::detail
