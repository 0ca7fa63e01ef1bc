// What every sample prints and saves: a short aligned table, a verdict
// ("Passed" or why not), and the same data as JSON (--json FILE) for results/.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "baton/device.h"

namespace baton::samples {

using Value = std::variant<std::string, double, std::int64_t, bool>;

// One table row: ordered (column, value) pairs.
class Row {
 public:
  Row& Set(std::string column, Value value);
  [[nodiscard]] const std::vector<std::pair<std::string, Value>>& cells() const { return cells_; }

 private:
  std::vector<std::pair<std::string, Value>> cells_;
};

class Report {
 public:
  explicit Report(std::string sample);

  void SetDevice(const DeviceInfo& device) { device_ = device; }
  // Run parameters (sizes, repeats): printed above the table, saved in JSON.
  void SetParam(std::string key, Value value);
  Row& AddRow();
  // The verdict; a failed check anywhere makes the sample fail.
  void Fail(std::string why);
  [[nodiscard]] bool passed() const { return failures_.empty(); }

  // Prints the table and the verdict line ("Passed" or "Failed: ...").
  void Print(std::ostream& out) const;
  [[nodiscard]] absl::Status WriteJson(const std::string& path) const;

 private:
  std::string sample_;
  DeviceInfo device_;
  std::vector<std::pair<std::string, Value>> params_;
  std::vector<Row> rows_;
  std::vector<std::string> failures_;
};

// Formats a value the way the table shows it (doubles with 3 significant digits
// past the point where that matters).
[[nodiscard]] std::string FormatValue(const Value& value);

}  // namespace baton::samples
