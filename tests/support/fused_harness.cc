#include "support/fused_harness.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <utility>

#include "baton/cuda_resources.h"
#include "kernels/half_bits.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

bool PerPosition(const BufferSpec& spec) { return spec.rows == Dim::kCapacity; }

std::size_t ElementBytes(Elem elem) { return elem == Elem::kStorage ? 2 : 4; }

template <class T>
std::vector<std::uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<std::uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

HostBuffer Shaped(const BufferSpec& spec, const FusedShape& shape) {
  HostBuffer b;
  b.elem = spec.elem;
  b.rows = shape.Size(spec.rows);
  b.cols = shape.Size(spec.cols);
  return b;
}

HostBuffer DrawBuffer(const BufferSpec& spec, const FusedShape& shape, DecoderDType dtype) {
  HostBuffer b = Shaped(spec, shape);
  const std::size_t n = b.elements();
  const double stddev = spec.stddev == kFanIn ? 1.0 / std::sqrt(double(b.cols)) : spec.stddev;
  if (spec.elem == Elem::kToken) {
    const int vocab = shape.Config(dtype).vocab;
    std::vector<std::int32_t> tokens(n);
    for (auto& t : tokens) t = static_cast<std::int32_t>(Draw() % vocab);
    tokens[0] = vocab - 1;
    if (shape.active > 1) tokens[1] = -1;
    if (shape.active >= 4) tokens[shape.active - 2] = vocab;
    b.bytes = Bytes(tokens);
  } else if (spec.elem == Elem::kFloat32) {
    b.bytes = Bytes(RandomFloat(n, stddev));
  } else {
    b.bytes = Bytes(RandomHalf(n, dtype, stddev));
  }
  return b;
}

DeviceBuffer<std::uint8_t> UploadBytes(const std::vector<std::uint8_t>& bytes) {
  return Upload(bytes);
}

// One side's device buffers: its own (states, outputs, scratch) and
// pointers to every buffer by name (the shared inputs included).
struct Side {
  std::map<std::string, DeviceBuffer<std::uint8_t>> own;
  std::map<std::string, void*> pointers;
};

// A side of the full batch: states copied from `initial`, outputs and
// scratch poisoned, inputs from `shared`.
Side PrepareSide(const FusedCase& c, const FusedShape& shape,
                 const std::map<std::string, HostBuffer>& initial,
                 const std::map<std::string, DeviceBuffer<std::uint8_t>>& shared) {
  Side side;
  for (const BufferSpec& spec : c.buffers) {
    if (spec.role == Role::kInput) {
      side.pointers[spec.name] = shared.at(spec.name).data();
      continue;
    }
    auto buffer = spec.role == Role::kState
                      ? UploadBytes(initial.at(spec.name).bytes)
                      : Poisoned<std::uint8_t>(shape.Size(spec.rows) * shape.Size(spec.cols) *
                                               ElementBytes(spec.elem));
    side.pointers[spec.name] = buffer.data();
    side.own.emplace(spec.name, std::move(buffer));
  }
  return side;
}

std::map<std::string, HostBuffer> DownloadSide(const FusedCase& c, const FusedShape& shape,
                                               const Side& side) {
  std::map<std::string, HostBuffer> out;
  for (const BufferSpec& spec : c.buffers) {
    if (spec.role != Role::kState && spec.role != Role::kOutput) continue;
    HostBuffer b = Shaped(spec, shape);
    b.bytes = Download(side.own.at(spec.name));
    out.emplace(spec.name, std::move(b));
  }
  return out;
}

bool SameBits(const HostBuffer& a, std::size_t i, const HostBuffer& b, std::size_t j) {
  const std::size_t size = a.element_bytes();
  return std::memcmp(&a.bytes[i * size], &b.bytes[j * size], size) == 0;
}

bool IsPoison(const HostBuffer& b, std::size_t i) {
  const std::size_t size = b.element_bytes();
  return std::all_of(b.bytes.begin() + i * size, b.bytes.begin() + (i + 1) * size,
                     [](std::uint8_t v) { return v == 0xFF; });
}

std::string Where(const HostBuffer& b, std::size_t i) {
  return "row " + std::to_string(i / b.cols) + " element " + std::to_string(i % b.cols);
}

