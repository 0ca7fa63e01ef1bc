#include "checkpoint/model_spec.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "json_util.h"

namespace baton::checkpoint {
namespace {

using internal::Describe;
using internal::DescribeWithType;
using internal::Json;
using internal::Quote;

constexpr absl::string_view kSupportedArchitectures =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";

// Each architecture and each dtype once: the spellings config.json and the
// safetensors header use, read and written from the same row.
struct ArchitectureRow {
  Architecture value;
  std::string_view name;        // architectures[0]
  std::string_view model_type;  // model_type, when the config says it
};
constexpr ArchitectureRow kArchitectures[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kMistral, "MistralForCausalLM", "mistral"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
};
struct DTypeRow {
  DType value;
  std::string_view name;         // config.json's dtype / torch_dtype
  std::string_view safetensors;  // a safetensors header's dtype
};
constexpr DTypeRow kDTypes[] = {
    {DType::kFloat32, "float32", "F32"},
    {DType::kFloat16, "float16", "F16"},
    {DType::kBFloat16, "bfloat16", "BF16"},
};

// The row whose `column` is `key` (an enumerator or a spelling), or nullptr.
// (This layer uses no other Baton code, so not foundation/enum_table.h.)
template <typename Row, std::size_t N, typename Column, typename Key>
const Row* FindRow(const Row (&rows)[N], Column Row::*column, const Key& key) {
  for (const Row& row : rows) {
    if (row.*column == key) return &row;
  }
  return nullptr;
}

// `column` of `value`'s row; "unknown" for a value no row describes.
template <typename Row, std::size_t N, typename Value>
std::string_view NameOf(const Row (&rows)[N], Value value, std::string_view Row::*column) {
  const Row* row = FindRow(rows, &Row::value, value);
  return row != nullptr ? row->*column : "unknown";
}

std::string Field(absl::string_view prefix, absl::string_view key) {
  return prefix.empty() ? std::string(key) : absl::StrCat(prefix, ".", key);
}

// Reads typed fields of config.json and words every refusal the same way:
// "<source>: <field> <what is wrong> (<what is supported>)".
class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view text) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", field, " ", text));
  }
  absl::Status Unsupported(absl::string_view field, const Json& value,
                           absl::string_view supported) const {
    return Error(field,
                 absl::StrCat(Describe(value), " is not supported (supported: ", supported, ")"));
  }
  absl::Status WrongType(absl::string_view field, const Json& value,
                         absl::string_view expected) const {
    return Error(field, absl::StrCat("must be ", expected, ", got ", DescribeWithType(value)));
  }

  // The value under `key`, or nullptr when it is absent or null: transformers
  // treats an explicit null as "use the default" for every field read here.
  static const Json* Find(const Json& object, absl::string_view key) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer in [min, max]; a fraction, a string or a value out of range is
  // refused naming `field`.
  absl::Status IntValue(const Json& value, absl::string_view field, std::int64_t min,
                        std::int64_t max, int* out) const {
    std::int64_t v = 0;
    if (!internal::AsInt64(value, &v)) {
      if (value.is_number_unsigned()) {
        return Error(field, absl::StrCat(Describe(value), " is out of range (at most ", max, ")"));
      }
      return WrongType(field, value, "an integer");
    }
    if (v < min) return Error(field, absl::StrCat(v, " is out of range (at least ", min, ")"));
    if (v > max) return Error(field, absl::StrCat(v, " is out of range (at most ", max, ")"));
    *out = static_cast<int>(v);
    return absl::OkStatus();
  }

  absl::Status Int(const Json& object, absl::string_view prefix, absl::string_view key,
                   std::int64_t min, std::int64_t max, std::optional<int>* out) const {
    const Json* value = Find(object, key);
    if (value == nullptr) return absl::OkStatus();
    int v = 0;
    if (absl::Status s = IntValue(*value, Field(prefix, key), min, max, &v); !s.ok()) return s;
    *out = v;
    return absl::OkStatus();
  }

  absl::Status RequiredInt(const Json& object, absl::string_view prefix, absl::string_view key,
                           std::int64_t min, int* out) const {
    std::optional<int> value;
    if (absl::Status s = Int(object, prefix, key, min, kIntMax, &value); !s.ok()) return s;
    if (!value) return Missing(prefix, key);
    *out = *value;
    return absl::OkStatus();
  }

  // A finite number above zero (every double this config carries is one).
  absl::Status Positive(const Json& object, absl::string_view prefix, absl::string_view key,
                        std::optional<double>* out) const {
    const Json* value = Find(object, key);
    if (value == nullptr) return absl::OkStatus();
    const std::string field = Field(prefix, key);
    if (!value->is_number()) return WrongType(field, *value, "a number");
    const double v = value->get<double>();
    if (!std::isfinite(v) || v <= 0.0) {
      return Error(field, absl::StrCat(Describe(*value), " is out of range (a finite number > 0)"));
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status RequiredPositive(const Json& object, absl::string_view prefix, absl::string_view key,
                                double* out) const {
    std::optional<double> value;
    if (absl::Status s = Positive(object, prefix, key, &value); !s.ok()) return s;
    if (!value) return Missing(prefix, key);
    *out = *value;
    return absl::OkStatus();
  }

  absl::Status Bool(const Json& object, absl::string_view key, bool* out) const {
    const Json* value = Find(object, key);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_boolean()) return WrongType(key, *value, "true or false");
    *out = value->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const Json& object, absl::string_view prefix, absl::string_view key,
                      std::optional<std::string>* out) const {
    const Json* value = Find(object, key);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_string()) return WrongType(Field(prefix, key), *value, "a string");
    *out = value->get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Missing(absl::string_view prefix, absl::string_view key) const {
    return Error(Field(prefix, key), "is missing (it has no default this loader trusts)");
  }

  static constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

 private:
  absl::string_view source_;
};

