#include "json_util.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::checkpoint::internal {
namespace {

// Replays a failed parse only to learn where and why it failed: the DOM parser
// with exceptions off reports nothing but "discarded".
class ErrorFinder : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    position_ = position;
    message_ = error.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ..."
    // reads better without the exception's id.
    const std::size_t close = message_.find("] ");
    if (close != std::string::npos) message_.erase(0, close + 2);
    return false;
  }

  std::size_t position() const { return position_; }
  const std::string& message() const { return message_; }

 private:
  std::size_t position_ = 0;
  std::string message_ = "unknown error";
};

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source,
                               absl::string_view what) {
  std::vector<std::set<std::string>> keys_per_object;
  std::string duplicate;
  const Json::parser_callback_t track_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys_per_object.empty() && parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!keys_per_object.back().insert(key).second && duplicate.empty()) duplicate = key;
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json value = Json::parse(text.begin(), text.end(), track_keys, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    ErrorFinder finder;
    Json::sax_parse(text.begin(), text.end(), &finder);
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " is not valid JSON (", finder.message(), ")"));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what, " has the key ",
                                                   Quote(duplicate),
                                                   " twice in one object (keys must be unique)"));
  }
  return value;
}

std::string Quote(absl::string_view text) {
  constexpr std::size_t kMax = 96;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > kMax) out += "...";
  out += "'";
  return out;
}

std::string Describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case Json::value_t::string:
      return Quote(value.get_ref<const std::string&>());
    case Json::value_t::number_integer:
      return absl::StrCat(value.get<std::int64_t>());
    case Json::value_t::number_unsigned:
      return absl::StrCat(value.get<std::uint64_t>());
    case Json::value_t::number_float: {
      // dump() writes the shortest text that reads back exactly, and "null"
      // for the infinities an overflowing literal parses to.
      const double v = value.get<double>();
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      return value.dump();
    }
    case Json::value_t::object:
      return absl::StrCat("an object with ", value.size(), value.size() == 1 ? " key" : " keys");
    case Json::value_t::array:
      return absl::StrCat("an array of ", value.size(), value.size() == 1 ? " value" : " values");
    default:
      return "an unknown value";
  }
}

namespace {

// A scalar's type in words (Describe shows only its value); null, objects and
// arrays never get here, Describe says their type already.
absl::string_view ScalarTypeName(const Json& value) {
  if (value.is_boolean()) return "a boolean";
  if (value.is_string()) return "a string";
  if (value.is_number_integer()) return "an integer";  // signed or unsigned
  if (value.is_number_float()) return "a fraction";
  return "an unknown value";
}

}  // namespace

std::string DescribeWithType(const Json& value) {
  if (value.is_structured() || value.is_null()) return Describe(value);
  return absl::StrCat(ScalarTypeName(value), " ", Describe(value));
}

bool AsInt64(const Json& value, std::int64_t* out) {
  if (value.is_number_unsigned()) {
    const std::uint64_t v = value.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    *out = static_cast<std::int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<std::int64_t>();
    return true;
  }
  return false;
}

bool AsUint64(const Json& value, std::uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<std::uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const std::int64_t v = value.get<std::int64_t>();
    if (v < 0) return false;
    *out = static_cast<std::uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace baton::checkpoint::internal
