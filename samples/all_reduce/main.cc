// all_reduce: Baton's one-shot all-reduce over peer memory (baton/peer_group.h)
// beside NCCL's, on the GPUs of this host, at the sizes a decode step reduces
// (4-64 KB of bf16 activations). Each rank captures --calls back-to-back
// all-reduces in one CUDA graph, as a step graph would hold them; all ranks
// replay their graphs together and the time per call is the slowest rank's
// graph time / calls (median of --repeats). Checked: Baton's result is the
// same bits on every rank and within bf16 rounding of NCCL's.
//
// NCCL is loaded at run time (libnccl.so.2, e.g. the one PyTorch's wheel
// ships): without it the NCCL column is left out. It runs with
// NCCL_NVLS_ENABLE=0 (no NVLink multicast: on the shared machines it is
// forbidden), set here before NCCL starts whatever the environment says.
#include <dlfcn.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define BATON_HAVE_NCCL_H 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/peer_group.h"
#include "baton/status.h"
#include "common/init.h"
#include "common/report.h"
#include "common/timing.h"

ABSL_FLAG(int, ranks, 0, "GPUs in the group (0: every visible GPU, at most 8)");
ABSL_FLAG(std::string, sizes, "4096,8192,16384,32768,65536", "all-reduce sizes in bytes");
ABSL_FLAG(int, calls, 64, "all-reduces per graph");
ABSL_FLAG(int, repeats, 20, "timed replays (the median is reported)");
ABSL_FLAG(std::string, blocks, "16", "Baton's blocks per rank (PeerGroupOptions::blocks), each a row");

namespace baton::samples {
namespace {

#ifdef BATON_HAVE_NCCL_H
// The NCCL entry points this sample calls, from dlopen("libnccl.so.2").
struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string missing;  // why NCCL is not used (empty: loaded)

  static Nccl Load() {
    Nccl n;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n.missing = absl::StrCat("libnccl.so.2 not found (", dlerror(), ")");
      return n;
    }
    const auto get = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      if (f == nullptr) n.missing = absl::StrCat("libnccl.so.2 lacks ", name);
    };
    get(n.comm_init_all, "ncclCommInitAll");
    get(n.comm_destroy, "ncclCommDestroy");
    get(n.group_start, "ncclGroupStart");
    get(n.group_end, "ncclGroupEnd");
    get(n.all_reduce, "ncclAllReduce");
    get(n.error_string, "ncclGetErrorString");
    return n;
  }
};
#else
// Built without nccl.h: the NCCL column is left out.
using ncclComm_t = void*;
struct Nccl {
  std::string missing = "built without nccl.h";
  static Nccl Load() { return Nccl{}; }
  int comm_destroy(ncclComm_t) const { return 0; }
};
#endif

#define NCCL_RETURN_IF_ERROR(nccl, expr)                                                     \
  do {                                                                                       \
    const ncclResult_t nccl_result = (expr);                                                 \
    if (nccl_result != ncclSuccess) {                                                        \
      return absl::InternalError(absl::StrCat(#expr, ": ", (nccl).error_string(nccl_result))); \
    }                                                                                        \
  } while (0)

struct RankState {
  Stream stream;
  DeviceBuffer<std::uint16_t> in, out;
  GraphExec graph;
  Event start, stop;
};

// Captures `enqueue_all()` (one all-reduce of every rank) `calls` times into
// each rank's graph, every rank's capture open at once (NCCL's grouped calls
// over several communicators need that).
absl::Status Capture(std::vector<RankState>& ranks, int calls,
                     const std::function<absl::Status()>& enqueue_all) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(static_cast<int>(r)));
    BATON_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(ranks[r].stream.get(), cudaStreamCaptureModeRelaxed));
  }
  for (int k = 0; k < calls; ++k) BATON_RETURN_IF_ERROR(enqueue_all());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(static_cast<int>(r)));
    cudaGraph_t graph = nullptr;
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(ranks[r].stream.get(), &graph));
    auto exec = InstantiateGraph(graph);
    (void)cudaGraphDestroy(graph);
    BATON_RETURN_IF_ERROR(exec.status());
    ranks[r].graph = std::move(*exec);
  }
  return absl::OkStatus();
}

