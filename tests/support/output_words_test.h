// The fixture of the tests that check what kernels wrote into an output and
// a few control words (tests/graphs): a stream (GpuStreamTest), an output of
// `elements` 32-bit words that starts poisoned with `poison`, so a word no
// kernel wrote shows, three control words that start at zero (each test
// says what they hold), and seed_, the test's random seed
// (testing::TestSeed(), named in every failure).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "support/device_buffers.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton::testing {

class OutputWordsTest : public GpuStreamTest {
 protected:
  OutputWordsTest(int elements, std::uint32_t poison) : elements_(elements), poison_(poison) {}

  void SetUp() override {
    GpuStreamTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    seed_ = static_cast<std::uint32_t>(TestSeed());
    BATON_ASSERT_OK_AND_ASSIGN(out_, FilledBuffer<std::uint32_t>(elements_, poison_));
    BATON_ASSERT_OK_AND_ASSIGN(words_, FilledBuffer<std::uint32_t>(3, 0));
  }

  // Poisons the output again.
  absl::Status Poison() { return FillWith(out_, poison_); }
  std::vector<std::uint32_t> Out() { return Download(out_); }
  std::vector<std::uint32_t> Words() { return Download(words_); }

  // A test kernel's launch error as a Status.
  static absl::Status Launched(cudaError_t error) {
    return CudaStatus(error, "test kernel launch", __FILE__, __LINE__);
  }

  std::uint32_t seed_ = 0;
  DeviceBuffer<std::uint32_t> out_;
  DeviceBuffer<std::uint32_t> words_;

 private:
  int elements_;
  std::uint32_t poison_;
  ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, TestSeedNote()};
};

}  // namespace baton::testing