void CompareBuffer(const BufferSpec& spec, const FusedResult& r,
                   const std::map<std::string, HostBuffer>& separate) {
  SCOPED_TRACE(std::string("buffer ") + spec.name);
  const HostBuffer& f = r.fused.at(spec.name);
  const HostBuffer& s = separate.at(spec.name);
  const std::size_t live = PerPosition(spec) ? r.shape.active * f.cols : f.elements();
  if (spec.role == Role::kOutput) {
    for (std::size_t i = 0; i < live; ++i) {
      ASSERT_FALSE(IsPoison(f, i)) << "the fused kernel left " << Where(f, i) << " unwritten";
      ASSERT_FALSE(IsPoison(s, i)) << "the separate kernels left " << Where(s, i) << " unwritten";
    }
    for (std::size_t i = live; i < f.elements(); ++i) {
      ASSERT_TRUE(IsPoison(f, i)) << "the fused kernel wrote " << Where(f, i)
                                  << " past the live batch";
      ASSERT_TRUE(IsPoison(s, i)) << "the separate kernels wrote " << Where(s, i)
                                  << " past the live batch";
    }
  }
  if (spec.match == Match::kWithin) {
    std::vector<double> got, want;
    for (std::size_t i = 0; i < live; ++i) {
      got.push_back(f.Value(i, r.dtype));
      want.push_back(s.Value(i, r.dtype));
    }
    ExpectClose(r.key + "_vs_separate", r.dtype, got, want, static_cast<int>(f.cols));
  } else if (spec.match == Match::kBits) {
    // States: every element, past the live batch too (both must leave it).
    const std::size_t compared = spec.role == Role::kState ? f.elements() : live;
    for (std::size_t i = 0; i < compared; ++i) {
      ASSERT_TRUE(SameBits(f, i, s, i))
          << "fused and separate differ at " << Where(f, i) << ": fused " << f.Value(i, r.dtype)
          << ", separate " << s.Value(i, r.dtype);
    }
  }
  if (spec.role == Role::kState) {
    const HostBuffer& initial = r.initial.at(spec.name);
    if (PerPosition(spec)) {
      for (std::size_t i = live; i < f.elements(); ++i) {
        ASSERT_TRUE(SameBits(f, i, initial, i)) << Where(f, i) << " past the live batch changed";
      }
    }
    if (spec.must_change) {
      std::size_t changed = 0;
      for (std::size_t i = 0; i < live; ++i) changed += !SameBits(f, i, initial, i);
      EXPECT_GT(changed, live / 2) << "the fused kernel left the live rows nearly unchanged";
    }
  }
}

// Positions 0 and active - 1, each alone in a bucket of 1 (its rows of the
// per-position inputs and states, the shared inputs), give the fused run's
// bits of their rows.
void ExpectBatchInvariant(const FusedCase& c, const FusedResult& r,
                          const std::map<std::string, DeviceBuffer<std::uint8_t>>& shared,
                          cudaStream_t stream) {
  std::vector<std::uint32_t> positions = {0};
  if (r.shape.active > 1) positions.push_back(r.shape.active - 1);
  for (std::uint32_t p : positions) {
    SCOPED_TRACE("position " + std::to_string(p) + " alone in a bucket of 1");
    TestBatch one = MakeBatch(1, 1, 16);
    SplitScratch split(r.config, 1);
    Side side;
    for (const BufferSpec& spec : c.buffers) {
      ASSERT_TRUE(PerPosition(spec) || spec.role == Role::kInput)
          << spec.name << ": only per-position states and outputs can be run alone";
      if (!PerPosition(spec)) {
        side.pointers[spec.name] = shared.at(spec.name).data();
        continue;
      }
      const std::size_t row_bytes = r.shape.Size(spec.cols) * ElementBytes(spec.elem);
      DeviceBuffer<std::uint8_t> buffer;
      if (spec.role == Role::kInput || spec.role == Role::kState) {
        const auto& bytes = r.initial.at(spec.name).bytes;
        buffer = UploadBytes(std::vector<std::uint8_t>(bytes.begin() + p * row_bytes,
                                                       bytes.begin() + (p + 1) * row_bytes));
      } else {
        buffer = Poisoned<std::uint8_t>(row_bytes);
      }
      side.pointers[spec.name] = buffer.data();
      side.own.emplace(spec.name, std::move(buffer));
    }
    Launch alone_launch(r.config, r.shape.out_features, one.view, stream, side.pointers);
    alone_launch.scratch = split.view;
    ASSERT_EQ(c.fused(alone_launch), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (const BufferSpec& spec : c.buffers) {
      if (spec.role != Role::kState && spec.role != Role::kOutput) continue;
      const HostBuffer& full = r.fused.at(spec.name);
      HostBuffer alone = full;
      alone.rows = 1;
      alone.bytes = Download(side.own.at(spec.name));
      for (std::size_t i = 0; i < full.cols; ++i) {
        ASSERT_TRUE(SameBits(alone, i, full, p * full.cols + i))
            << spec.name << " element " << i << " differs between the full batch ("
            << full.Value(p * full.cols + i, r.dtype) << ") and a bucket of 1 ("
            << alone.Value(i, r.dtype) << ")";
      }
    }
  }
}

}  // namespace

