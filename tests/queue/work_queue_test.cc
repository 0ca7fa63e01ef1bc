// Host-side checks of the work queue that need no GPU: option and descriptor
// validation (error code and the message that names the fix) and the
// descriptor's sentinels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/work_item.h"
#include "baton/work_queue.h"

namespace baton {
namespace {

void ExpectInvalid(const WorkQueueOptions& options, const std::string& fragment) {
  const absl::Status status = WorkQueue::Validate(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find(fragment), std::string::npos) << status;
  // Create validates before it touches the device, so this holds without a GPU.
  const absl::StatusOr<WorkQueue> queue = WorkQueue::Create(options);
  EXPECT_EQ(queue.status().code(), absl::StatusCode::kInvalidArgument) << queue.status();
}

TEST(WorkQueueOptionsTest, DefaultsAreValid) { EXPECT_TRUE(WorkQueue::Validate({}).ok()); }

TEST(WorkQueueOptionsTest, CapacityZeroIsRefused) {
  WorkQueueOptions options;
  options.capacity = 0;
  ExpectInvalid(options, "capacity is 0: it must be a power of two");
}

TEST(WorkQueueOptionsTest, CapacityNotAPowerOfTwoIsRefusedWithASuggestion) {
  WorkQueueOptions options;
  options.capacity = 1000;
  ExpectInvalid(options, "capacity is 1000: it must be a power of two");
  ExpectInvalid(options, "use for example 1024");
}

TEST(WorkQueueOptionsTest, CapacityAboveTheLimitIsRefused) {
  WorkQueueOptions options;
  options.capacity = WorkQueueOptions::kMaxCapacity << 1;
  ExpectInvalid(options, "at most 4294967296 slots");
}

TEST(WorkQueueOptionsTest, BatchZeroIsRefused) {
  WorkQueueOptions options;
  options.max_batch = 0;
  ExpectInvalid(options, "max_batch is 0: it must be between 1 and the capacity");
}

TEST(WorkQueueOptionsTest, BatchAboveCapacityIsRefused) {
  WorkQueueOptions options;
  options.capacity = 64;
  options.max_batch = 65;
  ExpectInvalid(options, "max_batch is 65: it must be between 1 and the capacity (64)");
}

TEST(WorkQueueOptionsTest, BatchEqualToCapacityIsAccepted) {
  WorkQueueOptions options;
  options.capacity = 64;
  options.max_batch = 64;
  EXPECT_TRUE(WorkQueue::Validate(options).ok());
}

TEST(WorkQueueOptionsTest, ZeroWaitBoundIsRefused) {
  WorkQueueOptions options;
  options.max_wait_spins = 0;
  ExpectInvalid(options, "max_wait_spins is 0");
}

TEST(WorkQueueOptionsTest, AnyFirstTicketIsAccepted) {
  WorkQueueOptions options;
  options.first_ticket = ~std::uint64_t{0};
  EXPECT_TRUE(WorkQueue::Validate(options).ok());
}

TEST(WorkItemTest, SentinelsAreNotValidItems) {
  EXPECT_FALSE(WorkItem::invalid().is_valid());
  EXPECT_FALSE(WorkItem::invalid().is_terminate());
  EXPECT_FALSE(WorkItem::terminate().is_valid());
  EXPECT_TRUE(WorkItem::terminate().is_terminate());
  EXPECT_FALSE(WorkItem{}.is_valid()) << "a default descriptor must read as 'no item'";
  EXPECT_TRUE(WorkItem::make(0, 0, 0).is_valid());
  EXPECT_TRUE(WorkItem::make(WorkItem::kFirstReservedKind - 1, 7, 9).is_valid());
  EXPECT_FALSE(WorkItem::make(WorkItem::kFirstReservedKind, 7, 9).is_valid());
}

TEST(WorkItemTest, ValidateItemsNamesTheFirstReservedKind) {
  std::vector<WorkItem> items = {WorkItem::make(1, 0, 0), WorkItem::make(2, 1, 0),
                                 WorkItem::terminate(), WorkItem::invalid()};
  const absl::Status status = WorkQueue::ValidateItems(items);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find("items[2] has kind 0xfffffffe"), std::string::npos)
      << status;
  EXPECT_NE(std::string(status.message()).find("give work items a kind below"), std::string::npos)
      << status;
  items.resize(2);
  EXPECT_TRUE(WorkQueue::ValidateItems(items).ok());
}

TEST(WorkQueueTest, DefaultQueueRefusesSeedAndClose) {
  WorkQueue queue;
  std::vector<WorkItem> items = {WorkItem::make(1, 0, 0)};
  EXPECT_EQ(queue.Seed(items).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queue.Close().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace baton
