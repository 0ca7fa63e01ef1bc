// Every fused decode kernel against the separate kernels it replaces, as one
// table (support/fused_harness.h runs it): each case names the fused
// launcher, the sequence of separate launchers, the buffers to draw, and
// which outputs must be bit-identical (what the kernel's contract in
// src/ops promises) and which only within the tolerances of
// support/kernel_harness.h (the RMSNorm fused into the GEMV sums the squares
// in another order, so its normed input may differ in the last bit). Each
// (case, shape, dtype) is a test of its own; where a case has a CPU
// reference check, the fused outputs are checked against it too.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/fused_harness.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

// The launchers of the table, on buffers named alike in every case: table,
// tokens, norm (the RMSNorm weight), hidden (the fp32 residual stream),
// normed (the RMSNorm's output), delta (what the residual add adds), w, x,
// gate_up, act (SiLU·mul's output), y, qkv, keys, values, out.
namespace launch {

cudaError_t Embedding(const Launch& l) {
  return ops::Enqueue(
      ops::RowNorm::embedding(l.config, l["table"], l.tokens("tokens"), l.batch, l.f32("hidden")),
      l.stream);
}
cudaError_t RmsNorm(const Launch& l) {
  return ops::Enqueue(
      ops::RowNorm::rms_norm(l.config, l.f32("hidden"), l["norm"], l.batch, l["normed"]), l.stream);
}
cudaError_t ResidualAdd(const Launch& l) {
  return ops::Enqueue(ops::RowNorm::residual_add(l.config, l.f32("hidden"), l["delta"], l.batch),
                      l.stream);
}
cudaError_t EmbeddingRmsNorm(const Launch& l) {
  return ops::Enqueue(
      ops::RowNorm::embedding_rms_norm(l.config, l["table"], l.tokens("tokens"), l["norm"], l.batch,
                                       l.f32("hidden"), l["normed"]),
      l.stream);
}
cudaError_t ResidualAddRmsNorm(const Launch& l) {
  return ops::Enqueue(ops::RowNorm::residual_add_rms_norm(l.config, l.f32("hidden"), l["delta"],
                                                          l["norm"], l.batch, l["normed"]),
                      l.stream);
}
cudaError_t SiluMul(const Launch& l) {
  return ops::Enqueue(ops::SiluMul::of(l.config, l["gate_up"], l.batch, l["act"]), l.stream);
}
// y = W · act, W [out_features, ffn].
cudaError_t GemvOfAct(const Launch& l) {
  return ops::Enqueue(
      ops::Gemv::plain(l.dtype, l["w"], l.out_features, l.config.ffn, l["act"], l.batch, l["y"]),
      l.stream);
}
cudaError_t GatedGemv(const Launch& l) {
  return ops::Enqueue(ops::Gemv::gated(l.dtype, l["w"], l.out_features, l.config.ffn, l["gate_up"],
                                       l.batch, l["y"]),
                      l.stream);
}
// y = W · normed, W [out_features, d_model].
cudaError_t GemvOfNormed(const Launch& l) {
  return ops::Enqueue(ops::Gemv::plain(l.dtype, l["w"], l.out_features, l.config.d_model,
                                       l["normed"], l.batch, l["y"]),
                      l.stream);
}
cudaError_t RmsNormGemv(const Launch& l) {
  return ops::Enqueue(ops::Gemv::rms_norm(l.config, l["w"], l.out_features, l.f32("hidden"),
                                          l["norm"], l.batch, l["y"]),
                      l.stream);
}
cudaError_t EmbeddingRmsNormGemv(const Launch& l) {
  return ops::Enqueue(
      ops::Gemv::embedding_rms_norm(l.config, l["table"], l.tokens("tokens"), l["w"],
                                    l.out_features, l["norm"], l.batch, l.f32("hidden"), l["y"]),
      l.stream);
}
// delta = W · x or W · silu_mul(gate_up), W [d_model, ffn].
cudaError_t GemvToDelta(const Launch& l) {
  return ops::Enqueue(ops::Gemv::plain(l.dtype, l["w"], l.config.d_model, l.config.ffn, l["x"],
                                       l.batch, l["delta"]),
                      l.stream);
}
cudaError_t GatedGemvToDelta(const Launch& l) {
  return ops::Enqueue(ops::Gemv::gated(l.dtype, l["w"], l.config.d_model, l.config.ffn,
                                       l["gate_up"], l.batch, l["delta"]),
                      l.stream);
}
cudaError_t GemvResidualAdd(const Launch& l) {
  return ops::Enqueue(
      ops::Gemv::residual_add(l.config, l["w"], l.config.ffn, l["x"], l.batch, l.f32("hidden")),
      l.stream);
}
cudaError_t GatedGemvResidualAdd(const Launch& l) {
  return ops::Enqueue(ops::Gemv::gated_residual_add(l.config, l["w"], l.config.ffn, l["gate_up"],
                                                    l.batch, l.f32("hidden")),
                      l.stream);
}
// gate_up = W · normed (or W · RMSNorm(hidden)), W [2 * ffn, d_model]; the
// fused forms store silu(gate) * up into act.
cudaError_t GemvToGateUp(const Launch& l) {
  return ops::Enqueue(ops::Gemv::plain(l.dtype, l["w"], 2 * l.config.ffn, l.config.d_model,
                                       l["normed"], l.batch, l["gate_up"]),
                      l.stream);
}
cudaError_t GemvSiluMul(const Launch& l) {
  return ops::Enqueue(
      ops::Gemv::fused(l.dtype, detail::decode::GemvInput::kPlain,
                       detail::decode::GemvOutput::kSiluMul, l["w"], 2 * l.config.ffn,
                       l.config.d_model, detail::decode::GemvIo::plain(l["normed"], l["act"]),
                       l.batch),
      l.stream);
}
cudaError_t RmsNormGemvToGateUp(const Launch& l) {
  return ops::Enqueue(ops::Gemv::rms_norm(l.config, l["w"], 2 * l.config.ffn, l.f32("hidden"),
                                          l["norm"], l.batch, l["gate_up"]),
                      l.stream);
}
cudaError_t RmsNormGemvSiluMul(const Launch& l) {
  return ops::Enqueue(
      ops::Gemv::fused(
          l.dtype, detail::decode::GemvInput::kRmsNorm, detail::decode::GemvOutput::kSiluMul,
          l["w"], 2 * l.config.ffn, l.config.d_model,
          detail::decode::GemvIo::rms_norm(l.config, l.f32("hidden"), l["norm"], l["act"]),
          l.batch),
      l.stream);
}
cudaError_t RopeAppendKv(const Launch& l) {
  return ops::Enqueue(ops::RopeAppend::of(l.config, l.f32("rope"), l["qkv"], l.cache(), l.batch),
                      l.stream);
}
cudaError_t DecodeAttention(const Launch& l) {
  return ops::Enqueue(
      ops::Attention::decode(l.config, l["qkv"], l.cache(), l.batch, l.scratch, l["out"]),
      l.stream);
}
cudaError_t RopeAttention(const Launch& l) {
  return ops::Enqueue(ops::Attention::with_rope(l.config, l.f32("rope"), l["qkv"], l.cache(),
                                                l.batch, l.scratch, l["out"]),
                      l.stream);
}

}  // namespace launch