BufferSpec Weight(const char* name, Dim rows, Dim cols, double stddev) {
  return {name, Elem::kStorage, Role::kInput, rows, cols, stddev};
}
BufferSpec Activation(const char* name, Elem elem, Dim cols, double stddev) {
  return {name, elem, Role::kInput, Dim::kCapacity, cols, stddev};
}
BufferSpec Tokens(const char* name) {
  return {name, Elem::kToken, Role::kInput, Dim::kCapacity, Dim::kOne};
}
BufferSpec State(const char* name, Elem elem, Dim rows, Dim cols, double stddev, bool must_change) {
  return {name, elem, Role::kState, rows, cols, stddev, Match::kBits, must_change};
}
BufferSpec Output(const char* name, Elem elem, Dim cols, Match match) {
  return {name, elem, Role::kOutput, Dim::kCapacity, cols, 0.0, match};
}
BufferSpec Scratch(const char* name, Dim cols) {
  return {name, Elem::kStorage, Role::kScratch, Dim::kCapacity, cols};
}

FusedShape Batch(std::uint32_t capacity, std::uint32_t active) {
  FusedShape s;
  s.capacity = capacity;
  s.active = active;
  return s;
}

// clang-format off
FusedShape FusedShape::DModel(int v) const { FusedShape s = *this; s.d_model = v; return s; }
FusedShape FusedShape::Ffn(int v) const { FusedShape s = *this; s.ffn = v; return s; }
FusedShape FusedShape::Vocab(int v) const { FusedShape s = *this; s.vocab = v; return s; }
FusedShape FusedShape::Out(int v) const { FusedShape s = *this; s.out_features = v; return s; }
// clang-format on

FusedShape FusedShape::Attention(int h, int hd, int context,
                                 std::vector<std::int32_t> by_position) const {
  FusedShape s = *this;
  s.heads = h;
  s.head_dim = hd;
  s.max_context = context;
  s.positions = std::move(by_position);
  return s;
}

DecoderConfig FusedShape::Config(DecoderDType dtype) const {
  DecoderConfig config;
  config.dtype = dtype;
  if (d_model > 0) config.d_model = d_model;
  if (ffn > 0) config.ffn = ffn;
  if (vocab > 0) config.vocab = vocab;
  if (heads > 0) config.heads = heads;
  if (head_dim > 0) config.head_dim = head_dim;
  if (max_context > 0) config.max_context = max_context;
  return config;
}

// As tests/ops/decode_attention_gpu_test.cc: slots beyond the batch's, so that slot and
// position differ.
std::uint32_t FusedShape::MaxSlots() const { return positions.empty() ? 16 : capacity + 3; }

std::size_t FusedShape::Size(Dim dim) const {
  const DecoderConfig c = Config(DecoderDType::kFloat16);
  switch (dim) {
    case Dim::kOne:
      return 1;
    case Dim::kCapacity:
      return capacity;
    case Dim::kDModel:
      return c.d_model;
    case Dim::kFfn:
      return c.ffn;
    case Dim::kTwoFfn:
      return 2 * std::size_t(c.ffn);
    case Dim::kVocab:
      return c.vocab;
    case Dim::kOut:
      return out_features;
    case Dim::kQkvWidth:
      return c.qkv_width();
    case Dim::kAttentionWidth:
      return c.attention_width();
    case Dim::kCacheRows:
      return std::size_t(MaxSlots()) * c.key_value_heads() * c.max_context;
    case Dim::kHeadDim:
      return c.head_dim;
  }
  return 0;
}

std::string FusedShape::Name() const {
  std::string name;
  const auto add = [&](const char* what, int v) {
    if (v > 0) name += what + std::to_string(v) + "_";
  };
  add("vocab", vocab);
  add("d", d_model);
  add("ffn", ffn);
  add("out", out_features);
  if (heads > 0) name += "h" + std::to_string(heads) + "x" + std::to_string(head_dim) + "_";
  add("ctx", max_context);
  return name + "b" + std::to_string(active) + "of" + std::to_string(capacity);
}

