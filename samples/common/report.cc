#include "common/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace baton::samples {
namespace {

// Samples' rows are (column, value) lists whose order is the table's: kept.
using Json = nlohmann::ordered_json;

Json JsonValue(const Value& value) {
  struct Visitor {
    Json operator()(const std::string& s) const { return s; }
    Json operator()(double d) const { return std::isfinite(d) ? Json(d) : Json(nullptr); }
    Json operator()(std::int64_t i) const { return i; }
    Json operator()(bool b) const { return b; }
  };
  return std::visit(Visitor{}, value);
}

Json JsonObject(const std::vector<std::pair<std::string, Value>>& cells) {
  Json out = Json::object();
  for (const auto& [key, value] : cells) out[key] = JsonValue(value);
  return out;
}

}  // namespace

std::string FormatValue(const Value& value) {
  struct Visitor {
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(double d) const {
      if (!std::isfinite(d)) return "n/a";
      const double magnitude = std::fabs(d);
      if (magnitude != 0 && (magnitude >= 1e7 || magnitude < 1e-3))
        return absl::StrFormat("%.3g", d);
      if (magnitude >= 100) return absl::StrFormat("%.1f", d);
      return absl::StrFormat("%.3f", d);
    }
    std::string operator()(std::int64_t i) const { return absl::StrCat(i); }
    std::string operator()(bool b) const { return b ? "yes" : "NO"; }
  };
  return std::visit(Visitor{}, value);
}

Row& Row::Set(std::string column, Value value) {
  for (auto& cell : cells_) {
    if (cell.first == column) {
      cell.second = std::move(value);
      return *this;
    }
  }
  cells_.emplace_back(std::move(column), std::move(value));
  return *this;
}

Report::Report(std::string sample) : sample_(std::move(sample)) {}

void Report::SetParam(std::string key, Value value) {
  params_.emplace_back(std::move(key), std::move(value));
}

Row& Report::AddRow() { return rows_.emplace_back(); }

void Report::Fail(std::string why) { failures_.push_back(std::move(why)); }

void Report::Print(std::ostream& out) const {
  out << sample_ << " on " << (device_.name.empty() ? "no device" : Describe(device_)) << "\n";
  for (const auto& [key, value] : params_)
    out << "  " << key << " = " << FormatValue(value) << "\n";
  // Columns in first-seen order across all rows.
  std::vector<std::string> columns;
  for (const Row& row : rows_) {
    for (const auto& cell : row.cells()) {
      if (std::find(columns.begin(), columns.end(), cell.first) == columns.end()) {
        columns.push_back(cell.first);
      }
    }
  }
  std::vector<size_t> widths;
  for (const std::string& column : columns) widths.push_back(column.size());
  std::vector<std::vector<std::string>> text;
  for (const Row& row : rows_) {
    std::vector<std::string> line(columns.size());
    for (const auto& cell : row.cells()) {
      const size_t c = std::find(columns.begin(), columns.end(), cell.first) - columns.begin();
      line[c] = FormatValue(cell.second);
      widths[c] = std::max(widths[c], line[c].size());
    }
    text.push_back(std::move(line));
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    for (size_t c = 0; c < line.size(); ++c) {
      out << (c ? "  " : "") << absl::StrFormat("%*s", static_cast<int>(widths[c]), line[c]);
    }
    out << "\n";
  };
  if (!columns.empty()) {
    print_line(columns);
    for (const auto& line : text) print_line(line);
  }
  if (passed()) {
    out << "Passed\n";
  } else {
    for (const std::string& why : failures_) out << "Failed: " << why << "\n";
  }
}

absl::Status Report::WriteJson(const std::string& path) const {
  Json json = Json::object();
  json["sample"] = sample_;
  json["date"] = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  json["device"] = JsonObject(
      {{"name", device_.name},
       {"compute_capability", absl::StrCat(device_.compute_major, ".", device_.compute_minor)},
       {"multiprocessors", static_cast<std::int64_t>(device_.multiprocessors)},
       {"driver_version", static_cast<std::int64_t>(device_.driver_version)},
       {"runtime_version", static_cast<std::int64_t>(device_.runtime_version)}});
  json["params"] = JsonObject(params_);
  json["rows"] = Json::array();
  for (const Row& row : rows_) json["rows"].push_back(JsonObject(row.cells()));
  json["passed"] = passed();
  json["failures"] = failures_;
  std::ofstream file(path);
  if (!file)
    return absl::InvalidArgumentError(absl::StrCat("--json: cannot open ", path, " for writing"));
  file << json.dump(2) << "\n";
  if (!file.good()) return absl::DataLossError(absl::StrCat("--json: writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace baton::samples