// The reference checks of the fused outputs.

std::vector<double> LiveValues(const FusedResult& r, const std::string& name) {
  const HostBuffer& b = r.fused.at(name);
  std::vector<double> out(r.shape.active * b.cols);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = b.Value(i, r.dtype);
  return out;
}

// The RMSNorm of each live row of `hidden`, optionally rounded to the
// storage type (the GEMV's input).
std::vector<double> NormRows(const FusedResult& r, const std::vector<float>& hidden, bool round) {
  const int d = r.config.d_model;
  const auto weight = r.initial.at("norm").Floats(r.dtype);
  std::vector<double> out;
  for (std::uint32_t p = 0; p < r.shape.active; ++p) {
    for (double v :
         reference::RmsNorm(&hidden[std::size_t{p} * d], weight.data(), d, r.config.rms_epsilon)) {
      out.push_back(round ? RoundToStorage(v, r.dtype) : v);
    }
  }
  return out;
}

// W · x[p] for each live row of x (x [active, in_features]).
std::vector<double> GemvRows(const FusedResult& r, const std::vector<double>& x, int in_features) {
  const auto w = r.initial.at("w").Floats(r.dtype);
  std::vector<double> y;
  for (std::uint32_t p = 0; p < r.shape.active; ++p) {
    const std::vector<float> row(x.begin() + std::size_t{p} * in_features,
                                 x.begin() + std::size_t{p + 1} * in_features);
    for (double v : reference::Gemv(w.data(), row.data(), r.shape.out_features, in_features)) {
      y.push_back(v);
    }
  }
  return y;
}

