// The decode-kernel GPU tests' comparison (support/kernel_harness.h) checked
// on the host: the per-element bound catches one element off by 0.17 that
// the norm over the whole output lets pass, accepts the output's rounding to
// the storage type, and fails on poison.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A reference of unit-variance values and the output a kernel would give:
// each value rounded to the storage type (at most half an ulp off).
void MakeOutput(DecoderDType dtype, std::size_t n, std::vector<double>& out,
                std::vector<double>& ref) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  ref.resize(n);
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref[i] = normal(rng);
    out[i] = RoundToStorage(ref[i], dtype);
  }
}

// The failure messages ExpectClose(out, ref) reports, instead of failing.
std::vector<std::string> Failures(DecoderDType dtype, const std::vector<double>& out,
                                  const std::vector<double>& ref, int width) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    ExpectClose("check", dtype, out, ref, width);
  }
  std::vector<std::string> messages;
  for (int i = 0; i < results.size(); ++i)
    messages.push_back(results.GetTestPartResult(i).message());
  return messages;
}

class KernelHarnessTest : public ::testing::TestWithParam<DecoderDType> {};

TEST_P(KernelHarnessTest, AcceptsTheStorageTypesRounding) {
  std::vector<double> out, ref;
  MakeOutput(GetParam(), 20000, out, ref);
  EXPECT_THAT(Failures(GetParam(), out, ref, 100), IsEmpty());
}

TEST_P(KernelHarnessTest, FailsOneElementOffByPoint17ThatTheNormLetsPass) {
  std::vector<double> out, ref;
  MakeOutput(GetParam(), 20000, out, ref);
  out[12345] = ref[12345] + 0.17;
  // The norm alone passes: 0.17 over ‖ref‖₂ ≈ √20000.
  EXPECT_LT(reference::RelativeError(out, ref), Tolerance(GetParam()));
  EXPECT_THAT(Failures(GetParam(), out, ref, 100),
              ElementsAre(AllOf(HasSubstr("1 of 20000 elements outside"),
                                HasSubstr("row 123 element 45"))));
}

TEST_P(KernelHarnessTest, FailsOnPoison) {
  std::vector<double> out, ref;
  MakeOutput(GetParam(), 1000, out, ref);
  out[7] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(Failures(GetParam(), out, ref, 0),
              ElementsAre(HasSubstr("‖out − ref‖₂/‖ref‖₂"), HasSubstr("element 7: out nan")));
}

INSTANTIATE_TEST_SUITE_P(, KernelHarnessTest, ::testing::ValuesIn(kDTypes), DTypeParamName);

}  // namespace
}  // namespace baton::kernel_test
