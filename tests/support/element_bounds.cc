#include "support/element_bounds.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace baton::testing {

ElementReport CompareElements(const std::vector<double>& out, const std::vector<double>& ref,
                              double atol, double rtol) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  ElementReport report;
  report.worst_ratio = -1.0;
  for (std::size_t i = 0; i < ref.size() && i < out.size(); ++i) {
    const double bound = atol + rtol * std::abs(ref[i]);
    const double diff = std::abs(out[i] - ref[i]);
    const bool inside = diff <= bound;  // false for NaN
    const double ratio = inside ? (bound > 0 ? diff / bound : 0.0)
                                : (std::isnan(diff) || bound == 0 ? kInfinity : diff / bound);
    report.outside += !inside;
    if (ratio > report.worst_ratio) {
      report.worst_ratio = ratio;
      report.worst = i;
    }
  }
  return report;
}

ElementReport ExpectElementsWithin(const std::string& what, const std::vector<double>& out,
                                   const std::vector<double>& ref, double atol, double rtol,
                                   int width, const std::string& atol_note) {
  EXPECT_EQ(out.size(), ref.size()) << what;
  EXPECT_FALSE(ref.empty()) << what;
  const ElementReport report = CompareElements(out, ref, atol, rtol);
  if (report.outside == 0) return report;
  const std::size_t at = report.worst;
  const std::string where =
      width > 0 ? "row " + std::to_string(at / width) + " element " + std::to_string(at % width)
                : "element " + std::to_string(at);
  ADD_FAILURE() << what << ": " << report.outside << " of " << ref.size()
                << " elements outside |out − ref| ≤ " << rtol << "·|ref| + " << atol
                << (atol_note.empty() ? "" : " (" + atol_note + ")") << "; the worst, " << where
                << ": out " << out[at] << ", ref " << ref[at] << " (" << report.worst_ratio
                << " of its bound)";
  return report;
}

}  // namespace baton::testing
