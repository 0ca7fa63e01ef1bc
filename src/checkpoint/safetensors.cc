#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "json_util.h"

namespace baton::checkpoint {

using internal::Describe;
using internal::DescribeWithType;
using internal::Json;
using internal::Quote;

// Either a read-only mapping or bytes the object owns; never both. Owned
// bytes sit in a buffer of exactly the file's size (not a std::string, whose
// capacity and terminator lie past the end), so AddressSanitizer in the fuzz
// test sees a read one byte past the file.
struct SafetensorsFile::Storage {
  std::unique_ptr<unsigned char[]> owned;
  std::size_t owned_size = 0;
  void* map = nullptr;
  std::size_t map_size = 0;

  ~Storage() {
    if (map != nullptr) munmap(map, map_size);
  }
  const unsigned char* data() const {
    return map != nullptr ? static_cast<const unsigned char*>(map) : owned.get();
  }
  std::size_t size() const { return map != nullptr ? map_size : owned_size; }
};

namespace {

struct Entry {
  TensorView view;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& file) : file_(file) {}

  absl::Status Error(absl::string_view text) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", text));
  }
  absl::Status TensorError(absl::string_view tensor, absl::string_view text) const {
    return Error(absl::StrCat("tensor ", Quote(tensor), ": ", text));
  }

  absl::Status ReadEntry(const std::string& name, const Json& entry, std::uint64_t data_size,
                         Entry* out) const {
    if (!entry.is_object()) {
      return TensorError(name, absl::StrCat("must be an object with dtype, shape and "
                                            "data_offsets, got ",
                                            DescribeWithType(entry)));
    }
    for (absl::string_view field : {"dtype", "shape", "data_offsets"}) {
      if (entry.find(field) == entry.end()) {
        return TensorError(name, absl::StrCat(field, " is missing"));
      }
    }
    const Json& dtype = *entry.find("dtype");
    if (!dtype.is_string()) {
      return TensorError(name,
                         absl::StrCat("dtype must be a string, got ", DescribeWithType(dtype)));
    }
    const std::string& dtype_name = dtype.get_ref<const std::string&>();
    const std::optional<DType> parsed = SafetensorsDType(dtype_name);
    if (!parsed) {
      return TensorError(name, absl::StrCat("dtype ", Describe(dtype),
                                            " is not supported (supported: F32, F16, BF16)"));
    }
    out->view.dtype = *parsed;
    const Json& shape = *entry.find("shape");
    if (!shape.is_array()) {
      return TensorError(
          name, absl::StrCat("shape must be a list of sizes, got ", DescribeWithType(shape)));
    }
    // Overflow-checked: a hostile shape must not wrap around to a small size.
    std::uint64_t elements = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      std::int64_t dim = 0;
      if (!internal::AsInt64(shape[i], &dim) || dim < 0) {
        return TensorError(name, absl::StrCat("shape[", i, "] ", Describe(shape[i]),
                                              " is not a size (an integer >= 0)"));
      }
      out->view.shape.push_back(dim);
      overflow =
          overflow || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(dim), &elements);
    }
    std::uint64_t bytes = 0;
    overflow = overflow || __builtin_mul_overflow(elements, DTypeSize(out->view.dtype), &bytes);
    if (overflow) {
      return TensorError(name, absl::StrCat("shape ", ShapeString(out->view.shape), " of ",
                                            dtype_name, " has more bytes than 64 bits can count"));
    }
    const Json& offsets = *entry.find("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 ||
        !internal::AsUint64(offsets[0], &out->begin) ||
        !internal::AsUint64(offsets[1], &out->end)) {
      return TensorError(name,
                         absl::StrCat("data_offsets must be [begin, end] (two integers >= 0), "
                                      "got ",
                                      Describe(offsets)));
    }
    const std::string range = absl::StrCat("[", out->begin, ", ", out->end, "]");
    if (out->begin > out->end) {
      return TensorError(name, absl::StrCat("data_offsets ", range, " has begin after end"));
    }
    if (out->end - out->begin != bytes) {
      return TensorError(name, absl::StrCat("data_offsets ", range, " hold ", out->end - out->begin,
                                            " bytes but shape ", ShapeString(out->view.shape),
                                            " of ", dtype_name, " needs ", bytes));
    }
    if (out->end > data_size) {
      return TensorError(name, absl::StrCat("data_offsets ", range, " end past the data section (",
                                            data_size, " bytes): the file is truncated"));
    }
    out->view.name = name;
    out->view.bytes = static_cast<std::size_t>(bytes);
    out->view.file = file_;
    return absl::OkStatus();
  }

 private:
  const std::string& file_;
};

absl::Status CheckMetadata(const HeaderReader& r, const Json& metadata) {
  if (!metadata.is_object()) {
    return r.Error(absl::StrCat("__metadata__ must be an object of strings, got ",
                                DescribeWithType(metadata)));
  }
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    if (!it->is_string()) {
      return r.Error(absl::StrCat("__metadata__ value ", Quote(it.key()), " must be a string, got ",
                                  DescribeWithType(*it)));
    }
  }
  return absl::OkStatus();
}

