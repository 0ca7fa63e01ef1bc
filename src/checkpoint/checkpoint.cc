#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "json_util.h"

namespace baton::checkpoint {

using internal::Describe;
using internal::DescribeWithType;
using internal::Json;
using internal::Quote;

namespace {

constexpr absl::string_view kSingleFile = "model.safetensors";
constexpr absl::string_view kIndexFile = "model.safetensors.index.json";
// Missing or unexpected tensors are listed up to this many, then counted.
constexpr std::size_t kListedNames = 4;

// A non-persistent buffer transformers recomputes from the config; some old
// checkpoints saved it anyway. It carries nothing the config does not, so it is
// neither required nor refused, and never handed out.
bool IsIgnoredBuffer(absl::string_view name) { return absl::EndsWith(name, "rotary_emb.inv_freq"); }

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (!dir.empty() && dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

std::string QuotedList(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < names.size() && i < kListedNames; ++i)
    shown.push_back(Quote(names[i]));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kListedNames)
    absl::StrAppend(&text, " and ", names.size() - kListedNames, " more");
  return text;
}

// Where the files come from: a directory on disk or a map in memory.
class FileSource {
 public:
  virtual ~FileSource() = default;
  virtual const std::string& dir() const = 0;
  virtual bool Exists(absl::string_view name) const = 0;
  [[nodiscard]] virtual absl::StatusOr<std::string> ReadText(absl::string_view name) = 0;
  [[nodiscard]] virtual absl::StatusOr<SafetensorsFile> OpenTensors(absl::string_view name) = 0;
  std::string Path(absl::string_view name) const { return JoinPath(dir(), name); }
};

// Reads a small text file (config.json, the index). Both are kilobytes; the
// cap stops a wrong file (a weight file renamed) from being read whole.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  constexpr std::size_t kMaxTextBytes = 100'000'000;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
  }
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat info {};
  if (fstat(fd, &info) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  if (!S_ISREG(info.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  if (static_cast<std::uint64_t>(info.st_size) > kMaxTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", info.st_size, " bytes is over the ",
                                                   kMaxTextBytes, "-byte limit for a JSON file"));
  }
  std::string text(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
    if (n == 0) break;  // shrank since fstat
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

class DiskSource : public FileSource {
 public:
  explicit DiskSource(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const override { return dir_; }
  bool Exists(absl::string_view name) const override {
    struct stat info {};
    return ::stat(Path(name).c_str(), &info) == 0 && S_ISREG(info.st_mode);
  }
  absl::StatusOr<std::string> ReadText(absl::string_view name) override {
    return ReadSmallFile(Path(name));
  }
  absl::StatusOr<SafetensorsFile> OpenTensors(absl::string_view name) override {
    return SafetensorsFile::Open(Path(name));
  }

 private:
  std::string dir_;
};

class MemorySource : public FileSource {
 public:
  MemorySource(std::string dir, std::map<std::string, std::string> files)
      : dir_(std::move(dir)), files_(std::move(files)) {}
  const std::string& dir() const override { return dir_; }
  bool Exists(absl::string_view name) const override {
    return files_.find(std::string(name)) != files_.end();
  }
  absl::StatusOr<std::string> ReadText(absl::string_view name) override {
    const auto it = files_.find(std::string(name));
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(Path(name), ": no such file"));
    return it->second;
  }
  absl::StatusOr<SafetensorsFile> OpenTensors(absl::string_view name) override {
    const auto it = files_.find(std::string(name));
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(Path(name), ": no such file"));
    // Each file is opened once, so its bytes can move into the file object.
    return SafetensorsFile::FromBytes(Path(name), std::move(it->second));
  }

 private:
  std::string dir_;
  std::map<std::string, std::string> files_;
};

// A shard name from the index must stay inside the model directory.
bool IsPlainFileName(absl::string_view name) {
  if (name.empty() || name == "." || absl::StrContains(name, "/") ||
      absl::StrContains(name, "..")) {
    return false;
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20) return false;  // a NUL would cut the path short
  }
  return true;
}

}  // namespace

class CheckpointLoader {
 public:
  CheckpointLoader(FileSource& source, std::string config_source)
      : source_(source), config_source_(std::move(config_source)) {}

