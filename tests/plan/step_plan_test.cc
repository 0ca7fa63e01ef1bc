// Where a tensor-parallel rank's plan exchanges with its peers
// (plan/step_plan.h, TensorParallelStep), on the CPU: the plans are plain
// data, built here over made-up device addresses and never launched (the
// GPU tests run them: tests/model/decoder_tp_gpu_test.cc).
//
// On every projection path: each layer's attention-output and down
// projections store a partial sum in `projected` and the next node reduces
// it (the GEMV plans add the ranks' sum into the residual stream; the
// cuBLASLt and GEMM plans sum in place, and the residual norm after adds
// it); no projection adds into the residual stream itself; the LM head
// writes the rank's vocabulary rows and a gather over the sequences puts
// them into the whole logits just before selection. Without tensor
// parallelism the plan has no exchange at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/step_ops.h"
#include "plan/step_plan.h"

namespace baton::detail {
namespace {

using ops::AllReduce;
using ops::kKind;

// A distinct, 256-byte aligned made-up device address.
void* Fake(std::uintptr_t n) { return reinterpret_cast<void*>(n << 12); }

struct Fixture {
  DecoderConfig config;
  ModelTensors weights;
  std::vector<KvCacheLayer> caches;
  StepBuffers buffers;
  DecoderStepView view;
  TensorParallelStep tp;

  Fixture() {
    config.layers = 3;
    config.d_model = 256;
    config.heads = 4;  // a rank's share of 8 query heads on 4 key/value heads
    config.kv_heads = 2;
    config.head_dim = 32;
    config.ffn = 256;
    config.vocab = 2048;  // (a rank keeps the whole vocabulary: 1024 rows of it here)
    config.max_context = 512;
    std::uintptr_t next = 1;
    weights.embedding = Fake(next++);
    weights.final_norm = Fake(next++);
    weights.lm_head = Fake(next++);
    weights.rope_inv_freq = static_cast<const float*>(Fake(next++));
    for (int l = 0; l < config.layers; ++l) {
      weights.layers.push_back({Fake(next), Fake(next + 1), nullptr, Fake(next + 2), nullptr,
                                Fake(next + 3), Fake(next + 4), Fake(next + 5)});
      next += 6;
      KvCacheLayer cache;
      cache.keys = Fake(next++);
      cache.values = Fake(next++);
      caches.push_back(cache);
    }
    buffers.hidden = static_cast<float*>(Fake(next++));
    buffers.normed = Fake(next++);
    buffers.qkv = Fake(next++);
    buffers.attention = Fake(next++);
    buffers.projected = Fake(next++);
    buffers.gate_up = Fake(next++);
    buffers.ffn_act = Fake(next++);
    buffers.logits = Fake(next++);
    buffers.in_tokens = static_cast<const std::int32_t*>(Fake(next++));
    view.config = config;
    view.max_batch = 8;
    view.max_rows = 64;
    tp.view.ranks = 2;
    tp.view.rank = 1;
    tp.view.blocks = 16;
    tp.vocab_rows = 1024;
    tp.logits_part = Fake(next++);
  }
};

// The output a projection node writes, and whether it adds into the
// residual stream instead; false for a node that is no projection.
bool ProjectionOutput(const ops::OpNode& node, const void*& y, bool& adds) {
  const auto of = [&](const auto& a) {
    y = a.io.y;
    adds = a.output == decode::GemvOutput::kResidualAdd;
    return true;
  };
  if (node.kind == kKind<ops::Gemv>) return of(node.args<ops::Gemv>());
  if (node.kind == kKind<ops::WideGemv>) return of(node.args<ops::WideGemv>());
  if (node.kind == kKind<ops::Gemm>) return of(node.args<ops::Gemm>());
  if (node.kind == kKind<ops::Linear>) {
    y = node.args<ops::Linear>().y;
    adds = false;
    return true;
  }
  return false;
}

struct Lowering {
  PlanPath path;
  AttentionPlan attention;
  bool adds_to_residual;  // the GEMV plans' reduce adds into the stream
  std::string name;
};

TEST(StepPlanTest, TensorParallelPlansExchangeAfterEachPartialSumAndBeforeSelection) {
  const Fixture f;
  const Lowering lowerings[] = {
      {PlanPath::kGemv, AttentionPlan::kFusedRows, true, "GEMV"},
      {PlanPath::kWideGemv, AttentionPlan::kFusedRows, true, "wide GEMV"},
      {PlanPath::kCublasLt, AttentionPlan::kFusedRows, false, "cuBLASLt"},
      {PlanPath::kBatonGemm, AttentionPlan::kAppendThenChunks, false, "GEMM, chunks"},
  };
  for (const Lowering& l : lowerings) {
    SCOPED_TRACE(l.name);
    const std::vector<ops::OpNode> whole =
        PlanDecoderStep(f.config, f.weights, f.caches, f.buffers, f.view, l.path, l.attention);
    for (const ops::OpNode& node : whole) EXPECT_NE(node.kind, kKind<AllReduce>);

    const std::vector<ops::OpNode> plan = PlanDecoderStep(f.config, f.weights, f.caches, f.buffers,
                                                          f.view, l.path, l.attention, &f.tp);
    ASSERT_GE(plan.size(), 3u);
    EXPECT_EQ(plan.back().kind, kKind<ops::SelectAndEnd>);
    int reductions = 0, gathers = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const void* y = nullptr;
      bool adds = false;
      if (ProjectionOutput(plan[i], y, adds)) {
        EXPECT_FALSE(adds) << "node " << i << " adds into the residual stream before the ranks' sum";
      }
      if (plan[i].kind != kKind<AllReduce>) continue;
      const AllReduce::Args& a = plan[i].args<AllReduce>();
      ASSERT_GT(i, 0u);
      ASSERT_TRUE(ProjectionOutput(plan[i - 1], y, adds)) << "node " << i << " reduces no projection";
      EXPECT_EQ(a.view.rank, 1u);
      EXPECT_EQ(a.view.ranks, 2u);
      if (a.mode == AllReduce::Mode::kGather) {
        ++gathers;
        EXPECT_TRUE(plan[i].sequences);
        EXPECT_EQ(y, f.tp.logits_part);
        EXPECT_EQ(a.in, f.tp.logits_part);
        EXPECT_EQ(a.out, f.buffers.logits);
        EXPECT_EQ(a.width, 1024u);
        EXPECT_EQ(a.out_stride, 2048u);
        EXPECT_EQ(i + 2, plan.size()) << "the gather is selection's input";
        continue;
      }
      ++reductions;
      EXPECT_FALSE(plan[i].sequences);
      EXPECT_EQ(y, f.buffers.projected);
      EXPECT_EQ(a.in, f.buffers.projected);
      EXPECT_EQ(a.width, 256u);
      if (l.adds_to_residual) {
        EXPECT_EQ(a.mode, AllReduce::Mode::kAddToResidual);
        EXPECT_EQ(a.residual, f.buffers.hidden);
      } else {
        EXPECT_EQ(a.mode, AllReduce::Mode::kSum);
        EXPECT_EQ(a.out, f.buffers.projected);
        ASSERT_LT(i + 1, plan.size());
        EXPECT_EQ(plan[i + 1].kind, kKind<ops::RowNorm>) << "the residual norm adds the sum";
      }
    }
    EXPECT_EQ(reductions, 2 * f.config.layers);
    EXPECT_EQ(gathers, 1);
  }
}

}  // namespace
}  // namespace baton::detail