// hidden's live rows hold their tokens' table rows, exactly; a token
// outside the table gives a zero row.
void ExpectEmbeddedRows(const FusedResult& r) {
  const int d = r.config.d_model, vocab = r.config.vocab;
  const HostBuffer& table = r.initial.at("table");
  const auto tokens = r.initial.at("tokens").As<std::int32_t>();
  const auto hidden = r.fused.at("hidden").As<float>();
  for (std::uint32_t p = 0; p < r.shape.active; ++p) {
    const bool valid = tokens[p] >= 0 && tokens[p] < vocab;
    for (int i = 0; i < d; ++i) {
      const double expected =
          valid ? table.Value(static_cast<std::size_t>(tokens[p]) * d + i, r.dtype) : 0.0;
      ASSERT_EQ(hidden[std::size_t{p} * d + i], expected)
          << "hidden, position " << p << " (token " << tokens[p] << ") element " << i;
    }
  }
}

void CheckEmbeddingRmsNorm(const FusedResult& r) {
  ASSERT_NO_FATAL_FAILURE(ExpectEmbeddedRows(r));
  const auto hidden = r.fused.at("hidden").As<float>();
  ExpectClose(r.key, r.dtype, LiveValues(r, "normed"), NormRows(r, hidden, false),
              r.config.d_model);
}

// hidden += delta exactly, then the norm of the new hidden.
void CheckResidualAddRmsNorm(const FusedResult& r) {
  const auto hidden0 = r.initial.at("hidden").As<float>();
  const HostBuffer& delta = r.initial.at("delta");
  const auto hidden = r.fused.at("hidden").As<float>();
  for (std::size_t i = 0; i < r.shape.active * std::size_t(r.config.d_model); ++i) {
    ASSERT_EQ(hidden[i], hidden0[i] + static_cast<float>(delta.Value(i, r.dtype)))
        << "hidden element " << i;
  }
  ExpectClose(r.key, r.dtype, LiveValues(r, "normed"), NormRows(r, hidden, false),
              r.config.d_model);
}

// W · m, m = silu(gate) * up rounded to the storage type.
void CheckGatedGemv(const FusedResult& r) {
  const int ffn = r.config.ffn;
  const auto gate_up = r.initial.at("gate_up").Floats(r.dtype);
  std::vector<double> act;
  for (std::uint32_t p = 0; p < r.shape.active; ++p) {
    const float* row = &gate_up[std::size_t{p} * 2 * ffn];
    for (int i = 0; i < ffn; ++i) {
      act.push_back(RoundToStorage(reference::SiluMul(row[i], row[ffn + i]), r.dtype));
    }
  }
  ExpectClose(r.key, r.dtype, LiveValues(r, "y"), GemvRows(r, act, ffn), r.shape.out_features);
}

// silu(g) * u with g and u the rows of W · x[p] rounded to the storage type
// (W [2 * ffn, d_model]: gate rows, then up rows).
std::vector<double> SiluOfGateUp(const FusedResult& r, const std::vector<double>& x) {
  const int d = r.config.d_model, ffn = r.config.ffn;
  const auto w = r.initial.at("w").Floats(r.dtype);
  std::vector<double> act;
  for (std::uint32_t p = 0; p < r.shape.active; ++p) {
    const std::vector<float> row(x.begin() + std::size_t{p} * d,
                                 x.begin() + std::size_t{p + 1} * d);
    const std::vector<double> gate_up = reference::Gemv(w.data(), row.data(), 2 * ffn, d);
    for (int i = 0; i < ffn; ++i) {
      act.push_back(reference::SiluMul(RoundToStorage(gate_up[i], r.dtype),
                                       RoundToStorage(gate_up[ffn + i], r.dtype)));
    }
  }
  return act;
}