  absl::StatusOr<Checkpoint> Load(absl::string_view config_text) {
    absl::StatusOr<ModelSpec> spec =
        ParseModelConfig(std::string_view(config_text.data(), config_text.size()), config_source_);
    if (!spec.ok()) return spec.status();
    checkpoint_.spec_ = *std::move(spec);
    // The index wins when both exist: it names every file the checkpoint
    // needs, so a stale single file left beside a sharded save is never mixed
    // in. (transformers checks model.safetensors first; Baton's rule is the
    // explicit one.)
    absl::Status loaded;
    if (source_.Exists(kIndexFile)) {
      loaded = LoadSharded();
    } else if (source_.Exists(kSingleFile)) {
      loaded = LoadSingle();
    } else {
      loaded = absl::NotFoundError(absl::StrCat(source_.dir(), ": neither ", kSingleFile, " nor ",
                                                kIndexFile,
                                                " is present (a Hugging Face "
                                                "checkpoint has one of them)"));
    }
    if (!loaded.ok()) return loaded;
    if (absl::Status s = Validate(); !s.ok()) return s;
    return std::move(checkpoint_);
  }

 private:
  absl::Status Add(const TensorView& view, std::map<std::string, TensorView>& all) {
    const auto [it, inserted] = all.emplace(view.name, view);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(view.file, ": tensor ", Quote(view.name),
                                                     " is also in ", it->second.file,
                                                     " (each tensor must be stored once)"));
    }
    return absl::OkStatus();
  }

  absl::Status LoadSingle() {
    absl::StatusOr<SafetensorsFile> file = source_.OpenTensors(kSingleFile);
    if (!file.ok()) return file.status();
    for (const TensorView& view : file->tensors()) {
      if (absl::Status s = Add(view, all_); !s.ok()) return s;
    }
    checkpoint_.files_.push_back(*std::move(file));
    return absl::OkStatus();
  }

  absl::Status LoadSharded() {
    const std::string index_path = source_.Path(kIndexFile);
    absl::StatusOr<std::string> text = source_.ReadText(kIndexFile);
    if (!text.ok()) return text.status();
    absl::StatusOr<Json> index = internal::ParseJson(*text, index_path, "the index");
    if (!index.ok()) return index.status();
    auto error = [&](absl::string_view message) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", message));
    };
    if (!index->is_object()) {
      return error(absl::StrCat("the index must be a JSON object, got ", DescribeWithType(*index)));
    }
    const auto map_it = index->find("weight_map");
    if (map_it == index->end()) return error("weight_map is missing");
    const Json& weight_map = *map_it;
    if (!weight_map.is_object()) {
      return error(absl::StrCat("weight_map must be an object of tensor name to shard file, got ",
                                DescribeWithType(weight_map)));
    }
    // Shard -> the first tensor that names it (for the missing-shard message).
    std::map<std::string, std::string> shards;
    std::map<std::string, std::string> shard_of;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it->is_string()) {
        return error(absl::StrCat("weight_map[", Quote(it.key()),
                                  "] must be a shard file name, got ", DescribeWithType(*it)));
      }
      const std::string& shard = it->get_ref<const std::string&>();
      if (!IsPlainFileName(shard)) {
        return error(absl::StrCat("shard ", Quote(shard), " for tensor ", Quote(it.key()),
                                  " is not a plain file name in the model directory (no '/', "
                                  "'..' or control characters)"));
      }
      shards.emplace(shard, it.key());
      shard_of.emplace(it.key(), shard);
    }
    for (const auto& [shard, tensor] : shards) {
      if (!source_.Exists(shard)) {
        return absl::NotFoundError(absl::StrCat(index_path, ": shard ", Quote(shard),
                                                " (holding tensor ", Quote(tensor), ") is not in ",
                                                source_.dir()));
      }
    }
    for (const auto& entry : shards) {
      const std::string& shard = entry.first;
      absl::StatusOr<SafetensorsFile> file = source_.OpenTensors(shard);
      if (!file.ok()) return file.status();
      for (const TensorView& view : file->tensors()) {
        const auto named = shard_of.find(view.name);
        if (named == shard_of.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat(view.file, ": tensor ", Quote(view.name), " is not in ", kIndexFile,
                           "'s weight_map (every stored tensor must be indexed)"));
        }
        if (named->second != shard) {
          return absl::InvalidArgumentError(absl::StrCat(view.file, ": tensor ", Quote(view.name),
                                                         " is stored here but ", kIndexFile,
                                                         " maps it to ", Quote(named->second)));
        }
        if (absl::Status s = Add(view, all_); !s.ok()) return s;
      }
      checkpoint_.files_.push_back(*std::move(file));
    }
    for (const auto& [tensor, shard] : shard_of) {
      if (all_.find(tensor) == all_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map puts tensor ",
                                                       Quote(tensor), " in ", Quote(shard),
                                                       ", which does not contain it"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Validate() {
    const ModelSpec& spec = checkpoint_.spec_;
    const std::vector<ExpectedTensor> expected = ExpectedTensors(spec);
    std::set<absl::string_view> expected_names;
    std::vector<std::string> missing;
    for (const ExpectedTensor& e : expected) {
      expected_names.insert(e.name);
      if (all_.find(e.name) == all_.end()) missing.push_back(e.name);
    }
    const std::string where = absl::StrCat(source_.dir(), " (", all_.size(), " tensors stored)");
    if (!missing.empty()) {
      std::string hint;
      if (!spec.tie_word_embeddings && all_.find("lm_head.weight") == all_.end()) {
        hint = absl::StrCat("; lm_head.weight is required because ", config_source_,
                            " has tie_word_embeddings false");
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", missing.size(), " tensor(s) that ", config_source_, " (",
                       spec.architecture_name, ", ", spec.num_layers,
                       " layers) requires are missing: ", QuotedList(missing), hint));
    }
    std::vector<std::string> unexpected;
    for (const auto& entry : all_) {
      if (expected_names.count(entry.first) == 0 && !IsIgnoredBuffer(entry.first)) {
        unexpected.push_back(entry.first);
      }
    }
    if (!unexpected.empty()) {
      std::string hint;
      if (spec.tie_word_embeddings && all_.count("lm_head.weight") > 0) {
        hint = absl::StrCat("; ", config_source_,
                            " has tie_word_embeddings true, so lm_head.weight must be absent");
      }
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", unexpected.size(), " tensor(s) are not part of a ", spec.architecture_name,
          " with ", config_source_, "'s settings: ", QuotedList(unexpected), hint));
    }
    for (const ExpectedTensor& e : expected) {
      const TensorView& view = all_.at(e.name);
      if (view.shape != e.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(view.file, ": tensor ", Quote(e.name), " has shape ",
                         ShapeString(view.shape), ", expected ", ShapeString(e.shape), " (",
                         e.derivation, " from ", config_source_, ")"));
      }
    }
    const TensorView& first = all_.at(expected.front().name);
    const DType want = spec.dtype.value_or(first.dtype);
    for (const ExpectedTensor& e : expected) {
      const TensorView& view = all_.at(e.name);
      if (view.dtype == want) continue;
      if (spec.dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat(view.file, ": tensor ", Quote(e.name), " is ",
                         internal::AsAbsl(SafetensorsDTypeName(view.dtype)), " but ",
                         config_source_, " declares dtype ", internal::AsAbsl(DTypeName(want)),
                         " (every weight must have the config's dtype)"));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          view.file, ": tensor ", Quote(e.name), " is ",
          internal::AsAbsl(SafetensorsDTypeName(view.dtype)), " but tensor ", Quote(first.name),
          " is ", internal::AsAbsl(SafetensorsDTypeName(first.dtype)), " (", config_source_,
          " declares no dtype, so every weight must share one)"));
    }
    std::size_t bytes = 0;
    for (const ExpectedTensor& e : expected) {
      TensorView& view = all_.at(e.name);
      bytes += view.bytes;  // each lies inside a mapped file: the sum cannot wrap
      checkpoint_.tensors_.emplace(e.name, std::move(view));
    }
    checkpoint_.weight_bytes_ = bytes;
    checkpoint_.dtype_ = want;
    return absl::OkStatus();
  }

  FileSource& source_;
  std::string config_source_;
  std::map<std::string, TensorView> all_;
  Checkpoint checkpoint_;
};