#define BATON_CHECKPOINT_RETURN_IF_ERROR(expr) \
  do {                                         \
    absl::Status status_ = (expr);             \
    if (!status_.ok()) return status_;         \
  } while (false)

absl::Status ReadArchitecture(const Reader& r, const Json& root, ModelSpec* spec) {
  const Json* list = Reader::Find(root, "architectures");
  if (list == nullptr) return r.Missing("", "architectures");
  if (!list->is_array() || list->empty()) {
    return r.WrongType("architectures", *list, "a non-empty list of class names");
  }
  const Json& first = (*list)[0];
  if (!first.is_string()) return r.WrongType("architectures[0]", first, "a string");
  const std::string& name = first.get_ref<const std::string&>();
  const ArchitectureRow* row = FindRow(kArchitectures, &ArchitectureRow::name, name);
  if (row == nullptr) return r.Unsupported("architectures[0]", first, kSupportedArchitectures);
  spec->architecture = row->value;
  const absl::string_view model_type = internal::AsAbsl(row->model_type);
  spec->architecture_name = name;
  std::optional<std::string> declared;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.String(root, "", "model_type", &declared));
  if (declared && *declared != model_type) {
    return r.Error("model_type", absl::StrCat(Quote(*declared), " does not match architectures[0] ",
                                              Quote(name), " (expected ", Quote(model_type), ")"));
  }
  return absl::OkStatus();
}

absl::Status ReadSizes(const Reader& r, const Json& root, ModelSpec* spec) {
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredInt(root, "", "num_hidden_layers", 1, &spec->num_layers));
  if (spec->num_layers > kMaxLayers) {
    return r.Unsupported("num_hidden_layers", *Reader::Find(root, "num_hidden_layers"),
                         absl::StrCat("up to ", kMaxLayers));
  }
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.RequiredInt(root, "", "hidden_size", 1, &spec->hidden_size));
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredInt(root, "", "num_attention_heads", 1, &spec->num_heads));
  std::optional<int> kv_heads;
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.Int(root, "", "num_key_value_heads", 1, Reader::kIntMax, &kv_heads));
  spec->num_kv_heads = kv_heads.value_or(spec->num_heads);
  if (spec->num_heads % spec->num_kv_heads != 0) {
    return r.Error(
        "num_key_value_heads",
        absl::StrCat(spec->num_kv_heads, " does not divide num_attention_heads ", spec->num_heads,
                     " (supported: grouped-query attention, heads a multiple of "
                     "key/value heads)"));
  }
  std::optional<int> head_dim;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.Int(root, "", "head_dim", 1, Reader::kIntMax, &head_dim));
  if (head_dim) {
    spec->head_dim = *head_dim;
  } else {
    if (spec->hidden_size % spec->num_heads != 0) {
      return r.Error("hidden_size",
                     absl::StrCat(spec->hidden_size, " is not a multiple of num_attention_heads ",
                                  spec->num_heads,
                                  " and head_dim is absent (head_dim defaults to hidden_size / "
                                  "num_attention_heads)"));
    }
    spec->head_dim = spec->hidden_size / spec->num_heads;
  }
  if (spec->head_dim % 2 != 0 || spec->head_dim > kMaxHeadDim) {
    return r.Error("head_dim",
                   absl::StrCat(spec->head_dim, " is not supported (supported: even, at most ",
                                kMaxHeadDim, ")"));
  }
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredInt(root, "", "intermediate_size", 1, &spec->intermediate_size));
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.RequiredInt(root, "", "vocab_size", 1, &spec->vocab_size));
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredInt(root, "", "max_position_embeddings", 1, &spec->max_position_embeddings));
  return r.RequiredPositive(root, "", "rms_norm_eps", &spec->rms_norm_eps);
}

