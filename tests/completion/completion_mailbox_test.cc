// CPU tests of the completion mailbox's option validation (no device needed:
// bad capacities are refused before any CUDA call).
#include <gtest/gtest.h>

#include <string>

#include "completion/completion_mailbox.h"

namespace baton {
namespace {

TEST(CompletionMailbox, RefusesCapacitiesThatAreNotPowersOfTwoInRange) {
  for (std::uint32_t capacity : {0u, 1u, 3u, 100u, CompletionMailbox::kMaxCapacity * 2}) {
    const auto mailbox = CompletionMailbox::Create(capacity);
    ASSERT_FALSE(mailbox.ok()) << capacity;
    EXPECT_EQ(mailbox.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(mailbox.status().message().find("completion mailbox capacity " +
                                              std::to_string(capacity) + " is not a power of two"),
              std::string::npos)
        << mailbox.status();
    EXPECT_NE(mailbox.status().message().find("round it up"), std::string::npos);
  }
}

}  // namespace
}  // namespace baton
