// Baton's NVTX domain: host phases (graph preparation, submission, polling)
// show up under "baton" in Nsight tools without mixing with the user's ranges.
#pragma once

#include <nvtx3/nvtx3.hpp>

namespace baton {

struct NvtxDomain {
  static constexpr char const* name{"baton"};
};

// Marks a host phase for its scope: `NvtxRange range("InstantiateGraph");`.
using NvtxRange = nvtx3::scoped_range_in<NvtxDomain>;

}  // namespace baton
