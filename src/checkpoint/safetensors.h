// A safetensors file (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype,
// shape and [begin, end) byte range, then the data section those ranges index.
// Opening validates the whole layout, so every TensorView handed out points
// at exactly its own bytes inside the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/model_spec.h"

namespace baton::checkpoint {

// One tensor inside a mapped (or in-memory) file. `data` is not aligned: the
// format puts no alignment on offsets; read it with memcpy.
struct TensorView {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
  const unsigned char* data = nullptr;  // valid while the owning file lives
  std::size_t bytes = 0;
  std::string file;  // the path (or in-memory name) for messages
};

// The header may not exceed this (the reference implementation's limit).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

class SafetensorsFile {
 public:
  // Maps `path` read-only (POSIX mmap; multi-GB files are never read into
  // memory). NotFound when the file does not exist; InvalidArgument naming
  // the file and the tensor or field for every layout error. The file must not
  // be truncated by another process while mapped (that would raise SIGBUS).
  [[nodiscard]] static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // The same validation over bytes held in memory (tests, the fuzz test);
  // `name` stands in for the path in messages.
  [[nodiscard]] static absl::StatusOr<SafetensorsFile> FromBytes(std::string name,
                                                                 std::string bytes);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // In data-section order. The views stay valid across moves of this object.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::string& name() const { return name_; }
  // The whole file's size in bytes.
  std::size_t size() const;

 private:
  struct Storage;
  SafetensorsFile(std::string name, std::unique_ptr<Storage> storage);
  [[nodiscard]] absl::Status Index();

  std::string name_;
  // Behind a pointer so the views' addresses survive moves (a small
  // std::string's bytes live inside the object).
  std::unique_ptr<Storage> storage_;
  std::vector<TensorView> tensors_;
};

// Elements in a view (bytes / element size).
[[nodiscard]] std::size_t NumElements(const TensorView& tensor);
// "[4096, 128]".
[[nodiscard]] std::string ShapeString(const std::vector<std::int64_t>& shape);

}  // namespace baton::checkpoint
