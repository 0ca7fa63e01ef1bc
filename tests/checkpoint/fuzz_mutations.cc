#include "fuzz_mutations.h"

#include <nlohmann/json.hpp>

namespace baton::checkpoint::fuzz {
namespace {

using Json = nlohmann::json;

// The safetensors file names of an input (not the index).
std::vector<std::string> WeightFiles(const Input& in) {
  std::vector<std::string> names;
  for (const auto& entry : in.files) {
    if (entry.first != "model.safetensors.index.json") names.push_back(entry.first);
  }
  return names;
}

std::uint64_t HeaderLength(const std::string& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0 && file.size() >= 8; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  return n;
}

char InterestingByte(Rng& rng) {
  static constexpr char kBytes[] = "{}[]\":,0123456789-+.eE\\ntfu \x00\xff\xc3\x80\x7f";
  constexpr std::size_t kCount = sizeof(kBytes) - 1;  // the NUL inside counts, the last does not
  return Below(rng, 3) == 0 ? static_cast<char>(rng() & 0xff) : kBytes[Below(rng, kCount)];
}

Json RandomValue(Rng& rng) {
  switch (Below(rng, 16)) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return -1;
    case 3:
      return 0;
    case 4:
      return 2.5;
    case 5:
      return 1e30;
    case 6:
      return 2147483648LL;
    case 7:
      return 9223372036854775807LL;
    case 8:
      return 18446744073709551615ULL;
    case 9:
      return "NaN";
    case 10:
      return "32";
    case 11:
      return Json::array({1, 2});
    case 12:
      return Json::object({{"a", 1}});
    case 13:
      return -2147483648LL;
    case 14:
      return static_cast<std::int64_t>(Below(rng, 70000));
    default:
      return static_cast<std::int64_t>(Below(rng, 8)) * 8;
  }
}

void FlipBytes(Rng& rng, std::string& s, std::size_t begin, std::size_t end, int count) {
  if (end <= begin) return;
  for (int i = 0; i < count; ++i) {
    const std::size_t at = begin + Below(rng, end - begin);
    if (Below(rng, 2) == 0) {
      s[at] = static_cast<char>(s[at] ^ (1 << Below(rng, 8)));
    } else {
      s[at] = InterestingByte(rng);
    }
  }
}

void MutateLength(Rng& rng, Input& in) {
  std::string& f = in.files[Pick(rng, WeightFiles(in))];
  if (f.size() < 8) return;
  const std::uint64_t n = HeaderLength(f);
  const std::vector<std::uint64_t> values = {
      0,           1,           n - 1, n + 1,      n + 8,     f.size() - 8, f.size() - 7,
      100'000'000, 100'000'001, ~0ull, 1ull << 32, 1ull << 63};
  if (Below(rng, 2) == 0) {
    const std::uint64_t v = Pick(rng, values);
    for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  } else {
    FlipBytes(rng, f, 0, 8, 1 + static_cast<int>(Below(rng, 3)));
  }
}

void MutateHeaderBytes(Rng& rng, Input& in) {
  std::string& f = in.files[Pick(rng, WeightFiles(in))];
  const std::uint64_t n = HeaderLength(f);
  if (f.size() < 8 || n > f.size() - 8) return;
  FlipBytes(rng, f, 8, 8 + n, 1 + static_cast<int>(Below(rng, 4)));
}

void Truncate(Rng& rng, Input& in) {
  std::vector<std::string> names = WeightFiles(in);
  if (in.files.count("model.safetensors.index.json") > 0)
    names.push_back("model.safetensors.index.json");
  const int which = static_cast<int>(Below(rng, names.size() + 1));
  std::string& s = which == static_cast<int>(names.size()) ? in.config : in.files[names[which]];
  if (Below(rng, 4) == 0) {
    s.append(1 + Below(rng, 9), InterestingByte(rng));  // trailing bytes instead
  } else {
    s.resize(Below(rng, s.size() + 1));
  }
}

void MutateEntry(Rng& rng, Json& entry) {
  if (!entry.is_object()) return;
  static const std::vector<Json> kDTypes = {
      "F32", "F16", "BF16", "I64", "F64", "BOOL", "F8_E4M3", "", 5, nullptr, Json::array({"F16"})};
  switch (Below(rng, 9)) {
    case 0:
      entry["dtype"] = Pick(rng, kDTypes);
      break;
    case 1:
      if (entry["shape"].is_array() && !entry["shape"].empty()) {
        entry["shape"][Below(rng, entry["shape"].size())] = RandomValue(rng);
      }
      break;
    case 2:
      if (entry["shape"].is_array()) {
        if (Below(rng, 2) == 0 || entry["shape"].empty()) {
          entry["shape"].push_back(static_cast<std::int64_t>(Below(rng, 4)));
        } else {
          entry["shape"].erase(entry["shape"].size() - 1);
        }
      }
      break;
    case 3:
      if (entry["data_offsets"].is_array() && entry["data_offsets"].size() == 2) {
        entry["data_offsets"][Below(rng, 2)] = RandomValue(rng);
      }
      break;
    case 4:
      if (entry["data_offsets"].is_array() && entry["data_offsets"].size() == 2 &&
          entry["data_offsets"][1].is_number_unsigned()) {
        const std::uint64_t end = entry["data_offsets"][1].get<std::uint64_t>();
        const std::int64_t delta = static_cast<std::int64_t>(Below(rng, 9)) - 4;
        entry["data_offsets"][Below(rng, 2)] = static_cast<std::int64_t>(end) + delta;
      }
      break;
    case 5:
      entry["data_offsets"] = Json::array({0});
      break;
    case 6:
      entry.erase(Pick(rng, std::vector<std::string>{"dtype", "shape", "data_offsets"}));
      break;
    case 7:
      entry["shape"] = RandomValue(rng);
      break;
    default:
      entry["extra"] = RandomValue(rng);
      break;
  }
}

void MutateHeaderJson(Rng& rng, Input& in) {
  std::string& f = in.files[Pick(rng, WeightFiles(in))];
  const std::uint64_t n = HeaderLength(f);
  Json header = Json::parse(f.substr(8, n));
  const std::string data = f.substr(8 + n);
  std::vector<std::string> keys;
  for (auto it = header.begin(); it != header.end(); ++it) keys.push_back(it.key());
  const std::string key = Pick(rng, keys);
  const int edits = 1 + static_cast<int>(Below(rng, 3));
  for (int e = 0; e < edits; ++e) {
    switch (Below(rng, 8)) {
      case 0:
        header.erase(key);
        break;
      case 1:
        header[key + ".copy"] = header[key];
        break;  // overlaps the original
      case 2:
        header[key] = RandomValue(rng);
        break;
      case 3:
        header["__metadata__"] = Below(rng, 2) ? RandomValue(rng) : Json{{"k", RandomValue(rng)}};
        break;
      case 4: {
        Json moved = header[key];
        header.erase(key);
        header[key + "_renamed"] = moved;
        break;
      }
      default:
        MutateEntry(rng, header[key]);
        break;
    }
  }
  f = testing::RawSafetensors(header.dump(), data);
}

// Well-formed files whose contents disagree with the config.
void MutateTensorList(Rng& rng, Input& in, const Base& base) {
  std::vector<testing::TinyTensor> tensors = base.checkpoint.tensors;
  const std::size_t at = Below(rng, tensors.size());
  switch (Below(rng, 6)) {
    case 0:
      tensors.erase(tensors.begin() + at);
      break;
    case 1:
      tensors[at].dtype = Below(rng, 2) ? DType::kFloat32 : DType::kFloat16;
      break;
    case 2:
      tensors[at].shape.push_back(1 + Below(rng, 2));
      break;
    case 3:
      tensors[at].shape[0] += 1;
      break;
    case 4:
      tensors.push_back({"model.layers.9.mlp.extra.weight", tensors[at].dtype, {1}, ""});
      break;
    default:
      tensors[at].name += ".bias";
      break;
  }
  for (testing::TinyTensor& t : tensors) {  // keep bytes == elements * element size
    std::size_t bytes = t.dtype == DType::kFloat32 ? 4 : 2;
    for (std::int64_t d : t.shape) bytes *= static_cast<std::size_t>(d);
    t.bytes.resize(bytes, '\x3c');
  }
  in.files.clear();
  in.files["model.safetensors"] = testing::SafetensorsBytes(tensors);
}

void MutateConfig(Rng& rng, Input& in) {
  Json c = Json::parse(in.config);
  std::vector<std::string> keys;
  for (auto it = c.begin(); it != c.end(); ++it) keys.push_back(it.key());
  static const std::vector<Json> kRope = {Json{{"rope_type", "yarn"}, {"factor", 4.0}},
                                          Json{{"type", "dynamic"}, {"factor", 2.0}},
                                          Json{{"rope_type", "linear"}},
                                          Json{{"rope_type", "linear"}, {"factor", 0}},
                                          Json{{"type", "linear"}, {"factor", 8.0}},
                                          Json{{"rope_type", "llama3"}, {"factor", 8.0}},
                                          Json{{"rope_type", "llama3"},
                                               {"factor", 8.0},
                                               {"low_freq_factor", 4.0},
                                               {"high_freq_factor", 1.0},
                                               {"original_max_position_embeddings", 8192}},
                                          Json{{"rope_type", "llama3"},
                                               {"factor", 8.0},
                                               {"low_freq_factor", 1.0},
                                               {"high_freq_factor", 4.0},
                                               {"original_max_position_embeddings", 8192}},
                                          Json{{"rope_type", "longrope"}},
                                          Json{{"rope_type", 3}},
                                          Json::object(),
                                          nullptr,
                                          "llama3"};
  const int edits = 1 + static_cast<int>(Below(rng, 3));
  for (int e = 0; e < edits; ++e) {
    const std::string key = Pick(rng, keys);
    switch (Below(rng, 10)) {
      case 0:
        c.erase(key);
        break;
      case 1:
      case 2:
        c[key] = RandomValue(rng);
        break;
      case 3:
        c[Below(rng, 2) ? "rope_scaling" : "rope_parameters"] = Pick(rng, kRope);
        break;
      case 4:
        c["quantization_config"] = Below(rng, 3) ? Json{{"bits", 4}} : Json(nullptr);
        break;
      case 5:
        c["architectures"] =
            Pick(rng, std::vector<Json>{Json::array({"GPT2LMHeadModel"}), Json::array(),
                                        Json::array({7}), "LlamaForCausalLM",
                                        Json::array({"Qwen2ForCausalLM"})});
        break;
      case 6:
        c[Below(rng, 2) ? "dtype" : "torch_dtype"] =
            Pick(rng, std::vector<Json>{"float16", "float32", "bfloat16", "int8", "auto", 16});
        break;
      case 7:
        c["layer_types"] =
            Pick(rng, std::vector<Json>{Json::array({"sliding_attention", "full_attention"}),
                                        Json::array({"sliding_attention", "sliding_attention"}),
                                        Json::array({"full_attention"}), "full"});
        c["use_sliding_window"] = Below(rng, 2) == 0;
        break;
      case 8:
        c["eos_token_id"] =
            Pick(rng, std::vector<Json>{Json::array({1, -1}), Json::array({Json::array()}), 31, 32,
                                        Json::array()});
        break;
      default:
        c[Pick(rng,
               std::vector<std::string>{"num_key_value_heads", "head_dim", "num_attention_heads",
                                        "num_hidden_layers", "max_window_layers"})] =
            static_cast<std::int64_t>(Below(rng, 40)) - 3;
        break;
    }
  }
  in.config = c.dump();
}

void MutateIndex(Rng& rng, Input& in) {
  auto it = in.files.find("model.safetensors.index.json");
  if (it == in.files.end()) return;
  Json index = Json::parse(it->second);
  Json& map = index["weight_map"];
  std::vector<std::string> tensors;
  for (auto t = map.begin(); t != map.end(); ++t) tensors.push_back(t.key());
  const std::string tensor = Pick(rng, tensors);
  const std::vector<std::string> shards = WeightFiles(in);
  switch (Below(rng, 9)) {
    case 0:
      in.files.erase(Pick(rng, shards));
      break;
    case 1:
      map[tensor] = "model-00003-of-00002.safetensors";
      break;
    case 2:
      map[tensor] =
          Pick(rng, std::vector<std::string>{"../x", "a/b", "..", "", std::string("m\0x", 3)});
      break;
    case 3:
      map[tensor] = Pick(rng, shards);
      break;  // moved (maybe to where it is)
    case 4:
      map.erase(tensor);
      break;
    case 5:
      map["ghost.weight"] = Pick(rng, shards);
      break;
    case 6:
      map[tensor] = RandomValue(rng);
      break;
    case 7:
      index["weight_map"] = RandomValue(rng);
      break;
    default: {
      // Rename a shard file and leave the index pointing at the old name.
      const std::string from = Pick(rng, shards);
      std::string bytes = in.files[from];
      in.files.erase(from);
      in.files[from + ".renamed"] = bytes;
      break;
    }
  }
  if (in.files.count("model.safetensors.index.json") > 0) {
    in.files["model.safetensors.index.json"] = index.dump();
  }
}

void MutateDeep(Rng& rng, Input& in) {
  const std::size_t depth = 500 + Below(rng, 5000);
  const std::string nest = std::string(depth, '[') + std::string(depth, ']');
  if (Below(rng, 2) == 0) {
    in.config = "{\"deep\": " + nest + "," + in.config.substr(in.config.find('{') + 1);
  } else {
    std::string& f = in.files[Pick(rng, WeightFiles(in))];
    const std::uint64_t n = HeaderLength(f);
    const std::string header = "{\"deep\": " + nest + "," + f.substr(9, n - 1);
    f = testing::RawSafetensors(header, f.substr(8 + n));
  }
}

}  // namespace