// The slowest rank's graph time per call, median over repeats (2 warm-ups).
absl::StatusOr<double> TimeGraphs(std::vector<RankState>& ranks, int calls, int repeats) {
  std::vector<double> per_call;
  for (int rep = -2; rep < repeats; ++rep) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(static_cast<int>(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks[r].start.get(), ranks[r].stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(ranks[r].graph.get(), ranks[r].stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks[r].stop.get(), ranks[r].stream.get()));
    }
    double slowest = 0.0;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(static_cast<int>(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ranks[r].stop.get()));
      float ms = 0.0f;
      BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ranks[r].start.get(), ranks[r].stop.get()));
      slowest = std::max(slowest, static_cast<double>(ms));
    }
    if (rep >= 0) per_call.push_back(slowest * 1e3 / calls);
  }
  return Median(per_call);
}

absl::StatusOr<std::vector<std::uint16_t>> Read(const DeviceBuffer<std::uint16_t>& buffer) {
  std::vector<std::uint16_t> host(buffer.size());
  BATON_RETURN_IF_ERROR(buffer.CopyTo(absl::MakeSpan(host)));
  return host;
}

float Bf16(std::uint16_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

absl::Status Run(Report& report) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  int visible = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&visible));
  const int n = absl::GetFlag(FLAGS_ranks) > 0 ? absl::GetFlag(FLAGS_ranks) : std::min(visible, 8);
  report.SetParam("ranks", static_cast<std::int64_t>(n));
  if (visible < 2 || n < 2) {
    report.SetParam("skipped", std::string("one GPU visible: an all-reduce needs 2 (nothing measured)"));
    return absl::OkStatus();
  }
  if (n > visible) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--ranks=%d but this process sees %d GPUs", n, visible));
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<std::uint32_t> sizes,
                         ParsePositiveList(absl::GetFlag(FLAGS_sizes), "sizes"));
  const int calls = absl::GetFlag(FLAGS_calls), repeats = absl::GetFlag(FLAGS_repeats);
  report.SetParam("calls_per_graph", static_cast<std::int64_t>(calls));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));
  const std::uint32_t largest = *std::max_element(sizes.begin(), sizes.end());

  PeerGroupOptions options;
  for (int r = 0; r < n; ++r) options.devices.push_back(r);
  options.max_bytes = (largest + 15) / 16 * 16;
  BATON_ASSIGN_OR_RETURN(const std::vector<std::uint32_t> block_counts,
                         ParsePositiveList(absl::GetFlag(FLAGS_blocks), "blocks"));
  std::vector<std::unique_ptr<PeerGroup>> groups;  // one per block count
  for (std::uint32_t blocks : block_counts) {
    options.blocks = static_cast<int>(blocks);
    BATON_ASSIGN_OR_RETURN(auto group, PeerGroup::Create(options));
    groups.push_back(std::move(group));
  }
  const Nccl nccl = Nccl::Load();
  std::vector<ncclComm_t> comms(n);
#ifdef BATON_HAVE_NCCL_H
  if (nccl.missing.empty()) {
    NCCL_RETURN_IF_ERROR(nccl, nccl.comm_init_all(comms.data(), n, options.devices.data()));
  }
