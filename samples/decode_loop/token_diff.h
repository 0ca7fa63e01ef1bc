// What decode_loop says when an engine's tokens differ from the host loop's:
// how many requests differ and where the first one diverges, so that a rare
// mismatch (a race, a schedule that differs) leaves a trace to start from
// rather than a bare "different tokens".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace baton::samples {

using TokensByEntry = std::map<std::uint32_t, std::vector<std::int32_t>>;

// "" when `run` equals `reference`; otherwise, e.g., "3 of 192 requests
// differ; the first, entry 17, at token 42 of 128 (host 1234, engine 99)",
// with entries missing from either side counted as differing.
std::string DescribeTokenDifference(const TokensByEntry& reference, const TokensByEntry& run);

}  // namespace baton::samples