void CheckGemvSiluMul(const FusedResult& r) {
  const auto normed = r.initial.at("normed").Floats(r.dtype);  // an input: drawn once
  ExpectClose(r.key, r.dtype, LiveValues(r, "act"),
              SiluOfGateUp(r, std::vector<double>(normed.begin(), normed.end())), r.config.ffn);
}

void CheckRmsNormGemvSiluMul(const FusedResult& r) {
  const auto hidden = r.initial.at("hidden").As<float>();
  ExpectClose(r.key, r.dtype, LiveValues(r, "act"), SiluOfGateUp(r, NormRows(r, hidden, true)),
              r.config.ffn);
}

// W · n, n the norm of hidden rounded to the storage type.
void CheckRmsNormGemv(const FusedResult& r) {
  const auto hidden = r.initial.at("hidden").As<float>();
  ExpectClose(r.key, r.dtype, LiveValues(r, "y"),
              GemvRows(r, NormRows(r, hidden, true), r.config.d_model), r.shape.out_features);
}

void CheckEmbeddingRmsNormGemv(const FusedResult& r) {
  ASSERT_NO_FATAL_FAILURE(ExpectEmbeddedRows(r));
  const auto hidden = r.fused.at("hidden").As<float>();
  ExpectClose(r.key, r.dtype, LiveValues(r, "y"),
              GemvRows(r, NormRows(r, hidden, true), r.config.d_model), r.shape.out_features);
}