#endif
  if (!nccl.missing.empty()) {
    report.SetParam("nccl", nccl.missing);
  }

  std::mt19937_64 rng(20261127);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (std::uint32_t bytes : sizes) {
    if (bytes % 16 != 0) return absl::InvalidArgumentError(absl::StrCat("--sizes: ", bytes, " is not a multiple of 16"));
    const std::size_t count = bytes / 2;
    std::vector<RankState> ranks(n);
    for (int r = 0; r < n; ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(r));
      BATON_ASSIGN_OR_RETURN(ranks[r].stream, CreateStream());
      BATON_ASSIGN_OR_RETURN(ranks[r].in, DeviceBuffer<std::uint16_t>::Create(count));
      BATON_ASSIGN_OR_RETURN(ranks[r].out, DeviceBuffer<std::uint16_t>::Create(count));
      BATON_ASSIGN_OR_RETURN(ranks[r].start, CreateEvent(cudaEventDefault));
      BATON_ASSIGN_OR_RETURN(ranks[r].stop, CreateEvent(cudaEventDefault));
      std::vector<std::uint16_t> host(count);
      for (auto& h : host) {
        const float f = value(rng);
        std::uint32_t word;
        std::memcpy(&word, &f, sizeof word);
        h = static_cast<std::uint16_t>(word >> 16);  // truncation is fine for inputs
      }
      BATON_RETURN_IF_ERROR(ranks[r].in.CopyFrom(host));
    }
    // Baton, at each block count; the best is the row's.
    double baton_us = 0.0;
    std::uint32_t best_blocks = 0;
    std::string by_blocks;
    std::vector<std::vector<std::uint16_t>> baton_out;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const PeerGroup& group = *groups[g];
      BATON_RETURN_IF_ERROR(Capture(ranks, calls, [&]() -> absl::Status {
        for (int r = 0; r < n; ++r) {
          BATON_RETURN_IF_ERROR(group.AllReduce(r, ranks[r].in.data(), ranks[r].out.data(), count,
                                                DecoderDType::kBFloat16, ranks[r].stream.get()));
        }
        return absl::OkStatus();
      }));
      BATON_ASSIGN_OR_RETURN(const double us, TimeGraphs(ranks, calls, repeats));
      BATON_RETURN_IF_ERROR(group.CheckFaults());
      absl::StrAppend(&by_blocks, by_blocks.empty() ? "" : ", ", block_counts[g], ": ",
                      absl::StrFormat("%.2f", us));
      if (g == 0 || us < baton_us) {
        baton_us = us;
        best_blocks = block_counts[g];
      }
      std::vector<std::vector<std::uint16_t>> outs;
      for (int r = 0; r < n; ++r) {
        BATON_ASSIGN_OR_RETURN(auto out, Read(ranks[r].out));
        outs.push_back(std::move(out));
        if (outs[r] != outs[0]) {
          report.Fail(absl::StrFormat("%u bytes, %u blocks: rank %d's result differs from rank 0's",
                                      bytes, block_counts[g], r));
        }
      }
      if (g > 0 && outs[0] != baton_out[0]) {
        report.Fail(absl::StrFormat("%u bytes: %u blocks give other bits than %u", bytes,
                                    block_counts[g], block_counts[0]));
      }
      if (g == 0) baton_out = std::move(outs);
    }
    Row& row = report.AddRow()
                   .Set("ranks", static_cast<std::int64_t>(n))
                   .Set("bytes", static_cast<std::int64_t>(bytes))
                   .Set("baton_us", baton_us)
                   .Set("blocks", static_cast<std::int64_t>(best_blocks))
                   .Set("baton_us_by_blocks", by_blocks);
    if (!nccl.missing.empty()) continue;
#ifdef BATON_HAVE_NCCL_H
    // NCCL: every rank's call of one all-reduce in one group.
    BATON_RETURN_IF_ERROR(Capture(ranks, calls, [&]() -> absl::Status {
      NCCL_RETURN_IF_ERROR(nccl, nccl.group_start());
      for (int r = 0; r < n; ++r) {
        NCCL_RETURN_IF_ERROR(nccl, nccl.all_reduce(ranks[r].in.data(), ranks[r].out.data(), count,
                                                   ncclBfloat16, ncclSum, comms[r],
                                                   ranks[r].stream.get()));
      }
      NCCL_RETURN_IF_ERROR(nccl, nccl.group_end());
      return absl::OkStatus();
    }));
    BATON_ASSIGN_OR_RETURN(const double nccl_us, TimeGraphs(ranks, calls, repeats));
    BATON_ASSIGN_OR_RETURN(const auto nccl_out, Read(ranks[0].out));
    double worst = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      const double a = Bf16(baton_out[0][i]), b = Bf16(nccl_out[i]);
      worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
    }
    // n values in [-1, 1]: two bf16 roundings of the sum at most apart.
    if (!(worst <= n * 0.0079)) {
      report.Fail(absl::StrFormat("%u bytes: Baton and NCCL differ by %.4g", bytes, worst));
    }
    row.Set("nccl_us", nccl_us).Set("nccl_over_baton", nccl_us / baton_us).Set("max_rel_diff", worst);
#endif
  }
  if (nccl.missing.empty()) {
    for (ncclComm_t comm : comms) (void)nccl.comm_destroy(comm);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "all_reduce",
      "Baton's one-shot all-reduce over peer memory beside NCCL's, in CUDA graphs of back-to-back "
      "calls on every GPU of this host (bf16, 4-64 KB by default). Needs 2 or more GPUs with peer "
      "access; with one it measures nothing.",
      baton::samples::Run);
}
