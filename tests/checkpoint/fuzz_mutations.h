// Mutations for checkpoint_fuzz_test: each turns a valid tiny checkpoint into
// a damaged one of one kind (bytes of the length field or the header,
// truncations, structured edits of the safetensors header, the tensor list,
// config.json or the shard index, deep nesting).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tiny_checkpoint.h"

namespace baton::checkpoint::fuzz {

using Rng = std::mt19937_64;

enum Kind {
  kUnmutated,
  kLengthBytes,
  kHeaderBytes,
  kTruncate,
  kHeaderJson,
  kTensorList,
  kConfigJson,
  kConfigBytes,
  kIndexJson,
  kDeepNesting,
  kKinds
};
constexpr std::array<const char*, kKinds> kKindNames = {
    "unmutated",   "length bytes", "header bytes", "truncation",  "header JSON",
    "tensor list", "config JSON",  "config bytes", "shard index", "deep nesting"};

inline std::uint64_t Below(Rng& rng, std::uint64_t n) { return n == 0 ? 0 : rng() % n; }

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& items) {
  return items[Below(rng, items.size())];
}

struct Input {
  std::string config;
  std::map<std::string, std::string> files;
};

struct Base {
  testing::TinyCheckpoint checkpoint;
  testing::TinyOptions options;
  bool sharded = false;
};

// Every architecture, single file and sharded, v4 and v5 config style.
[[nodiscard]] std::vector<Base> MakeBases(std::uint64_t seed);

// Applies one mutation of `kind` to `in` (a copy of `base`'s files).
void Mutate(Kind kind, Rng& rng, const Base& base, Input& in);

}  // namespace baton::checkpoint::fuzz
