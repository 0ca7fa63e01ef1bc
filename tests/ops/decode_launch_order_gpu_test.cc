// Programmatic dependent launch (baton/step_kernel.cuh) must not reorder a
// chain of decode kernels: DecodeBatch::launch_next_early lets the next
// kernel launch before the current one's wait, and still no kernel may read
// its predecessor's output early.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/host_driver.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

class LaunchOrderTest : public DecodeKernelTest {};

// A chain where each kernel reads the one before (normed GEMV -> residual-add
// GEMV of it -> normed GEMV of the new residual stream, six times over, every
// kernel launching its successor early) gives the same bits as the chain
// without the flag.
TEST_F(LaunchOrderTest, LaunchNextEarlyKeepsEveryKernelAfterItsPredecessor) {
  DecoderConfig config;
  config.d_model = 256;
  const int d = config.d_model, ffn = 768;
  const std::uint32_t capacity = 3, active = 3;
  const auto hidden = RandomFloat(std::size_t{capacity} * d, 1.0);
  const auto norm = RandomHalf(d, config.dtype, 1.0);
  const auto w_up = RandomHalf(static_cast<std::size_t>(ffn) * d, config.dtype, 0.1);
  const auto w_down = RandomHalf(static_cast<std::size_t>(d) * ffn, config.dtype, 0.05);
  auto d_norm = Upload(norm);
  auto d_up = Upload(w_up);
  auto d_down = Upload(w_down);
  TestBatch batch = MakeBatch(capacity, active, 4);
  std::vector<std::vector<float>> results;
  for (bool early : {false, true}) {
    DecodeBatch view = batch.view;
    view.launch_next_early = early;
    auto d_hidden = Upload(hidden);
    auto d_y = Poisoned<std::uint16_t>(std::size_t{capacity} * ffn);
    for (int round = 0; round < 6; ++round) {
      ASSERT_EQ(ops::Enqueue(ops::Gemv::rms_norm(config, d_up.data(), ffn, d_hidden.data(),
                                                 d_norm.data(), view, d_y.data()),
                             stream_.get()),
                cudaSuccess);
      ASSERT_EQ(ops::Enqueue(ops::Gemv::residual_add(config, d_down.data(), ffn, d_y.data(), view,
                                                     d_hidden.data()),
                             stream_.get()),
                cudaSuccess);
    }
    Sync();
    results.push_back(Download(d_hidden));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_EQ(results[0][i], results[1][i]) << "element " << i;
  }
  EXPECT_NE(results[0], hidden) << "the chain changed nothing";
}

}  // namespace
}  // namespace baton::kernel_test
