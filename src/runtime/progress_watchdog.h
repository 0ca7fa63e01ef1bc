// The host half of the watchdog: remembers when the device's progress word
// last moved and says when it has been still for longer than the timeout.
// Pure logic (the caller passes the clock), so CPU tests drive it. Internal.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace baton::detail {

class ProgressWatchdog {
 public:
  explicit ProgressWatchdog(absl::Duration timeout = absl::InfiniteDuration())
      : timeout_(timeout) {}

  [[nodiscard]] bool enabled() const { return timeout_ != absl::InfiniteDuration(); }
  [[nodiscard]] absl::Duration timeout() const { return timeout_; }

  // The engine was (re)launched at `now`: the clock starts again.
  void Arm(absl::Time now, std::uint64_t progress) {
    progress_ = progress;
    since_ = now;
  }

  // How long the progress word has not moved as of `now` (zero when it just
  // moved).
  [[nodiscard]] absl::Duration StillFor(absl::Time now, std::uint64_t progress) {
    if (progress != progress_) Arm(now, progress);
    return now - since_;
  }

  // True when the word has been still for longer than the timeout.
  [[nodiscard]] bool Expired(absl::Time now, std::uint64_t progress) {
    return StillFor(now, progress) > timeout_;
  }

  [[nodiscard]] std::uint64_t last_progress() const { return progress_; }

 private:
  absl::Duration timeout_;
  std::uint64_t progress_ = 0;
  absl::Time since_ = absl::InfiniteFuture();  // never armed: never expires
};

}  // namespace baton::detail