// The format requires the ranges to tile the data section exactly: sorted by
// offset, each begins where the previous ended and the last ends at the end.
absl::Status CheckTiling(const HeaderReader& r, std::vector<Entry>& entries,
                         std::uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.view.name) < std::tie(b.begin, b.end, b.view.name);
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      return r.TensorError(e.view.name,
                           absl::StrCat("data_offsets [", e.begin, ", ", e.end, "] overlap tensor ",
                                        Quote(previous->view.name), " at [", previous->begin, ", ",
                                        previous->end, "] (ranges must not overlap)"));
    }
    if (e.begin > covered) {
      return r.Error(absl::StrCat("bytes [", covered, ", ", e.begin,
                                  ") of the data section belong to no tensor (a gap before tensor ",
                                  Quote(e.view.name), "; the format allows no holes)"));
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    return r.Error(absl::StrCat("bytes [", covered, ", ", data_size,
                                ") at the end of the data section belong to no tensor (the format "
                                "allows no unindexed bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorView>> ParseLayout(const std::string& file,
                                                    const unsigned char* data, std::size_t size) {
  const HeaderReader r(file);
  if (size < 8) {
    return r.Error(absl::StrCat("the file is ", size,
                                " bytes, shorter than the 8-byte header length (not a safetensors "
                                "file)"));
  }
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | data[i];
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return r.Error(absl::StrCat("header length ", header_size, " is over the ",
                                kMaxSafetensorsHeaderBytes,
                                "-byte limit (corrupt, or not a safetensors file)"));
  }
  if (header_size > size - 8) {
    return r.Error(absl::StrCat("header length ", header_size, " runs past the end of the file (",
                                size, " bytes; the header would end at byte ", 8 + header_size,
                                ")"));
  }
  const char* header = reinterpret_cast<const char*>(data) + 8;
  absl::StatusOr<Json> parsed =
      internal::ParseJson(absl::string_view(header, header_size), file, "the header");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return r.Error(
        absl::StrCat("the header must be a JSON object, got ", DescribeWithType(*parsed)));
  }
  const std::uint64_t data_size = size - 8 - header_size;
  const unsigned char* section = data + 8 + header_size;
  std::vector<Entry> entries;
  entries.reserve(parsed->size());
  for (auto it = parsed->begin(); it != parsed->end(); ++it) {
    if (it.key() == "__metadata__") {
      // Free-form producer notes (format, versions): checked, then ignored.
      if (absl::Status s = CheckMetadata(r, *it); !s.ok()) return s;
      continue;
    }
    Entry entry;
    if (absl::Status s = r.ReadEntry(it.key(), *it, data_size, &entry); !s.ok()) return s;
    entries.push_back(std::move(entry));
  }
  if (absl::Status s = CheckTiling(r, entries, data_size); !s.ok()) return s;
  std::vector<TensorView> views;
  views.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.data = section + e.begin;
    views.push_back(std::move(e.view));
  }
  return views;
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string name, std::unique_ptr<Storage> storage)
    : name_(std::move(name)), storage_(std::move(storage)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

std::size_t SafetensorsFile::size() const { return storage_ ? storage_->size() : 0; }

absl::Status SafetensorsFile::Index() {
  // The layout code uses checked accessors only; this catch is the boundary's
  // guarantee (allocation failure included) that nothing escapes as a throw.
  try {
    absl::StatusOr<std::vector<TensorView>> views =
        ParseLayout(name_, storage_->data(), storage_->size());
    if (!views.ok()) return views.status();
    tensors_ = *std::move(views);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot read the header (", e.what(), ")"));
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": cannot read the header"));
  }
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string name, std::string bytes) {
  auto storage = std::make_unique<Storage>();
  storage->owned = std::make_unique<unsigned char[]>(bytes.size());
  storage->owned_size = bytes.size();
  if (!bytes.empty()) std::memcpy(storage->owned.get(), bytes.data(), bytes.size());
  bytes = std::string();  // the copy is the file now
  SafetensorsFile file(std::move(name), std::move(storage));
  if (absl::Status s = file.Index(); !s.ok()) return s;
  return file;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  auto storage = std::make_unique<Storage>();
  const std::size_t size = static_cast<std::size_t>(info.st_size);
  // mmap refuses length 0; such a file is refused by the layout check with
  // the same message an in-memory one gets.
  if (size > 0) {
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot map ", size, " bytes"));
    }
    storage->map = map;
    storage->map_size = size;
  }
  ::close(fd);  // the mapping keeps the file open
  SafetensorsFile file(path, std::move(storage));
  if (absl::Status s = file.Index(); !s.ok()) return s;
  return file;
}

std::size_t NumElements(const TensorView& tensor) { return tensor.bytes / DTypeSize(tensor.dtype); }

std::string ShapeString(const std::vector<std::int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace baton::checkpoint