absl::Status ReadLayerFeatures(const Reader& r, const Json& root, ModelSpec* spec) {
  if (Reader::Find(root, "quantization_config") != nullptr) {
    return r.Error("quantization_config",
                   "is present: quantized checkpoints are not supported (supported: unquantized "
                   "float32, float16 and bfloat16 weights)");
  }
  std::optional<std::string> act;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.String(root, "", "hidden_act", &act));
  if (act && *act != "silu")
    return r.Unsupported("hidden_act", *Reader::Find(root, "hidden_act"), "silu");
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.Bool(root, "tie_word_embeddings", &spec->tie_word_embeddings));
  switch (spec->architecture) {
    case Architecture::kLlama: {
      bool attention_bias = false;
      bool mlp_bias = false;
      BATON_CHECKPOINT_RETURN_IF_ERROR(r.Bool(root, "attention_bias", &attention_bias));
      BATON_CHECKPOINT_RETURN_IF_ERROR(r.Bool(root, "mlp_bias", &mlp_bias));
      if (mlp_bias) return r.Unsupported("mlp_bias", *Reader::Find(root, "mlp_bias"), "false");
      spec->qkv_bias = attention_bias;
      spec->o_bias = attention_bias;
      break;
    }
    case Architecture::kMistral:
      // MistralForCausalLM builds its projections without bias whatever the
      // config says, so attention_bias is not read.
      spec->qkv_bias = false;
      spec->o_bias = false;
      break;
    case Architecture::kQwen2:
      spec->qkv_bias = true;
      spec->o_bias = false;
      break;
  }
  return absl::OkStatus();
}

// Which layers slide follows transformers (v4.53+ and v5): an explicit
// layer_types list wins; else Qwen2 slides layers >= max_window_layers and
// Mistral slides every layer. One window for the whole model is all the
// kernels take, so a mix of sliding and full layers is refused.
absl::Status ReadSlidingWindow(const Reader& r, const Json& root, ModelSpec* spec) {
  std::optional<int> window;
  if (spec->architecture == Architecture::kMistral) {
    BATON_CHECKPOINT_RETURN_IF_ERROR(
        r.Int(root, "", "sliding_window", 1, Reader::kIntMax, &window));
  } else if (spec->architecture == Architecture::kQwen2) {
    bool use_sliding_window = false;
    BATON_CHECKPOINT_RETURN_IF_ERROR(r.Bool(root, "use_sliding_window", &use_sliding_window));
    if (use_sliding_window) {
      BATON_CHECKPOINT_RETURN_IF_ERROR(
          r.Int(root, "", "sliding_window", 1, Reader::kIntMax, &window));
    }
  }
  std::vector<bool> slides(static_cast<std::size_t>(spec->num_layers), true);
  if (const Json* types = Reader::Find(root, "layer_types")) {
    if (!types->is_array() || types->size() != slides.size()) {
      return r.WrongType(
          "layer_types", *types,
          absl::StrCat("a list of num_hidden_layers (", spec->num_layers, ") attention kinds"));
    }
    for (std::size_t i = 0; i < slides.size(); ++i) {
      const Json& kind = (*types)[i];
      const std::string field = absl::StrCat("layer_types[", i, "]");
      const std::string* name = kind.is_string() ? kind.get_ptr<const std::string*>() : nullptr;
      if (name != nullptr && *name == "full_attention") {
        slides[i] = false;
      } else if (name == nullptr || *name != "sliding_attention") {
        return r.Unsupported(field, kind, "full_attention, sliding_attention");
      }
    }
  } else if (spec->architecture == Architecture::kQwen2 && window) {
    std::optional<int> first_sliding;  // transformers' default is 28
    BATON_CHECKPOINT_RETURN_IF_ERROR(
        r.Int(root, "", "max_window_layers", 0, Reader::kIntMax, &first_sliding));
    for (std::size_t i = 0; i < slides.size(); ++i) {
      slides[i] = static_cast<std::int64_t>(i) >= first_sliding.value_or(28);
    }
  }
  std::size_t sliding = 0;
  for (bool s : slides) sliding += s ? 1 : 0;
  if (!window || sliding == 0) {
    spec->sliding_window.reset();
  } else if (sliding == slides.size()) {
    spec->sliding_window = window;
  } else {
    return r.Error("sliding_window",
                   absl::StrCat(*window, " applies to ", sliding, " of ", slides.size(),
                                " layers (from layer_types or max_window_layers), which is not "
                                "supported (supported: the same attention on every layer)"));
  }
  return absl::OkStatus();
}

