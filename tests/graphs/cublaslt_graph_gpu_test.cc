// cuBLASLt linear layers with an explicit workspace capture into certified
// device graphs whose output equals the direct call bit for bit, launched from
// the host and from a device scheduler; and matches a CPU reference.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/cublaslt_matmul.h"
#include "baton/cuda_resources.h"
#include "baton/device_error.h"
#include "baton/step_graph.h"
#include "graph_test_kernels.h"
#include "support/element_bounds.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton {
namespace {

double Activate(double v, MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::kBiasRelu:
      return v > 0 ? v : 0;
    case MatmulEpilogue::kBiasGelu:
      return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    default:
      return v;
  }
}

struct Case {
  MatmulDataType type;
  MatmulEpilogue epilogue;
  int tokens, in, out;
  double tolerance;  // per element: |out − ref| ≤ tolerance · (1 + |ref|)
};

class CublasLtGraphTest : public testing::GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CublasLtGraphTest, GraphEqualsDirectCallBitForBitFromHostAndDevice) {
  const Case c = GetParam();
  const std::size_t element = MatmulElementBytes(c.type);
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  BATON_ASSERT_OK_AND_ASSIGN(std::shared_ptr<CublasLtContext> context, CublasLtContext::Create());
  BATON_ASSERT_OK_AND_ASSIGN(
      CublasLtLinear linear,
      CublasLtLinear::Create(context, LinearOptions{c.tokens, c.in, c.out, c.type, c.epilogue}));

  // Fresh random inputs; the CPU reference uses the values the device holds.
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 random(static_cast<std::uint32_t>(testing::TestSeed()));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto make = [&](std::size_t count, std::vector<float>& values) {
    values.resize(count);
    std::vector<unsigned char> bytes(count * element);
    for (std::size_t i = 0; i < count; ++i) {
      float v = uniform(random);
      if (c.type == MatmulDataType::kFloat16) {
        const __half h = __float2half(v);
        v = __half2float(h);
        std::memcpy(bytes.data() + i * 2, &h, 2);
      } else {
        std::memcpy(bytes.data() + i * 4, &v, 4);
      }
      values[i] = v;
    }
    return bytes;
  };
  std::vector<float> x, w, bias;
  const auto x_bytes = make(std::size_t(c.tokens) * c.in, x);
  const auto w_bytes = make(std::size_t(c.out) * c.in, w);
  const auto bias_bytes = make(c.out, bias);
  const std::size_t y_bytes = std::size_t(c.tokens) * c.out * element;
  BATON_ASSERT_OK_AND_ASSIGN(auto d_x, DeviceBuffer<unsigned char>::Create(x_bytes.size()));
  BATON_ASSERT_OK_AND_ASSIGN(auto d_w, DeviceBuffer<unsigned char>::Create(w_bytes.size()));
  BATON_ASSERT_OK_AND_ASSIGN(auto d_bias, DeviceBuffer<unsigned char>::Create(bias_bytes.size()));
  BATON_ASSERT_OK_AND_ASSIGN(auto d_y, DeviceBuffer<unsigned char>::Create(y_bytes));
  BATON_ASSERT_OK_AND_ASSIGN(auto words, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_ASSERT_OK(d_x.CopyFrom(x_bytes));
  BATON_ASSERT_OK(d_w.CopyFrom(w_bytes));
  BATON_ASSERT_OK(d_bias.CopyFrom(bias_bytes));
  BATON_ASSERT_OK(words.Fill(0));
  auto enqueue = [&](cudaStream_t s) {
    return linear.Enqueue(s, d_x.data(), d_w.data(), d_bias.data(), d_y.data());
  };
  auto read_y = [&] {
    std::vector<unsigned char> host(y_bytes);
    EXPECT_TRUE(d_y.CopyTo(absl::MakeSpan(host)).ok());
    return host;
  };

  BATON_ASSERT_OK(d_y.Fill(0xCD));
  BATON_ASSERT_OK(enqueue(stream.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  const std::vector<unsigned char> direct = read_y();

  // CPU reference in double precision, element by element.
  std::vector<double> got(std::size_t(c.tokens) * c.out), expected(got.size());
  for (int t = 0; t < c.tokens; ++t) {
    for (int o = 0; o < c.out; ++o) {
      double sum = c.epilogue == MatmulEpilogue::kNone ? 0.0 : bias[o];
      for (int i = 0; i < c.in; ++i) sum += double(x[t * c.in + i]) * w[o * c.in + i];
      const std::size_t at = std::size_t(t) * c.out + o;
      expected[at] = Activate(sum, c.epilogue);
      if (c.type == MatmulDataType::kFloat16) {
        __half h;
        std::memcpy(&h, direct.data() + at * 2, 2);
        got[at] = __half2float(h);
      } else {
        float f;
        std::memcpy(&f, direct.data() + at * 4, 4);
        got[at] = f;
      }
    }
  }
  testing::ExpectElementsWithin("cuBLASLt linear against the CPU reference", got, expected,
                                c.tolerance, c.tolerance, c.out);

  BATON_ASSERT_OK_AND_ASSIGN(DeviceGraph graph,
                             CaptureDeviceGraph(stream.get(), enqueue, {"cublaslt linear"}));
  EXPECT_GE(graph.inventory().kernel_nodes, 1u);
  EXPECT_EQ(graph.inventory().nodes, graph.inventory().kernel_nodes +
                                         graph.inventory().memset_nodes +
                                         graph.inventory().memcpy_nodes);

  BATON_ASSERT_OK(d_y.Fill(0xCD));
  BATON_ASSERT_OK(graph.Launch(stream.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_TRUE(read_y() == direct) << "host-launched graph differs from the direct call";

  BATON_ASSERT_OK_AND_ASSIGN(
      DeviceGraph scheduler, CaptureDeviceGraph(stream.get(), [&](cudaStream_t s) {
        return CudaStatus(test::EnqueueTailLaunch(graph.handle(), words.data(), s),
                          "EnqueueTailLaunch", __FILE__, __LINE__);
      }));
  BATON_ASSERT_OK(d_y.Fill(0xCD));
  BATON_ASSERT_OK(scheduler.Launch(stream.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  std::uint32_t error = 0;
  ASSERT_EQ(cudaMemcpy(&error, words.data(), sizeof(error), cudaMemcpyDeviceToHost), cudaSuccess);
  BATON_ASSERT_OK(DeviceErrorStatus(error, "scheduler"));
  EXPECT_TRUE(read_y() == direct) << "device-launched graph differs from the direct call";
}

INSTANTIATE_TEST_SUITE_P(
    Layers, CublasLtGraphTest,
    ::testing::Values(Case{MatmulDataType::kFloat32, MatmulEpilogue::kBiasGelu, 8, 256, 192, 2e-3},
                      Case{MatmulDataType::kFloat32, MatmulEpilogue::kNone, 3, 64, 96, 1e-4},
                      Case{MatmulDataType::kFloat16, MatmulEpilogue::kBiasRelu, 16, 512, 256, 2e-2},
                      Case{MatmulDataType::kFloat16, MatmulEpilogue::kBias, 128, 1024, 3072, 2e-2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = absl::StrCat(info.param.type == MatmulDataType::kFloat32 ? "fp32" : "fp16",
                                      "_", MatmulEpilogueName(info.param.epilogue), "_",
                                      info.param.tokens, "x", info.param.in, "x", info.param.out);
      for (char& ch : name) {
        if (ch == '+') ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace baton