const std::vector<FusedCase>& FusedCases() {
  // The shapes the residual-add GEMVs run: a d_model 264 row from an FFN
  // row of 2824 (more than one chunk of a row per lane), a bucket of 1, and
  // a bucket of 32 (four position tiles, the last partly live).
  static const std::vector<FusedShape> kResidualGemvShapes = {
      Batch(10, 9).DModel(264).Ffn(2824),
      Batch(1, 1).DModel(520).Ffn(1368),
      Batch(32, 27).DModel(264).Ffn(1368),
  };
  static const std::vector<FusedCase> cases = {
      // ops::RowNorm::embedding then ops::RowNorm::rms_norm, "with the same results".
      {"EmbeddingRmsNorm",
       "embedding_rms_norm",
       {Weight("table", Dim::kVocab, Dim::kDModel), Tokens("tokens"),
        Weight("norm", Dim::kOne, Dim::kDModel),
        Output("hidden", Elem::kFloat32, Dim::kDModel, Match::kBits),
        Output("normed", Elem::kStorage, Dim::kDModel, Match::kBits)},
       launch::EmbeddingRmsNorm,
       {launch::Embedding, launch::RmsNorm},
       CheckEmbeddingRmsNorm,
       false,
       // 5000: rows longer than a thread keeps in registers.
       {Batch(7, 6).Vocab(1000).DModel(264), Batch(3, 3).Vocab(512).DModel(5000)}},
      // ops::RowNorm::residual_add then ops::RowNorm::rms_norm: "hidden bit-identical, out
      // rounded once from fp32".
      {"ResidualAddRmsNorm",
       "residual_rms_norm",
       {Activation("delta", Elem::kStorage, Dim::kDModel, 1.0),
        Weight("norm", Dim::kOne, Dim::kDModel),
        State("hidden", Elem::kFloat32, Dim::kCapacity, Dim::kDModel, 2.0, true),
        Output("normed", Elem::kStorage, Dim::kDModel, Match::kBits)},
       launch::ResidualAddRmsNorm,
       {launch::ResidualAdd, launch::RmsNorm},
       CheckResidualAddRmsNorm,
       false,
       {Batch(5, 4).DModel(520), Batch(5, 4).DModel(5000), Batch(16, 13).DModel(1032)}},
      // "y is bit-identical to ops::SiluMul followed by ops::Gemv::plain".
      {"GatedGemv",
       "gated_gemv",
       {Weight("w", Dim::kOut, Dim::kFfn, kFanIn),
        Activation("gate_up", Elem::kStorage, Dim::kTwoFfn, 2.0), Scratch("act", Dim::kFfn),
        Output("y", Elem::kStorage, Dim::kOut, Match::kBits)},
       launch::GatedGemv,
       {launch::SiluMul, launch::GemvOfAct},
       CheckGatedGemv,
       true,
       {Batch(11, 10).Ffn(2824).Out(777), Batch(1, 1).Ffn(1368).Out(264),
        Batch(17, 17).Ffn(512).Out(1001), Batch(32, 30).Ffn(1368).Out(520)}},
      // The gate | up GEMV with SiLU * up as its output (GemvOutput::kSiluMul):
      // "bit-identical to the stored GEMV (or RMSNorm GEMV) followed by
      // ops::SiluMul". ffn 1368: 171 row blocks of 8 gate and 8 up rows;
      // d_model 4104: K split across a cluster of 3.
      {"GemvSiluMul",
       "gemv_silu_mul",
       {Weight("w", Dim::kTwoFfn, Dim::kDModel, kFanIn),
        Activation("normed", Elem::kStorage, Dim::kDModel, 1.0), Scratch("gate_up", Dim::kTwoFfn),
        Output("act", Elem::kStorage, Dim::kFfn, Match::kBits)},
       launch::GemvSiluMul,
       {launch::GemvToGateUp, launch::SiluMul},
       CheckGemvSiluMul,
       true,
       {Batch(11, 10).DModel(264).Ffn(1368), Batch(1, 1).DModel(520).Ffn(2824),
        Batch(17, 17).DModel(4104).Ffn(512), Batch(32, 30).DModel(264).Ffn(1032)}},
      {"RmsNormGemvSiluMul",
       "rms_norm_gemv_silu_mul",
       {Activation("hidden", Elem::kFloat32, Dim::kDModel, 3.0),
        Weight("norm", Dim::kOne, Dim::kDModel), Weight("w", Dim::kTwoFfn, Dim::kDModel, kFanIn),
        Scratch("gate_up", Dim::kTwoFfn), Output("act", Elem::kStorage, Dim::kFfn, Match::kBits)},
       launch::RmsNormGemvSiluMul,
       {launch::RmsNormGemvToGateUp, launch::SiluMul},
       CheckRmsNormGemvSiluMul,
       true,
       {Batch(3, 2).DModel(264).Ffn(1368), Batch(17, 16).DModel(4104).Ffn(512),
        Batch(32, 31).DModel(1032).Ffn(520)}},
      // ops::RowNorm::rms_norm into ops::Gemv::plain's input: "n may differ from its
      // output in the last bit of the dtype (not bit-identical)".
      {"RmsNormGemv",
       "rms_norm_gemv",
       {Activation("hidden", Elem::kFloat32, Dim::kDModel, 3.0),
        Weight("norm", Dim::kOne, Dim::kDModel), Weight("w", Dim::kOut, Dim::kDModel, kFanIn),
        Scratch("normed", Dim::kDModel), Output("y", Elem::kStorage, Dim::kOut, Match::kWithin)},
       launch::RmsNormGemv,
       {launch::RmsNorm, launch::GemvOfNormed},
       CheckRmsNormGemv,
       true,
       // 1032: a partial k-block, float4 rows, more than a warp's 8 loads,
       // two position tiles the second partial; 4096: K split in 4 (17
       // positions: a third tile past the live batch); 32: four tiles.
       {Batch(11, 9).DModel(1032).Out(777), Batch(3, 2).DModel(264).Out(520),
        Batch(17, 16).DModel(4096).Out(256), Batch(32, 31).DModel(1032).Out(264)}},
      // ops::RowNorm::embedding then ops::Gemv::rms_norm: "hidden and y
      // bit-identical". 12 positions span two position tiles, so two blocks
      // of the first row block store hidden.
      {"EmbeddingRmsNormGemv",
       "embedding_rms_norm_gemv",
       {Weight("table", Dim::kVocab, Dim::kDModel), Tokens("tokens"),
        Weight("norm", Dim::kOne, Dim::kDModel), Weight("w", Dim::kOut, Dim::kDModel, kFanIn),
        Output("hidden", Elem::kFloat32, Dim::kDModel, Match::kBits),
        Output("y", Elem::kStorage, Dim::kOut, Match::kBits)},
       launch::EmbeddingRmsNormGemv,
       {launch::Embedding, launch::RmsNormGemv},
       CheckEmbeddingRmsNormGemv,
       true,
       {Batch(13, 12).Vocab(1000).DModel(264).Out(520),
        Batch(5, 5).Vocab(1000).DModel(1032).Out(777),
        Batch(29, 29).Vocab(1000).DModel(520).Out(264)}},
      // ops::Gemv::plain then ops::RowNorm::residual_add, "bit-identical to the two
      // kernels"; the residual stream past the live batch is left alone.
      {"GemvResidualAdd",
       "gemv_residual_add",
       {Weight("w", Dim::kDModel, Dim::kFfn, kFanIn),
        Activation("x", Elem::kStorage, Dim::kFfn, 1.0), Scratch("delta", Dim::kDModel),
        State("hidden", Elem::kFloat32, Dim::kCapacity, Dim::kDModel, 2.0, true)},
       launch::GemvResidualAdd,
       {launch::GemvToDelta, launch::ResidualAdd},
       nullptr,
       true,
       kResidualGemvShapes},
      // ops::Gemv::gated then ops::RowNorm::residual_add, "bit-identical to the two
      // kernels".
      {"GatedGemvResidualAdd",
       "gated_gemv_residual_add",
       {Weight("w", Dim::kDModel, Dim::kFfn, kFanIn),
        Activation("gate_up", Elem::kStorage, Dim::kTwoFfn, 2.0), Scratch("delta", Dim::kDModel),
        State("hidden", Elem::kFloat32, Dim::kCapacity, Dim::kDModel, 2.0, true)},
       launch::GatedGemvResidualAdd,
       {launch::GatedGemvToDelta, launch::ResidualAdd},
       nullptr,
       true,
       kResidualGemvShapes},
      // ops::RopeAppend then ops::Attention::decode: "Same results and
      // contract". The same bits, since both run one RoPE and attend from
      // the same rounded q and k (decode_attention_gpu_test.cc checks both
      // against the CPU reference). Contexts as there: 1 token, 2, not a
      // multiple of 128 or 32, the full max_context.
      {"RopeAttention",
       "rope_attention",
       {State("qkv", Elem::kStorage, Dim::kCapacity, Dim::kQkvWidth, 1.0, false),
        // Any frequency table: both sides read the same one.
        State("rope", Elem::kFloat32, Dim::kOne, Dim::kHeadDim, 0.05, false),
        State("keys", Elem::kStorage, Dim::kCacheRows, Dim::kHeadDim, 1.0, false),
        State("values", Elem::kStorage, Dim::kCacheRows, Dim::kHeadDim, 1.0, false),
        Output("out", Elem::kStorage, Dim::kAttentionWidth, Match::kBits)},
       launch::RopeAttention,
       {launch::RopeAppendKv, launch::DecodeAttention},
       nullptr,
       false,
       {Batch(6, 5).Attention(4, 64, 300, {0, 1, 129, 299, kAnyPosition}),
        Batch(7, 6).Attention(2, 96, 1000, {517, 0, 999, 31, kAnyPosition, kAnyPosition}),
        Batch(4, 3).Attention(3, 128, 2048, {2047, 1500, 1}),
        Batch(4, 3).Attention(4, 10, 64, {0, 63, 17})}},
  };
  return cases;
}

class FusedKernelTest : public DecodeKernelTest,
                        public ::testing::WithParamInterface<FusedParam> {};

TEST_P(FusedKernelTest, EqualsTheSeparateKernels) {
  const FusedParam& p = GetParam();
  RunFusedCase(*p.fused_case, p.fused_case->shapes[p.shape], p.dtype, stream_.get());
}

INSTANTIATE_TEST_SUITE_P(, FusedKernelTest, ::testing::ValuesIn(FusedParams(FusedCases())),
                         FusedParamName);

}  // namespace
}  // namespace baton::kernel_test
