// What the op tests share (tests/ops/decode_*_gpu_test.cc): the dtypes, the
// tolerances, device buffers that start from host data or from poison
// (support/device_buffers.h), the batch on the device, the seeded RNG and
// the fixture.
//
// Outputs are poisoned (all bits set: NaN in every float type, -1 for
// tokens) before each run, so an element a kernel failed to write fails the
// comparison, and positions past the live batch must keep their poison.
//
// Tolerances (ExpectClose) compare against a double reference computed from
// the same 16-bit inputs, two ways, both of which must hold:
//  - the norm: ‖out − ref‖₂ / ‖ref‖₂ ≤ 2e-3 (fp16) or 1e-2 (bf16). Rounding
//    the output to the storage type alone costs about u/√3 (u = 2^-11 for
//    fp16, 2^-8 for bf16): 2.8e-4 and 2.3e-3; the bounds leave room for fp32
//    accumulation order, fast exp and intermediate roundings (attention
//    against the reference of the unrounded RoPE reads q and k the kernel
//    itself rounded to the storage type).
//  - every element: |out_i − ref_i| ≤ 2u·|ref_i| + 4u·rms(ref). 2u is one
//    ulp at the element's own magnitude: the final rounding costs at most
//    half of it, and fp32 intermediates (≤ ~1e-5 relative) can only tip a
//    value to the other neighbour of a rounding boundary. 4u·rms(ref) absorbs
//    the errors that do not shrink with the element: fp32 accumulation over
//    up to a few thousand terms, RoPE's fp32 angle (≤ 1.2e-4 rad up to
//    position 2047, about u/4 for fp16), and the fused norm's last-bit
//    differences feeding a GEMV. With outputs of rms ~1 that is 2e-3 (fp16)
//    or 1.6e-2 (bf16) plus one ulp: one element off by 0.17 fails, which the
//    norm over thousands of elements lets pass. Attention is checked element
//    by element against the reference of the q and k the kernel stored
//    (themselves checked against RoPE's): from the unrounded ones a 2-token
//    softmax turns their ~u score error into up to ~2.4u of output, past the
//    bound about once in a thousand draws. A host imitation of the kernels'
//    fp32 arithmetic (fp32 RoPE angles, sequential sums, expf) over 40 to
//    250 seeds of these tests' shapes put the worst element at 0.33 of its
//    bound for attention, 0.32 for RoPE, 0.33 for RMSNorm, 0.32 for the GEMV
//    and 0.42 for SiLU·mul.
//
// Every test seeds the RNG (Rng()) with one printed value when it starts:
// a failure names it (a trace line and the test property "seed"), and
// BATON_TEST_SEED=<value> replays the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_config.h"
#include "kernels/attention/attention_split.h"
#include "kernels/decode_batch.h"
#include "support/device_buffers.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton::kernel_test {

inline constexpr DecoderDType kDTypes[] = {DecoderDType::kFloat16, DecoderDType::kBFloat16};

[[nodiscard]] const char* Name(DecoderDType dtype);
// For INSTANTIATE_TEST_SUITE_P over kDTypes: "fp16", "bf16".
[[nodiscard]] std::string DTypeParamName(const ::testing::TestParamInfo<DecoderDType>& info);

// Unit roundoff of the storage type: 2^-11 (fp16), 2^-8 (bf16).
[[nodiscard]] double UnitRoundoff(DecoderDType dtype);
// The norm bound: 2e-3 (fp16), 1e-2 (bf16).
[[nodiscard]] double Tolerance(DecoderDType dtype);
// The per-element bound's relative part (2u) and its absolute part's
// multiple of rms(ref) (4u); see the header comment.
[[nodiscard]] double ElementRtol(DecoderDType dtype);
[[nodiscard]] double ElementAtolPerRms(DecoderDType dtype);

// Checks ‖out − ref‖₂ / ‖ref‖₂ ≤ Tolerance(dtype) alone, and reports it (the
// log and the test property what_dtype): for a reference the kernel is not
// held to element by element (see the header comment).
void ExpectNormWithin(const std::string& what, DecoderDType dtype, const std::vector<double>& out,
                      const std::vector<double>& ref);

// Checks `out` against `ref` by the norm and element by element, reports
// both (the log and the test properties what_dtype and what_dtype_element:
// the worst element's error as a fraction of its bound) and, on failure,
// names the worst element (as row, column when `width` > 0).
void ExpectClose(const std::string& what, DecoderDType dtype, const std::vector<double>& out,
                 const std::vector<double>& ref, int width = 0);

// The generator every draw comes from, seeded with testing::TestSeed()
// (support/test_seed.h).
[[nodiscard]] std::mt19937_64& Rng();
[[nodiscard]] std::uint64_t Draw();
[[nodiscard]] std::vector<std::uint16_t> RandomHalf(std::size_t n, DecoderDType dtype,
                                                    double stddev);
