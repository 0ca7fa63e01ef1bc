// An output against its reference element by element: every element must
// satisfy |out_i − ref_i| ≤ atol + rtol·|ref_i|. A bound on a norm over the
// whole output lets one element far off pass among thousands; this does not.
// NaN (an element a kernel left poisoned) is outside any bound.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace baton::testing {

struct ElementReport {
  std::size_t outside = 0;  // elements past their bound
  std::size_t worst = 0;    // the element farthest out, as a fraction of its own bound
  double worst_ratio = 0;   // |out − ref| / bound there (> 1 is outside; infinity for NaN)
};

[[nodiscard]] ElementReport CompareElements(const std::vector<double>& out,
                                            const std::vector<double>& ref, double atol,
                                            double rtol);

// Expects every element inside; a failure names how many are outside, the
// bound (`atol_note` says what atol is made of, when not a plain constant) and
// the worst element (as row, column when `width` > 0) with both values.
// Returns the comparison for the caller's report.
ElementReport ExpectElementsWithin(const std::string& what, const std::vector<double>& out,
                                   const std::vector<double>& ref, double atol, double rtol,
                                   int width = 0, const std::string& atol_note = "");

}  // namespace baton::testing
