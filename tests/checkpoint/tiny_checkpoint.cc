#include "tiny_checkpoint.h"

#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/convert.h"
#include "support/test_seed.h"

namespace baton::checkpoint::testing {
namespace {

using Json = nlohmann::json;

const char* DTypeConfigName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "";
}

const char* DTypeFileName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
  }
  return "";
}

std::size_t ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace

TinyOptions DefaultOptions(Architecture architecture) {
  TinyOptions o;
  o.architecture = architecture;
  switch (architecture) {
    case Architecture::kLlama:
      break;
    case Architecture::kMistral:
      o.explicit_head_dim = true;  // like Mistral-Nemo: head_dim != hidden / heads
      o.head_dim = 16;
      break;
    case Architecture::kQwen2:
      o.tie_word_embeddings = true;
      o.num_kv_heads = 1;
      break;
  }
  return o;
}

Json TinyConfig(const TinyOptions& o) {
  Json c = Json::object();
  const char* arch = "LlamaForCausalLM";
  const char* model_type = "llama";
  double theta = 500000.0;
  if (o.architecture == Architecture::kMistral) {
    arch = "MistralForCausalLM";
    model_type = "mistral";
    theta = 1000000.0;
  } else if (o.architecture == Architecture::kQwen2) {
    arch = "Qwen2ForCausalLM";
    model_type = "qwen2";
    theta = 1000000.0;
  }
  c["architectures"] = Json::array({arch});
  c["model_type"] = model_type;
  c["hidden_size"] = o.hidden_size;
  c["intermediate_size"] = o.intermediate_size;
  c["num_attention_heads"] = o.num_heads;
  c["num_hidden_layers"] = o.num_layers;
  c["num_key_value_heads"] = o.num_kv_heads;
  if (o.explicit_head_dim) c["head_dim"] = o.head_dim;
  c["vocab_size"] = o.vocab_size;
  c["max_position_embeddings"] = o.max_position_embeddings;
  c["rms_norm_eps"] = 1e-5;
  c["hidden_act"] = "silu";
  c["initializer_range"] = 0.02;
  c["use_cache"] = true;
  c["tie_word_embeddings"] = o.tie_word_embeddings;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = Json::array({2, 3});
  c["transformers_version"] = o.v5_config ? "5.0.0" : "4.45.0";
  Json rope = Json::object();  // the scaling fields, style-independent
  switch (o.architecture) {
    case Architecture::kLlama:
      c["attention_bias"] = o.attention_bias;
      c["mlp_bias"] = false;
      c["pretraining_tp"] = 1;
      rope = {{"rope_type", "llama3"},
              {"factor", 32.0},
              {"low_freq_factor", 1.0},
              {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", 8192}};
      break;
    case Architecture::kMistral:
      c["sliding_window"] = 4096;
      break;
    case Architecture::kQwen2:
      c["use_sliding_window"] = false;
      c["sliding_window"] = 4096;
      c["max_window_layers"] = o.num_layers;
      c["eos_token_id"] = 3;
      break;
  }
  if (o.v5_config) {
    c["dtype"] = DTypeConfigName(o.dtype);
    Json params = rope.empty() ? Json{{"rope_type", "default"}} : rope;
    params["rope_theta"] = theta;
    c["rope_parameters"] = params;
  } else {
    c["torch_dtype"] = DTypeConfigName(o.dtype);
    c["rope_theta"] = theta;
    c["rope_scaling"] = rope.empty() ? Json(nullptr) : rope;
  }
  return c;
}

std::vector<TinyTensor> TinyTensors(const TinyOptions& o) {
  const std::int64_t hidden = o.hidden_size;
  const std::int64_t head_dim = o.explicit_head_dim ? o.head_dim : o.hidden_size / o.num_heads;
  const std::int64_t q = o.num_heads * head_dim;
  const std::int64_t kv = o.num_kv_heads * head_dim;
  const std::int64_t inter = o.intermediate_size;
  const std::int64_t vocab = o.vocab_size;
  const bool qkv_bias = o.architecture == Architecture::kQwen2 ||
                        (o.architecture == Architecture::kLlama && o.attention_bias);
  const bool o_bias = o.architecture == Architecture::kLlama && o.attention_bias;
  std::vector<TinyTensor> t;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    t.push_back({std::move(name), o.dtype, std::move(shape), ""});
  };
  add("model.embed_tokens.weight", {vocab, hidden});
  for (int i = 0; i < o.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    add(p + "input_layernorm.weight", {hidden});
    add(p + "self_attn.q_proj.weight", {q, hidden});
    add(p + "self_attn.k_proj.weight", {kv, hidden});
    add(p + "self_attn.v_proj.weight", {kv, hidden});
    if (qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    add(p + "self_attn.o_proj.weight", {hidden, q});
    if (o_bias) add(p + "self_attn.o_proj.bias", {hidden});
    add(p + "post_attention_layernorm.weight", {hidden});
    add(p + "mlp.gate_proj.weight", {inter, hidden});
    add(p + "mlp.up_proj.weight", {inter, hidden});
    add(p + "mlp.down_proj.weight", {hidden, inter});
  }
  add("model.norm.weight", {hidden});
  if (!o.tie_word_embeddings) add("lm_head.weight", {vocab, hidden});
  std::mt19937_64 rng(o.seed);
  for (TinyTensor& tensor : t) {
    std::size_t count = 1;
    for (std::int64_t d : tensor.shape) count *= static_cast<std::size_t>(d);
    tensor.bytes.resize(count * ElementBytes(tensor.dtype));
    if (!o.runnable) {
      for (char& c : tensor.bytes) c = static_cast<char>(rng() & 0xff);
      continue;
    }
    const bool norm = absl::EndsWith(tensor.name, "norm.weight");
    const bool bias = absl::EndsWith(tensor.name, ".bias");
    const bool embedding = tensor.name == "model.embed_tokens.weight";
    const double fan_in = tensor.shape.size() == 2 ? static_cast<double>(tensor.shape[1]) : 1.0;
    const double a = embedding ? std::sqrt(3.0) : bias ? 0.5 : norm ? 0.1 : std::sqrt(3.0 / fan_in);
    std::uniform_real_distribution<double> uniform(-a, a);
    for (std::size_t i = 0; i < count; ++i) {
      const float value = static_cast<float>((norm ? 1.0 : 0.0) + uniform(rng));
      if (tensor.dtype == DType::kFloat32) {
        std::memcpy(&tensor.bytes[4 * i], &value, 4);
      } else {
        const std::uint16_t bits =
            tensor.dtype == DType::kBFloat16 ? FloatToBFloat16(value) : FloatToFloat16(value);
        std::memcpy(&tensor.bytes[2 * i], &bits, 2);
      }
    }
  }
  return t;
}

std::string RawSafetensors(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(header);
  out.append(data);
  return out;
}

std::string SafetensorsBytes(const std::vector<TinyTensor>& tensors) {
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const TinyTensor& t : tensors) {
    const std::size_t begin = data.size();
    data += t.bytes;
    header[t.name] = {{"dtype", DTypeFileName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  // The reference writer pads the header with spaces to 8 bytes, so the data
  // section starts aligned.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return RawSafetensors(text, data);
}

std::string IndexJson(const std::map<std::string, std::string>& weight_map) {
  Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  return index.dump(2);
}

TinyCheckpoint MakeTinyCheckpoint(const TinyOptions& options) {
  TinyCheckpoint c;
  c.config_json = TinyConfig(options).dump(2);
  c.tensors = TinyTensors(options);
  if (!options.sharded) {
    c.files["model.safetensors"] = SafetensorsBytes(c.tensors);
    return c;
  }
  const std::size_t half = c.tensors.size() / 2;
  const std::vector<TinyTensor> first(c.tensors.begin(), c.tensors.begin() + half);
  const std::vector<TinyTensor> second(c.tensors.begin() + half, c.tensors.end());
  const std::string a = "model-00001-of-00002.safetensors";
  const std::string b = "model-00002-of-00002.safetensors";
  std::map<std::string, std::string> weight_map;
  for (const TinyTensor& t : first) weight_map[t.name] = a;
  for (const TinyTensor& t : second) weight_map[t.name] = b;
  c.files[a] = SafetensorsBytes(first);
  c.files[b] = SafetensorsBytes(second);
  c.files["model.safetensors.index.json"] = IndexJson(weight_map);
  return c;
}

absl::Status WriteDirectory(const TinyCheckpoint& checkpoint, const std::string& dir) {
  std::map<std::string, std::string> all = checkpoint.files;
  all["config.json"] = checkpoint.config_json;
  for (const auto& [name, bytes] : all) {
    const std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/baton_checkpoint_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

void RemoveTree(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

std::uint64_t TestSeed() {
  static const std::uint64_t seed = [] {
    std::printf("%s\n", ::baton::testing::TestSeedNote().c_str());
    return ::baton::testing::TestSeed();
  }();
  return seed;
}

}  // namespace baton::checkpoint::testing
