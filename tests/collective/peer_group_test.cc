// PeerGroupOptions refused before any GPU work (baton/peer_group.h).
#include <gtest/gtest.h>

#include <string>

#include "baton/peer_group.h"

namespace baton {
namespace {

void ExpectInvalid(const PeerGroupOptions& options, const std::string& says) {
  const auto group = PeerGroup::Create(options);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << group.status();
  EXPECT_NE(group.status().message().find(says), std::string::npos) << group.status();
}

TEST(PeerGroupOptionsTest, EachBadOptionIsNamed) {
  PeerGroupOptions options;
  options.devices = {0};
  ExpectInvalid(options, "names 1 devices; a group holds 2 to 8");
  options.devices = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  ExpectInvalid(options, "names 9 devices");
  options.devices = {0, 1, 0};
  ExpectInvalid(options, "repeats a device: 0, 1, 0");
  options.devices = {0, 1};
  options.max_bytes = 24;
  ExpectInvalid(options, "max_bytes is 24; it must be a positive multiple of 16");
  options.max_bytes = 0;
  ExpectInvalid(options, "max_bytes is 0");
  options.max_bytes = 4096;
  options.blocks = 33;
  ExpectInvalid(options, "blocks is 33; it must be in [1, 32]");
  options.blocks = 0;
  ExpectInvalid(options, "blocks is 0");
  options.blocks = 16;
  options.wait_timeout = absl::ZeroDuration();
  ExpectInvalid(options, "wait_timeout must be positive");
}

}  // namespace
}  // namespace baton
