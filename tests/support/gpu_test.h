// Test fixtures shared by the suite.
//
// GpuTest skips (reported as SKIPPED, never passed) when no usable GPU is
// present, and after each test checks that the device is still healthy: a test
// that leaves a sticky error behind fails instead of poisoning the next one.
// GpuStreamTest also owns a stream for the test to launch on; SeededGpuTest a
// random engine seeded from the test seed.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "support/test_seed.h"

namespace baton::testing {

// Empty when a device that can run Baton's GPU features is present, otherwise
// the reason it cannot (no driver, no device, too old).
[[nodiscard]] std::string GpuUnavailableReason();

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
};

// A GpuTest with its own stream (CreateStream's, made once the device check
// passed). A fixture that derives from it returns from its own SetUp when
// this one skipped or failed: `if (IsSkipped() || HasFatalFailure()) return;`.
class GpuStreamTest : public GpuTest {
 protected:
  void SetUp() override;

  Stream stream_;
};

// A GpuTest that draws its random inputs from rng_ (a standard engine such
// as std::mt19937), seeded with TestSeed() once the device check passed;
// every failure names the seed (support/test_seed.h).
template <class RandomEngine>
class SeededGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    // (A 32-bit engine takes the seed modulo 2^32.)
    rng_.seed(static_cast<typename RandomEngine::result_type>(TestSeed()));
  }

  RandomEngine rng_;

 private:
  ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, TestSeedNote()};
};

}  // namespace baton::testing

// Asserts/expects on absl::Status with the message shown on failure.
#define BATON_ASSERT_OK(expr)                                   \
  do {                                                          \
    const ::absl::Status baton_test_status_ = (expr);           \
    ASSERT_TRUE(baton_test_status_.ok()) << baton_test_status_; \
  } while (false)
#define BATON_EXPECT_OK(expr)                                   \
  do {                                                          \
    const ::absl::Status baton_test_status_ = (expr);           \
    EXPECT_TRUE(baton_test_status_.ok()) << baton_test_status_; \
  } while (false)
// BATON_ASSERT_OK_AND_ASSIGN(auto x, MakeX());
#define BATON_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  BATON_ASSERT_OK_AND_ASSIGN_IMPL_(BATON_STATUS_CONCAT_(baton_test_statusor_, __LINE__), lhs, expr)
#define BATON_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                     \
  ASSERT_TRUE(statusor.ok()) << statusor.status();            \
  lhs = std::move(statusor).value()
