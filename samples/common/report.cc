#include "common/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace baton::samples {
namespace {

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string JsonValue(const Value& value) {
  struct Visitor {
    std::string operator()(const std::string& s) const { return "\"" + JsonEscape(s) + "\""; }
    std::string operator()(double d) const {
      return std::isfinite(d) ? absl::StrFormat("%.6g", d) : std::string("null");
    }
    std::string operator()(std::int64_t i) const { return absl::StrCat(i); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
  };
  return std::visit(Visitor{}, value);
}

std::string JsonObject(const std::vector<std::pair<std::string, Value>>& cells) {
  std::string out = "{";
  for (size_t i = 0; i < cells.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "\"", JsonEscape(cells[i].first),
                    "\": ", JsonValue(cells[i].second));
  }
  return out + "}";
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
  std::string json = absl::StrCat("{\n  \"sample\": \"", JsonEscape(sample_), "\",\n");
  absl::StrAppend(&json, "  \"date\": \"",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()),
                  "\",\n");
  absl::StrAppend(
      &json, "  \"device\": ",
      JsonObject(
          {{"name", device_.name},
           {"compute_capability", absl::StrCat(device_.compute_major, ".", device_.compute_minor)},
           {"multiprocessors", static_cast<std::int64_t>(device_.multiprocessors)},
           {"driver_version", static_cast<std::int64_t>(device_.driver_version)},
           {"runtime_version", static_cast<std::int64_t>(device_.runtime_version)}}),
      ",\n");
  absl::StrAppend(&json, "  \"params\": ", JsonObject(params_), ",\n  \"rows\": [\n");
  for (size_t i = 0; i < rows_.size(); ++i) {
    absl::StrAppend(&json, "    ", JsonObject(rows_[i].cells()),
                    i + 1 < rows_.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&json, "  ],\n  \"passed\": ", passed() ? "true" : "false",
                  ",\n  \"failures\": [");
  for (size_t i = 0; i < failures_.size(); ++i) {
    absl::StrAppend(&json, i ? ", " : "", "\"", JsonEscape(failures_[i]), "\"");
  }
  json += "]\n}\n";
  std::ofstream file(path);
  if (!file)
    return absl::InvalidArgumentError(absl::StrCat("--json: cannot open ", path, " for writing"));
  file << json;
  if (!file.good()) return absl::DataLossError(absl::StrCat("--json: writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace baton::samples