namespace {

absl::StatusOr<Checkpoint> LoadGuarded(FileSource& source, absl::string_view config_text,
                                       const std::string& config_source) {
  // The readers use checked accessors only; this catch is the boundary's
  // guarantee (allocation failure included) that nothing escapes as a throw.
  try {
    CheckpointLoader loader(source, config_source);
    return loader.Load(config_text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source.dir(), ": cannot load the checkpoint (", e.what(), ")"));
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(source.dir(), ": cannot load the checkpoint"));
  }
}

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such directory"));
  }
  DiskSource source(dir);
  const std::string config_path = source.Path("config.json");
  absl::StatusOr<std::string> config = ReadSmallFile(config_path);
  if (!config.ok()) {
    if (absl::IsNotFound(config.status())) {
      return absl::NotFoundError(absl::StrCat(config_path,
                                              ": no such file (a Hugging Face model directory "
                                              "has config.json beside the weights)"));
    }
    return config.status();
  }
  return LoadGuarded(source, *config, config_path);
}

absl::StatusOr<Checkpoint> Checkpoint::FromMemory(std::string config_json,
                                                  std::map<std::string, std::string> files,
                                                  std::string dir_name) {
  MemorySource source(std::move(dir_name), std::move(files));
  return LoadGuarded(source, config_json, source.Path("config.json"));
}

Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const TensorView* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& Checkpoint::tensor(std::string_view name) const {
  const TensorView* view = find(name);
  if (view == nullptr) {
    std::fprintf(stderr,
                 "baton::checkpoint::Checkpoint::tensor: '%.*s' is not a tensor of this %s "
                 "(ExpectedTensors lists the names)\n",
                 static_cast<int>(name.size()), name.data(), spec_.architecture_name.c_str());
    std::abort();
  }
  return *view;
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& spec) {
  const std::int64_t hidden = spec.hidden_size;
  const std::int64_t q = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  const std::int64_t inter = spec.intermediate_size;
  const std::int64_t vocab = spec.vocab_size;
  constexpr absl::string_view kQ = "num_attention_heads * head_dim";
  constexpr absl::string_view kKv = "num_key_value_heads * head_dim";
  std::vector<ExpectedTensor> out;
  auto add = [&out](std::string name, std::vector<std::int64_t> shape, std::string derivation) {
    out.push_back({std::move(name), std::move(shape), std::move(derivation)});
  };
  add("model.embed_tokens.weight", {vocab, hidden}, "[vocab_size, hidden_size]");
  for (int i = 0; i < spec.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    add(p + "input_layernorm.weight", {hidden}, "[hidden_size]");
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      const bool is_q = proj[0] == 'q';
      const std::int64_t rows = is_q ? q : kv;
      const absl::string_view what = is_q ? kQ : kKv;
      add(absl::StrCat(p, "self_attn.", proj, ".weight"), {rows, hidden},
          absl::StrCat("[", what, ", hidden_size]"));
      if (spec.qkv_bias)
        add(absl::StrCat(p, "self_attn.", proj, ".bias"), {rows}, absl::StrCat("[", what, "]"));
    }
    add(p + "self_attn.o_proj.weight", {hidden, q}, absl::StrCat("[hidden_size, ", kQ, "]"));
    if (spec.o_bias) add(p + "self_attn.o_proj.bias", {hidden}, "[hidden_size]");
    add(p + "post_attention_layernorm.weight", {hidden}, "[hidden_size]");
    add(p + "mlp.gate_proj.weight", {inter, hidden}, "[intermediate_size, hidden_size]");
    add(p + "mlp.up_proj.weight", {inter, hidden}, "[intermediate_size, hidden_size]");
    add(p + "mlp.down_proj.weight", {hidden, inter}, "[hidden_size, intermediate_size]");
  }
  add("model.norm.weight", {hidden}, "[hidden_size]");
  if (!spec.tie_word_embeddings)
    add("lm_head.weight", {vocab, hidden}, "[vocab_size, hidden_size]");
  return out;
}

}  // namespace baton::checkpoint