std::vector<Base> MakeBases(std::uint64_t seed) {
  std::vector<Base> bases;
  for (Architecture a : {Architecture::kLlama, Architecture::kMistral, Architecture::kQwen2}) {
    for (bool sharded : {false, true}) {
      for (bool v5 : {false, true}) {
        testing::TinyOptions o = testing::DefaultOptions(a);
        o.hidden_size = 16;
        o.num_heads = 2;
        o.num_kv_heads = 1;
        o.intermediate_size = 16;
        o.vocab_size = 32;
        // One layer keeps each iteration short; Qwen2 keeps two so per-layer
        // sliding-window mixes can occur.
        o.num_layers = a == Architecture::kQwen2 ? 2 : 1;
        o.sharded = sharded;
        o.v5_config = v5;
        o.seed = seed + bases.size();
        bases.push_back({testing::MakeTinyCheckpoint(o), o, sharded});
      }
    }
  }
  return bases;
}

void Mutate(Kind kind, Rng& rng, const Base& base, Input& in) {
  switch (kind) {
    case kUnmutated:
    case kKinds:
      break;
    case kLengthBytes:
      MutateLength(rng, in);
      break;
    case kHeaderBytes:
      MutateHeaderBytes(rng, in);
      break;
    case kTruncate:
      Truncate(rng, in);
      break;
    case kHeaderJson:
      MutateHeaderJson(rng, in);
      break;
    case kTensorList:
      MutateTensorList(rng, in, base);
      break;
    case kConfigJson:
      MutateConfig(rng, in);
      break;
    case kConfigBytes:
      FlipBytes(rng, in.config, 0, in.config.size(), 1 + static_cast<int>(Below(rng, 4)));
      break;
    case kIndexJson:
      if (base.sharded) {
        MutateIndex(rng, in);
      } else {
        MutateHeaderJson(rng, in);
      }
      break;
    case kDeepNesting:
      MutateDeep(rng, in);
      break;
  }
}

}  // namespace baton::checkpoint::fuzz
