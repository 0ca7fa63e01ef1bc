// JSON helpers shared by the config, index and safetensors-header readers.
// Internal to baton_checkpoint. nlohmann-json throws on type errors, so the
// readers only touch values through these checked accessors and never let an
// exception reach the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::checkpoint::internal {

using Json = nlohmann::json;

// Debian's Abseil keeps its own string_view (not std::string_view), so the
// public std::string_view arguments are converted once at the boundary.
inline absl::string_view AsAbsl(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

// Parses `text` (exceptions off). A syntax error or a key that appears twice
// in one object is InvalidArgument "<source>: ..."; `what` names the document
// ("config.json", "the safetensors header") in the message. Duplicate keys are
// refused because nlohmann keeps only the last one and other readers (Python
// keeps the last, some keep the first) could then see a different file.
[[nodiscard]] absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source,
                                             absl::string_view what);

// A short rendering of a value for messages: strings quoted and cut at 64
// characters, numbers as written, containers by kind only (rendering them
// would recurse as deep as a hostile file nests).
[[nodiscard]] std::string Describe(const Json& value);

// `text` between single quotes, cut at 96 characters, control bytes escaped.
[[nodiscard]] std::string Quote(absl::string_view text);

// Type and value for "must be X, got ..." messages: "a string '4096'",
// "a fraction 2.5", "an array of 3 values".
[[nodiscard]] std::string DescribeWithType(const Json& value);

// An integer JSON value (signed or unsigned; a fraction or anything else is
// nullopt) that fits in int64 / uint64.
[[nodiscard]] bool AsInt64(const Json& value, std::int64_t* out);
[[nodiscard]] bool AsUint64(const Json& value, std::uint64_t* out);

}  // namespace baton::checkpoint::internal