void* Launch::operator[](const std::string& name) const {
  const auto it = buffers_.find(name);
  if (it == buffers_.end()) {
    ADD_FAILURE() << "the launcher reads a buffer the case does not name: " << name;
    return nullptr;
  }
  return it->second;
}
float* Launch::f32(const std::string& name) const { return static_cast<float*>((*this)[name]); }
const std::int32_t* Launch::tokens(const std::string& name) const {
  return static_cast<const std::int32_t*>((*this)[name]);
}
KvCacheLayer Launch::cache() const { return KvCacheLayer{(*this)["keys"], (*this)["values"]}; }

double HostBuffer::Value(std::size_t i, DecoderDType dtype) const {
  if (elem == Elem::kStorage) {
    std::uint16_t bits;
    std::memcpy(&bits, &bytes[i * 2], 2);
    return HalfBitsToFloat(bits, dtype);
  }
  if (elem == Elem::kFloat32) {
    float v;
    std::memcpy(&v, &bytes[i * 4], 4);
    return v;
  }
  std::int32_t t;
  std::memcpy(&t, &bytes[i * 4], 4);
  return t;
}

std::vector<float> HostBuffer::Floats(DecoderDType dtype) const {
  std::vector<float> out(elements());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(Value(i, dtype));
  return out;
}

std::vector<FusedParam> FusedParams(const std::vector<FusedCase>& cases) {
  std::vector<FusedParam> params;
  for (const FusedCase& c : cases) {
    for (std::size_t s = 0; s < c.shapes.size(); ++s) {
      for (DecoderDType dtype : kDTypes) params.push_back({&c, s, dtype});
    }
  }
  return params;
}

std::string FusedParamName(const ::testing::TestParamInfo<FusedParam>& info) {
  const FusedParam& p = info.param;
  return std::string(p.fused_case->name) + "_" + p.fused_case->shapes[p.shape].Name() + "_" +
         Name(p.dtype);
}

void PrintTo(const FusedParam& p, std::ostream* os) {
  *os << p.fused_case->name << " " << p.fused_case->shapes[p.shape].Name() << " " << Name(p.dtype);
}

void RunFusedCase(const FusedCase& c, const FusedShape& shape, DecoderDType dtype,
                  cudaStream_t stream) {
  const DecoderConfig config = shape.Config(dtype);
  std::vector<std::int32_t> positions = shape.positions;
  std::uniform_int_distribution<std::int32_t> any(0, config.max_context - 1);
  for (auto& pos : positions) {
    if (pos == kAnyPosition) pos = any(Rng());
  }
  TestBatch batch = MakeBatch(shape.capacity, shape.active, shape.MaxSlots(), positions);
  // Drawn in the table's order, so that a seed replays the same inputs.
  FusedResult r{c.key, shape, dtype, config, {}, {}};
  std::map<std::string, DeviceBuffer<std::uint8_t>> shared;
  for (const BufferSpec& spec : c.buffers) {
    if (spec.role != Role::kInput && spec.role != Role::kState) continue;
    HostBuffer b = DrawBuffer(spec, shape, dtype);
    if (spec.role == Role::kInput) shared.emplace(spec.name, UploadBytes(b.bytes));
    r.initial.emplace(spec.name, std::move(b));
  }
  Side fused = PrepareSide(c, shape, r.initial, shared);
  Side separate = PrepareSide(c, shape, r.initial, shared);
  SplitScratch split(config, shape.capacity);
  Launch fused_launch(config, shape.out_features, batch.view, stream, fused.pointers);
  Launch separate_launch(config, shape.out_features, batch.view, stream, separate.pointers);
  fused_launch.scratch = separate_launch.scratch = split.view;
  ASSERT_EQ(c.fused(fused_launch), cudaSuccess) << "the fused kernel";
  for (std::size_t i = 0; i < c.separate.size(); ++i) {
    ASSERT_EQ(c.separate[i](separate_launch), cudaSuccess) << "separate kernel " << i;
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  split.ExpectArrivalsZero();
  r.fused = DownloadSide(c, shape, fused);
  const auto separate_out = DownloadSide(c, shape, separate);
  for (const BufferSpec& spec : c.buffers) {
    if (spec.match != Match::kNone) CompareBuffer(spec, r, separate_out);
  }
  if (::testing::Test::HasFatalFailure()) return;
  if (c.reference != nullptr) c.reference(r);
  if (c.batch_invariant) ExpectBatchInvariant(c, r, shared, stream);
}

}  // namespace baton::kernel_test
