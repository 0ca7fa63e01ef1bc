#include "support/kernel_harness.h"

#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "kernels/half_bits.h"
#include "support/decode_reference.h"
#include "support/element_bounds.h"

namespace baton::kernel_test {

const char* Name(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? "fp16" : "bf16"; }

std::string DTypeParamName(const ::testing::TestParamInfo<DecoderDType>& info) {
  return Name(info.param);
}

double UnitRoundoff(DecoderDType dtype) {
  return dtype == DecoderDType::kFloat16 ? 0x1.0p-11 : 0x1.0p-8;
}
double Tolerance(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? 2e-3 : 1e-2; }
double ElementRtol(DecoderDType dtype) { return 2 * UnitRoundoff(dtype); }
double ElementAtolPerRms(DecoderDType dtype) { return 4 * UnitRoundoff(dtype); }

void ExpectNormWithin(const std::string& what, DecoderDType dtype, const std::vector<double>& out,
                      const std::vector<double>& ref) {
  const std::string key = what + "_" + Name(dtype);
  const double error = reference::RelativeError(out, ref);
  ::testing::Test::RecordProperty(key, std::to_string(error));
  std::printf("  %-32s rel err %.3e (bound %.0e)\n", key.c_str(), error, Tolerance(dtype));
  EXPECT_LE(error, Tolerance(dtype)) << key << ": ‖out − ref‖₂/‖ref‖₂";  // NaN fails too
}

void ExpectClose(const std::string& what, DecoderDType dtype, const std::vector<double>& out,
                 const std::vector<double>& ref, int width) {
  const std::string key = what + "_" + Name(dtype);
  ASSERT_EQ(out.size(), ref.size()) << key;
  ASSERT_FALSE(ref.empty()) << key;
  const double error = reference::RelativeError(out, ref);
  EXPECT_LE(error, Tolerance(dtype)) << key << ": ‖out − ref‖₂/‖ref‖₂";  // NaN fails too
  double squares = 0.0;
  for (double r : ref) squares += r * r;
  const double atol = ElementAtolPerRms(dtype) * std::sqrt(squares / ref.size());
  std::ostringstream atol_note;
  atol_note << ElementAtolPerRms(dtype) << "·rms(ref)";
  const testing::ElementReport elements = testing::ExpectElementsWithin(
      key, out, ref, atol, ElementRtol(dtype), width, atol_note.str());
  ::testing::Test::RecordProperty(key, std::to_string(error));
  ::testing::Test::RecordProperty(key + "_element", std::to_string(elements.worst_ratio));
  std::printf("  %-32s rel err %.3e (bound %.0e), worst element at %.2f of its bound\n",
              key.c_str(), error, Tolerance(dtype), elements.worst_ratio);
}

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(testing::TestSeed());
  return rng;
}

std::uint64_t Draw() { return Rng()(); }

std::vector<std::uint16_t> RandomHalf(std::size_t n, DecoderDType dtype, double stddev) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<std::uint16_t> out(n);
  for (auto& v : out) v = FloatToHalfBits(static_cast<float>(normal(Rng())), dtype);
  return out;
}

std::vector<float> RandomFloat(std::size_t n, double stddev) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(stddev));
  std::vector<float> out(n);
  for (auto& v : out) v = normal(Rng());
  return out;
}

double ToDouble(std::uint16_t bits, DecoderDType dtype) { return HalfBitsToFloat(bits, dtype); }

float RoundToStorage(double value, DecoderDType dtype) {
  return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(value), dtype), dtype);
}

TestBatch MakeBatch(std::uint32_t capacity, std::uint32_t active, std::uint32_t max_slots,
                    const std::vector<std::int32_t>& positions_by_position) {
  TestBatch batch;
  std::vector<std::uint32_t> all(max_slots);
  std::iota(all.begin(), all.end(), 0u);
  std::shuffle(all.begin(), all.end(), Rng());
  batch.host_slots.assign(all.begin(), all.begin() + capacity);
  batch.host_positions.assign(capacity, 0);
  for (std::uint32_t p = 0; p < positions_by_position.size() && p < capacity; ++p) {
    batch.host_positions[p] = positions_by_position[p];
  }
  batch.active = Upload(std::vector<std::uint32_t>{active});
  batch.slots = Upload(batch.host_slots);
  batch.positions = Upload(batch.host_positions);
  batch.view.active = batch.active.data();
  batch.view.capacity = capacity;
  batch.view.slots = batch.slots.data();
  batch.view.positions = batch.positions.data();
  batch.view.max_slots = max_slots;
  return batch;
}

DecodeKernelTest::DecodeKernelTest() : seed_trace_(__FILE__, __LINE__, testing::TestSeedNote()) {}

void DecodeKernelTest::SetUp() {
  // Every test draws from the start of the seed's sequence, so a failing
  // test replays alone (--gtest_filter) with the seed it printed.
  Rng().seed(testing::TestSeed());
  RecordProperty("seed", std::to_string(testing::TestSeed()));
  testing::GpuStreamTest::SetUp();
}

}  // namespace baton::kernel_test

namespace baton {
void PrintTo(DecoderDType dtype, std::ostream* os) { *os << kernel_test::Name(dtype); }
}  // namespace baton
