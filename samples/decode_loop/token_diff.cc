#include "decode_loop/token_diff.h"

#include <algorithm>
#include <cstddef>
#include <set>

#include "absl/strings/str_cat.h"

namespace baton::samples {

std::string DescribeTokenDifference(const TokensByEntry& reference, const TokensByEntry& run) {
  std::set<std::uint32_t> entries;
  for (const auto& [entry, tokens] : reference) entries.insert(entry);
  for (const auto& [entry, tokens] : run) entries.insert(entry);
  std::size_t differing = 0;
  std::string first;
  for (const std::uint32_t entry : entries) {
    const auto a = reference.find(entry);
    const auto b = run.find(entry);
    if (a != reference.end() && b != run.end() && a->second == b->second) continue;
    ++differing;
    if (!first.empty()) continue;
    if (a == reference.end() || b == run.end()) {
      first = absl::StrCat("entry ", entry, ", which only the ",
                           a == reference.end() ? "engine" : "host loop", " completed");
      continue;
    }
    const std::vector<std::int32_t>& x = a->second;
    const std::vector<std::int32_t>& y = b->second;
    const std::size_t common = std::min(x.size(), y.size());
    const std::size_t at = static_cast<std::size_t>(
        std::mismatch(x.begin(), x.begin() + common, y.begin()).first - x.begin());
    if (at < common) {
      first = absl::StrCat("entry ", entry, ", at token ", at, " of ", x.size(), " (host ", x[at],
                           ", engine ", y[at], ")");
    } else {
      first = absl::StrCat("entry ", entry, ", in length (host ", x.size(), " tokens, engine ",
                           y.size(), ")");
    }
  }
  if (differing == 0) return "";
  return absl::StrCat(differing, " of ", entries.size(), " requests differ; the first, ", first);
}

}  // namespace baton::samples