absl::Status ReadDType(const Reader& r, const Json& root, ModelSpec* spec) {
  std::optional<DType> found;
  std::string found_key;
  for (absl::string_view key : {"dtype", "torch_dtype"}) {
    std::optional<std::string> name;
    BATON_CHECKPOINT_RETURN_IF_ERROR(r.String(root, "", key, &name));
    if (!name) continue;
    const DTypeRow* row = FindRow(kDTypes, &DTypeRow::name, *name);
    if (row == nullptr) {
      return r.Unsupported(key, *Reader::Find(root, key), "bfloat16, float16, float32");
    }
    const DType dtype = row->value;
    if (found && *found != dtype) {
      return r.Error(key, absl::StrCat(Quote(*name), " disagrees with ", found_key, " ",
                                       Quote(internal::AsAbsl(DTypeName(*found))),
                                       " (they must name one dtype)"));
    }
    found = dtype;
    found_key = std::string(key);
  }
  spec->dtype = found;
  return absl::OkStatus();
}

absl::Status ReadTokens(const Reader& r, const Json& root, ModelSpec* spec) {
  // A token id past the vocabulary could index the embedding out of bounds.
  const std::int64_t max_id = spec->vocab_size - 1;
  std::optional<int> bos;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.Int(root, "", "bos_token_id", 0, max_id, &bos));
  spec->bos_token_id = bos;
  spec->eos_token_ids.clear();
  const Json* eos = Reader::Find(root, "eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (!eos->is_array()) {
    std::optional<int> id;
    BATON_CHECKPOINT_RETURN_IF_ERROR(r.Int(root, "", "eos_token_id", 0, max_id, &id));
    spec->eos_token_ids.push_back(*id);
    return absl::OkStatus();
  }
  for (std::size_t i = 0; i < eos->size(); ++i) {
    int id = 0;
    BATON_CHECKPOINT_RETURN_IF_ERROR(
        r.IntValue((*eos)[i], absl::StrCat("eos_token_id[", i, "]"), 0, max_id, &id));
    spec->eos_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

absl::Status ReadRopeScaling(const Reader& r, const Json& params, absl::string_view prefix,
                             ModelSpec* spec) {
  // transformers reads rope_type first and the legacy "type" only without it.
  std::string type_key = "rope_type";
  const Json* type = Reader::Find(params, type_key);
  if (type == nullptr) {
    type_key = "type";
    type = Reader::Find(params, type_key);
  }
  const std::string field = Field(prefix, type_key);
  if (type == nullptr) return r.Error(Field(prefix, "rope_type"), "is missing");
  if (!type->is_string()) return r.WrongType(field, *type, "a string");
  const std::string& name = type->get_ref<const std::string&>();
  RopeScaling& scaling = spec->rope_scaling;
  if (name == "default") {
    scaling = RopeScaling{};
    return absl::OkStatus();
  }
  if (name == "linear") {
    scaling.type = RopeScalingType::kLinear;
    return r.RequiredPositive(params, prefix, "factor", &scaling.factor);
  }
  if (name != "llama3") return r.Unsupported(field, *type, "linear, llama3");
  scaling.type = RopeScalingType::kLlama3;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.RequiredPositive(params, prefix, "factor", &scaling.factor));
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredPositive(params, prefix, "low_freq_factor", &scaling.low_freq_factor));
  BATON_CHECKPOINT_RETURN_IF_ERROR(
      r.RequiredPositive(params, prefix, "high_freq_factor", &scaling.high_freq_factor));
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.RequiredInt(params, prefix, "original_max_position_embeddings",
                                                 1, &scaling.original_max_position_embeddings));
  // The smoothing divides by (high - low).
  if (!(scaling.high_freq_factor > scaling.low_freq_factor)) {
    return r.Error(Field(prefix, "high_freq_factor"),
                   absl::StrCat(scaling.high_freq_factor, " must exceed low_freq_factor ",
                                scaling.low_freq_factor));
  }
  return absl::OkStatus();
}

