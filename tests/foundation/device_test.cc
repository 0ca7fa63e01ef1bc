// GPU tests of device discovery and the memory owners.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "support/gpu_test.h"

namespace baton {
namespace {

using DeviceTest = testing::GpuTest;

TEST_F(DeviceTest, DescribesAHopperDevice) {
  BATON_ASSERT_OK_AND_ASSIGN(const DeviceInfo info, QueryDevice());
  EXPECT_GE(info.compute_major, 9);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GE(info.runtime_version, 13000);
  EXPECT_NE(Describe(info).find("sm_"), std::string::npos);
}

TEST_F(DeviceTest, DeviceBufferRoundTripsAndPoisons) {
  BATON_ASSERT_OK_AND_ASSIGN(auto buffer, DeviceBuffer<std::uint32_t>::Create(4099));
  std::vector<std::uint32_t> host(4099);
  std::iota(host.begin(), host.end(), 0x1234u);
  BATON_ASSERT_OK(buffer.CopyFrom(host));
  std::vector<std::uint32_t> back(host.size(), 0);
  BATON_ASSERT_OK(buffer.CopyTo(absl::MakeSpan(back)));
  EXPECT_EQ(back, host);
  BATON_ASSERT_OK(buffer.Fill(0xAB));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  BATON_ASSERT_OK(buffer.CopyTo(absl::MakeSpan(back)));
  for (std::uint32_t v : back) ASSERT_EQ(v, 0xABABABABu);
}

TEST_F(DeviceTest, MappedHostBufferSeesDeviceWrites) {
  BATON_ASSERT_OK_AND_ASSIGN(auto mailbox, MappedHostBuffer<std::uint32_t>::Create(64));
  ASSERT_NE(mailbox.device(), nullptr);
  for (size_t i = 0; i < mailbox.size(); ++i) mailbox.host()[i] = 0;
  ASSERT_EQ(cudaMemset(mailbox.device(), 0x5A, 64 * sizeof(std::uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < mailbox.size(); ++i) ASSERT_EQ(mailbox.host()[i], 0x5A5A5A5Au);
}

TEST_F(DeviceTest, OversizedAllocationIsAStatusNotACrash) {
  auto huge = DeviceBuffer<char>::Create(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  // The failure lives in the Status; the runtime's last-error slot is left clean.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace baton