[[nodiscard]] std::vector<float> RandomFloat(std::size_t n, double stddev);

// Storage-type bits to double, and a double rounded to the storage type and
// back (what a kernel feeds the next one).
[[nodiscard]] double ToDouble(std::uint16_t bits, DecoderDType dtype);
[[nodiscard]] float RoundToStorage(double value, DecoderDType dtype);

// support/device_buffers.h, under the names every op test uses.
using testing::Download;
using testing::Poisoned;
using testing::Upload;

// The split decode attention's scratch for `rows` rows (none when
// max_context fits one unit): partials poisoned (NaN), so a read of one
// that no block wrote shows, and arrival counts zeroed as the contract asks.
struct SplitScratch {
  SplitScratch(const DecoderConfig& config, std::uint32_t rows)
      : partials(Poisoned<float>(attention_scratch_floats(config, rows))),
        arrivals(Poisoned<std::uint32_t>(attention_scratch_arrivals(config, rows))) {
    EXPECT_TRUE(arrivals.Fill(0).ok());
    view = {partials.data(), arrivals.data(), rows};
  }
  // Every launch leaves the counts at zero for the next one.
  void ExpectArrivalsZero() const {
    for (std::uint32_t count : Download(arrivals)) {
      ASSERT_EQ(count, 0u) << "a split's arrival count was left non-zero";
    }
  }
  DeviceBuffer<float> partials;
  DeviceBuffer<std::uint32_t> arrivals;
  AttentionScratch view;
};

// A batch on the device: `capacity` positions, the first `active` live.
struct TestBatch {
  DeviceBuffer<std::uint32_t> active;
  DeviceBuffer<std::uint32_t> slots;
  DeviceBuffer<std::int32_t> positions;
  DecodeBatch view;
  std::vector<std::uint32_t> host_slots;
  std::vector<std::int32_t> host_positions;  // by row
};

// One row per sequence (a decode step). Slots are a random subset of [0,
// max_slots) in random order, so row and slot never coincide by accident.
// positions_by_position[p] is the sequence position of row p's token (0
// when absent).
[[nodiscard]] TestBatch MakeBatch(std::uint32_t capacity, std::uint32_t active,
                                  std::uint32_t max_slots,
                                  const std::vector<std::int32_t>& positions_by_position = {});

// Whether an element still holds the poison (every byte 0xFF).
template <class T>
bool AllBitsSet(const T& v) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  return std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0xFF; });
}

// Positions [active, capacity) of a [capacity, width] output kept their poison.
template <class T>
void ExpectUntouched(const std::vector<T>& out, std::size_t width, std::uint32_t active,
                     std::uint32_t capacity) {
  for (std::size_t i = active * width; i < capacity * width; ++i) {
    ASSERT_TRUE(AllBitsSet(out[i])) << "element " << i << " past the live batch was written";
  }
}

// The fixture of every decode-kernel test: skips without a GPU, seeds the
// RNG with testing::TestSeed() (named in every failure), and owns a stream.
class DecodeKernelTest : public testing::GpuStreamTest {
 protected:
  DecodeKernelTest();
  void SetUp() override;
  void Sync() { ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess); }

  // Batch invariance: each of `positions`, run alone in a bucket of 1, gets
  // the bits it got as row p of the full batch's [capacity, width] output.
  // upload(p) returns position p's input on the device; run(input, batch, y)
  // enqueues the kernel on stream_ and returns its cudaError_t.
  template <class UploadInput, class Run>
  void ExpectSameBitsAlone(const std::vector<std::uint16_t>& batch_out, int width,
                           const std::vector<std::uint32_t>& positions, UploadInput upload,
                           Run run) {
    for (std::uint32_t p : positions) {
      TestBatch one = MakeBatch(1, 1, 16);
      const auto input = upload(p);
      auto d_y1 = Poisoned<std::uint16_t>(width);
      ASSERT_EQ(run(input.data(), one.view, d_y1.data()), cudaSuccess);
      Sync();
      const auto y1 = Download(d_y1);
      ASSERT_TRUE(std::equal(y1.begin(), y1.end(), batch_out.begin() + std::size_t{p} * width))
          << "position " << p << " differs between the full batch and a bucket of 1";
    }
  }

 private:
  ::testing::ScopedTrace seed_trace_;
};

// A decode-kernel test run once per dtype (INSTANTIATE_TEST_SUITE_P(...,
// ::testing::ValuesIn(kDTypes), DTypeParamName)).
class DTypeKernelTest : public DecodeKernelTest,
                        public ::testing::WithParamInterface<DecoderDType> {
 protected:
  DecoderDType dtype() const { return GetParam(); }
};

}  // namespace baton::kernel_test

namespace baton {
// gtest prints a DecoderDType parameter as its name (found by ADL).
void PrintTo(DecoderDType dtype, std::ostream* os);
}  // namespace baton
