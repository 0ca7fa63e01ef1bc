// Device buffers in tests: made from host data, filled with a value or with
// poison, and read back. The copies are checked with EXPECT (a failed copy
// fails the test, and what was read is then empty or zeros, which the
// caller's comparison fails on too). Poison is all bits set: NaN in every
// float type, -1 for tokens, so an element a kernel failed to write fails
// the comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/cuda_resources.h"

namespace baton::testing {

template <class T>
std::vector<T> Download(const DeviceBuffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  EXPECT_TRUE(buffer.CopyTo(absl::MakeSpan(host)).ok());
  return host;
}

template <class T>
DeviceBuffer<T> Upload(const std::vector<T>& host) {
  auto buffer = DeviceBuffer<T>::Create(host.size());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->CopyFrom(absl::MakeConstSpan(host)).ok());
  return std::move(buffer).value();
}

// `n` elements with every byte 0xFF.
template <class T>
DeviceBuffer<T> Poisoned(std::size_t n) {
  auto buffer = DeviceBuffer<T>::Create(n);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->Fill(0xFF).ok());
  return std::move(buffer).value();
}

// Sets every element of `buffer` to `value` (a poison word such as
// 0xDEADBEEF, where all bits set would be a value the kernel may write).
template <class T>
[[nodiscard]] absl::Status FillWith(DeviceBuffer<T>& buffer, T value) {
  const std::vector<T> host(buffer.size(), value);
  return buffer.CopyFrom(absl::MakeConstSpan(host));
}

// `n` elements, each `value` (zeroed counters, a poisoned output):
//   BATON_ASSERT_OK_AND_ASSIGN(out_, testing::FilledBuffer<std::uint32_t>(n, kPoison));
template <class T>
[[nodiscard]] absl::StatusOr<DeviceBuffer<T>> FilledBuffer(std::size_t n, T value) {
  absl::StatusOr<DeviceBuffer<T>> buffer = DeviceBuffer<T>::Create(n);
  if (!buffer.ok()) return buffer.status();
  if (const absl::Status filled = FillWith(*buffer, value); !filled.ok()) return filled;
  return buffer;
}

}  // namespace baton::testing
