// Waiting with a bound, the same way in every test: a loop that polls until
// what it waits for happened or a deadline passed. A test never waits
// forever (a lost completion fails it instead of hanging the suite), and the
// bounds are generous: under compute-sanitizer the device runs far slower.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "baton/completion.h"
#include "baton/runtime.h"

namespace baton::testing {

// A point `limit` from now on the steady clock, for a loop of its own:
//   for (const Deadline deadline(std::chrono::seconds(10)); !done && !deadline.passed();) ...
class Deadline {
 public:
  explicit Deadline(std::chrono::steady_clock::duration limit)
      : at_(std::chrono::steady_clock::now() + limit) {}
  [[nodiscard]] bool passed() const { return std::chrono::steady_clock::now() >= at_; }

 private:
  std::chrono::steady_clock::time_point at_;
};

// How PollUntil polls a runtime.
struct PollLoop {
  std::chrono::seconds limit{30};
  std::size_t batch = 16;  // completions one Poll may hand out
  // Runs before every Poll (submit the next chunk, read a stream, count).
  std::function<void()> before_poll;
};

// Polls `runtime` until `done()` holds (asked before every Poll), a Poll
// fails, loop.limit has passed, or an ASSERT in `before_poll` or `each`
// failed (it stops the loop as it would stop a loop written inline: wrap the
// call in ASSERT_NO_FATAL_FAILURE to stop the test there too); hands every
// completion to `each` (may be empty), in order. Returns the failed Poll's
// Status, OK otherwise: the caller asserts on it and on what it waited for.
absl::Status PollUntil(Runtime& runtime, const std::function<bool()>& done,
                       const std::function<void(const Completion&)>& each,
                       const PollLoop& loop = {});

struct Polled {
  std::size_t completions = 0;  // handed out (each counted, duplicates too)
  absl::Status failure;         // the failed Poll's, OK otherwise
};

// PollUntil until `count` completions have come.
Polled PollCompletions(Runtime& runtime, std::size_t count, const PollLoop& loop = {},
                       const std::function<void(const Completion&)>& each = nullptr);

}  // namespace baton::testing