// Published checkpoints write rope_theta and rope_scaling; transformers v5
// writes rope_parameters instead (theta inside). A file with both is read
// through rope_parameters, the newer form.
absl::Status ReadRope(const Reader& r, const Json& root, ModelSpec* spec) {
  spec->rope_scaling = RopeScaling{};
  std::optional<double> theta;
  BATON_CHECKPOINT_RETURN_IF_ERROR(r.Positive(root, "", "rope_theta", &theta));
  if (const Json* params = Reader::Find(root, "rope_parameters")) {
    if (!params->is_object()) return r.WrongType("rope_parameters", *params, "an object");
    std::optional<double> inner_theta;
    BATON_CHECKPOINT_RETURN_IF_ERROR(
        r.Positive(*params, "rope_parameters", "rope_theta", &inner_theta));
    if (inner_theta) theta = inner_theta;
    BATON_CHECKPOINT_RETURN_IF_ERROR(ReadRopeScaling(r, *params, "rope_parameters", spec));
  } else if (const Json* scaling = Reader::Find(root, "rope_scaling")) {
    if (!scaling->is_object()) return r.WrongType("rope_scaling", *scaling, "an object");
    BATON_CHECKPOINT_RETURN_IF_ERROR(ReadRopeScaling(r, *scaling, "rope_scaling", spec));
  }
  spec->rope_theta = theta.value_or(10000.0);
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> Parse(absl::string_view json_text, absl::string_view source) {
  absl::StatusOr<Json> parsed = internal::ParseJson(json_text, source, "the config");
  if (!parsed.ok()) return parsed.status();
  const Json& root = *parsed;
  const Reader r(source);
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the config must be a JSON object, got ", DescribeWithType(root)));
  }
  ModelSpec spec;
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadArchitecture(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadSizes(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadLayerFeatures(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadSlidingWindow(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadDType(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadTokens(r, root, &spec));
  BATON_CHECKPOINT_RETURN_IF_ERROR(ReadRope(r, root, &spec));
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ParseModelConfig(std::string_view json_text_std,
                                           std::string_view source_std) {
  const absl::string_view json_text = internal::AsAbsl(json_text_std);
  const absl::string_view source = internal::AsAbsl(source_std);
  // The readers only use checked accessors; this catch is the boundary's
  // guarantee (allocation failure included) that nothing escapes as a throw.
  try {
    return Parse(json_text, source);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read the config (", e.what(), ")"));
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": cannot read the config"));
  }
}

std::string_view ArchitectureName(Architecture architecture) {
  return NameOf(kArchitectures, architecture, &ArchitectureRow::name);
}

std::string_view DTypeName(DType dtype) { return NameOf(kDTypes, dtype, &DTypeRow::name); }

std::string_view SafetensorsDTypeName(DType dtype) {
  return NameOf(kDTypes, dtype, &DTypeRow::safetensors);
}

std::optional<DType> SafetensorsDType(std::string_view name) {
  const DTypeRow* row = FindRow(kDTypes, &DTypeRow::safetensors, name);
  return row != nullptr ? std::optional<DType>(row->value) : std::nullopt;
}

std::size_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace baton::checkpoint
