// queue_contention: how fast the device work queue hands out work, and when a
// queue beats a static schedule.
//
// Part 1 (pop throughput): a queue pre-filled by device producers is drained
// by a grid of consumers popping per thread, per warp (32 or 256 items a
// claim) or per block (2048), for each grid size and per-item cost. Every run
// is checked exactly-once (each id marked, deliveries == items, no phantom or
// corrupted descriptor). Bytes per pop (16-byte descriptor + 8-byte sequence
// read + 8-byte sequence write, + a 1-byte mark for the check) are set
// against the HBM bandwidth measured by a device-to-device copy.
//
// Part 2 (static vs dynamic): the same per-item work scheduled one thread per
// item, as contiguous chunks per warp of a fixed grid, and pulled from the
// queue by a fixed grid; the results must be bit-identical.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/status.h"
#include "baton/work_queue.h"
#include "common/bandwidth.h"
#include "common/init.h"
#include "common/report.h"
#include "common/timing.h"
#include "queue_contention/contention_kernels.h"

ABSL_FLAG(int, log2_items, 26, "items per batched-pop run (2^N); the queue holds them all");
ABSL_FLAG(int, log2_single_items, 22, "items per per-thread-pop run (2^N)");
ABSL_FLAG(int, repeats, 5, "timed runs per row (the median is reported)");
ABSL_FLAG(std::string, static_log2_items, "16,20,22",
          "item counts (2^N, comma separated) of the static-vs-dynamic comparison");

namespace baton::samples {
namespace {

constexpr double kTargetPopsPerSecond = 5e10;
constexpr int kWarmup = 1;

constexpr PopKind kAllKinds[] = {PopKind::kSingle,   PopKind::kWarp32,    PopKind::kWarp128,
                                 PopKind::kWarp256,  PopKind::kBlock1024, PopKind::kBlock2048,
                                 PopKind::kBlock4096};

const char* Name(PopKind kind) {
  switch (kind) {
    case PopKind::kSingle:
      return "per-thread pop";
    case PopKind::kWarp32:
      return "warp pop x32";
    case PopKind::kWarp128:
      return "warp pop x128";
    case PopKind::kWarp256:
      return "warp pop x256";
    case PopKind::kBlock1024:
      return "block pop x1024";
    case PopKind::kBlock2048:
      return "block pop x2048";
    case PopKind::kBlock4096:
      return "block pop x4096";
  }
  return "?";
}
unsigned Batch(PopKind kind) {
  switch (kind) {
    case PopKind::kSingle:
      return 1;
    case PopKind::kWarp32:
      return 32;
    case PopKind::kWarp128:
      return 128;
    case PopKind::kWarp256:
      return 256;
    case PopKind::kBlock1024:
      return 1024;
    case PopKind::kBlock2048:
      return 2048;
    case PopKind::kBlock4096:
      return 4096;
  }
  return 1;
}
const char* Name(Cost cost) {
  switch (cost) {
    case Cost::kNone:
      return "none";
    case Cost::kLight:
      return "light (32)";
    case Cost::kUneven:
      return "uneven (i%256)";
    case Cost::kClustered:
      return "clustered";
  }
  return "?";
}

struct Context {
  DeviceInfo device;
  Stream stream;
  Event start;
  Event stop;
  WorkQueue queue;
  DeviceBuffer<unsigned char> marks;
  DeviceBuffer<unsigned long long> stats;
  int full_blocks = 0;  // 8 x 256 threads per SM
};

absl::StatusOr<double> ElapsedMs(Context& ctx) {
  BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ctx.stop.get()));
  float ms = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ctx.start.get(), ctx.stop.get()));
  return static_cast<double>(ms);
}

struct PopRun {
  TimingSummary pop;
  TimingSummary fill;
  bool exactly_once = true;
  std::string why;
};

// Fills the queue with `items` ids by device producers, then drains it with
// `kind` consumers; times both, checks exactly-once on every repeat.
absl::StatusOr<PopRun> RunPops(Context& ctx, PopKind kind, int blocks, Cost cost,
                               std::uint64_t items, float* out, int repeats) {
  PopRun run;
  std::vector<double> pop_ms, fill_ms;
  for (int rep = 0; rep < kWarmup + repeats; ++rep) {
    BATON_RETURN_IF_ERROR(ctx.queue.Reset(static_cast<std::uint64_t>(rep) << 33));
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(ctx.stats.data(), 0, ctx.stats.bytes(), ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ctx.marks.data(), 0, items, ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ctx.start.get(), ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(EnqueueFill(ctx.queue.device_view(), items, ctx.stats.data(),
                                           ctx.full_blocks, ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ctx.stop.get(), ctx.stream.get()));
    BATON_ASSIGN_OR_RETURN(const double fill, ElapsedMs(ctx));
    ConsumeArgs args;
    args.queue = ctx.queue.device_view();
    args.cost = cost;
    args.items = items;
    args.marks = ctx.marks.data();
    args.out = out;
    args.stats = ctx.stats.data();
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ctx.start.get(), ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(EnqueueConsume(kind, args, blocks, ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ctx.stop.get(), ctx.stream.get()));
    BATON_ASSIGN_OR_RETURN(const double pop, ElapsedMs(ctx));
    BATON_CUDA_RETURN_IF_ERROR(
        EnqueueCountLost(ctx.marks.data(), items, ctx.stats.data(), ctx.stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream.get()));
    std::vector<unsigned long long> stats(kSampleStats);
    BATON_RETURN_IF_ERROR(ctx.stats.CopyTo(absl::MakeSpan(stats)));
    BATON_RETURN_IF_ERROR(ctx.queue.CheckDeviceError());
    BATON_ASSIGN_OR_RETURN(const std::uint64_t left, ctx.queue.Size());
    if (stats[kDelivered] != items || stats[kLost] != 0 || stats[kPhantom] != 0 ||
        stats[kCorrupted] != 0 || stats[kRefused] != 0 || left != 0) {
      run.exactly_once = false;
      run.why = absl::StrCat("repeat ", rep, ": delivered ", stats[kDelivered], " of ", items,
                             ", lost ", stats[kLost], ", phantom ", stats[kPhantom], ", corrupted ",
                             stats[kCorrupted], ", refused pushes ", stats[kRefused],
                             ", left in queue ", left);
    }
    if (rep >= kWarmup) {
      pop_ms.push_back(pop);
      fill_ms.push_back(fill);
    }
  }
  run.pop = Summarize(pop_ms);
  run.fill = Summarize(fill_ms);
  return run;
}

// Contended read-modify-writes per item: a successful claim costs 3 (items,
// head, free_slots) after one plain load of `items`; a claim that finds the
// queue empty costs the load only. Rare over-claims add one give-back each
// (not counted).
double AtomicsPerItem(PopKind kind, std::uint64_t items) {
  return 3.0 * std::ceil(static_cast<double>(items) / Batch(kind)) / static_cast<double>(items);
}

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(std::atoi(text.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
  }
  return out;
}

absl::Status Run(Report& report) {
  const int log2_items = absl::GetFlag(FLAGS_log2_items);
  const int log2_single = absl::GetFlag(FLAGS_log2_single_items);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const std::vector<int> static_sizes = ParseList(absl::GetFlag(FLAGS_static_log2_items));
  if (log2_items < 10 || log2_items > 30 || log2_single < 10 || log2_single > log2_items ||
      repeats < 1) {
    return absl::InvalidArgumentError(
        "--log2_items must be in [10, 30], --log2_single_items in [10, log2_items], --repeats >= "
        "1");
  }
  for (int s : static_sizes) {
    if (s < 10 || s > log2_items) {
      return absl::InvalidArgumentError("--static_log2_items entries must be in [10, log2_items]");
    }
  }
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  Context ctx;
  BATON_ASSIGN_OR_RETURN(ctx.device, QueryDevice());
  report.SetDevice(ctx.device);
  BATON_ASSIGN_OR_RETURN(ctx.stream, CreateStream(cudaStreamNonBlocking));
  BATON_ASSIGN_OR_RETURN(ctx.start, CreateEvent());
  BATON_ASSIGN_OR_RETURN(ctx.stop, CreateEvent());
  const std::uint64_t items = std::uint64_t{1} << log2_items;
  WorkQueueOptions options;
  options.capacity = items;
  options.max_batch = 4096;
  BATON_ASSIGN_OR_RETURN(ctx.queue, WorkQueue::Create(options));
  BATON_ASSIGN_OR_RETURN(ctx.marks, DeviceBuffer<unsigned char>::Create(items));
  BATON_ASSIGN_OR_RETURN(ctx.stats, DeviceBuffer<unsigned long long>::Create(kSampleStats));
  ctx.full_blocks = 8 * ctx.device.multiprocessors;
  for (PopKind kind : kAllKinds) {
    int per_sm = 0;
    BATON_CUDA_RETURN_IF_ERROR(ConsumeBlocksPerSm(kind, &per_sm));
    if (per_sm < 8) {
      report.Fail(absl::StrCat(Name(kind), ": only ", per_sm,
                               " blocks of 256 per SM are resident; full contention needs 8"));
    }
  }

  BATON_ASSIGN_OR_RETURN(const HbmBandwidth hbm, MeasureHbmBandwidth(ctx.stream.get()));
  const double copy_gbps = hbm.copy_bytes_per_s / 1e9;
  constexpr double kBytesPerPop = 16 + 8 + 8 + 1;
  report.SetParam("items", static_cast<std::int64_t>(items));
  report.SetParam("single_items", static_cast<std::int64_t>(std::uint64_t{1} << log2_single));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));
  report.SetParam("full grid blocks (8x256 per SM)", static_cast<std::int64_t>(ctx.full_blocks));
  report.SetParam("D2D copy GB/s (read+write)", copy_gbps);
  report.SetParam("bytes per pop (descriptor+seq read+seq write+mark)", kBytesPerPop);
  report.SetParam("pop floor from copy bandwidth (pops/s)", copy_gbps * 1e9 / kBytesPerPop);

  // Part 1: pop throughput.
  double best_pops = 0;
  std::string best_row;
  double best_push = 0;
  for (const int blocks : {ctx.full_blocks, ctx.device.multiprocessors}) {
    for (const Cost cost : {Cost::kNone, Cost::kLight, Cost::kUneven}) {
      for (PopKind kind : kAllKinds) {
        const std::uint64_t n = kind == PopKind::kSingle ? std::uint64_t{1} << log2_single : items;
        BATON_ASSIGN_OR_RETURN(const PopRun run,
                               RunPops(ctx, kind, blocks, cost, n, nullptr, repeats));
        const double pops = n / (run.pop.median_ms * 1e-3);
        const double pushes = n / (run.fill.median_ms * 1e-3);
        if (!run.exactly_once) report.Fail(absl::StrCat(Name(kind), ": ", run.why));
        const std::string grid = blocks == ctx.full_blocks ? "8x256/SM" : "1x256/SM";
        if (run.exactly_once && cost == Cost::kNone && blocks == ctx.full_blocks &&
            pops > best_pops) {
          best_pops = pops;
          best_row = Name(kind);
        }
        best_push = std::max(best_push, pushes);
        report.AddRow()
            .Set("part", std::string("pop"))
            .Set("pop", std::string(Name(kind)))
            .Set("grid", grid)
            .Set("cost", std::string(Name(cost)))
            .Set("items", static_cast<std::int64_t>(n))
            .Set("ms (median)", run.pop.median_ms)
            .Set("min", run.pop.min_ms)
            .Set("max", run.pop.max_ms)
            .Set("Gpops/s", pops / 1e9)
            .Set("atomics/item", AtomicsPerItem(kind, n))
            .Set("GB/s moved", pops * kBytesPerPop / 1e9)
            .Set("fill Gpush/s", pushes / 1e9)
            .Set("exactly once", run.exactly_once);
      }
    }
  }
  report.SetParam("best batched pop rate (Gpops/s, no work, full grid)", best_pops / 1e9);
  report.SetParam("best batched pop kind", best_row);
  report.SetParam("target 5e10 pops/s met", best_pops >= kTargetPopsPerSecond);
  report.SetParam("best warp-aggregated push rate (Gpush/s, full grid)", best_push / 1e9);

  // Part 2: static vs dynamic on uneven work.
  for (const int log2_n : static_sizes) {
    const std::uint64_t n = std::uint64_t{1} << log2_n;
    BATON_ASSIGN_OR_RETURN(auto reference, DeviceBuffer<float>::Create(n));
    BATON_ASSIGN_OR_RETURN(auto out, DeviceBuffer<float>::Create(n));
    std::vector<float> want(n), got(n);
    for (const Cost cost : {Cost::kUneven, Cost::kClustered}) {
      struct Mode {
        std::string name;
        std::string grid;
        std::function<absl::StatusOr<PopRun>()> run;
      };
      auto timed = [&](const std::function<cudaError_t()>& enqueue) -> absl::StatusOr<PopRun> {
        BATON_RETURN_IF_ERROR(out.Fill(0xff, ctx.stream.get()));  // NaN poison
        BATON_ASSIGN_OR_RETURN(
            TimingSummary t,
            TimeWithEvents(ctx.stream.get(), kWarmup, repeats, [&]() -> absl::Status {
              BATON_CUDA_RETURN_IF_ERROR(enqueue());
              return absl::OkStatus();
            }));
        PopRun run;
        run.pop = t;
        return run;
      };
      const int sms = ctx.device.multiprocessors;
      std::vector<Mode> modes = {
          {"static: 1 thread/item", "n/256 blocks",
           [&] {
             return timed(
                 [&] { return EnqueueStaticOnePerItem(cost, n, out.data(), ctx.stream.get()); });
           }},
          {"static: chunk/warp", "8x256/SM",
           [&] {
             return timed([&] {
               return EnqueueStaticChunked(cost, n, out.data(), ctx.full_blocks, ctx.stream.get());
             });
           }},
          {"static: chunk/warp", "1x256/SM",
           [&] {
             return timed(
                 [&] { return EnqueueStaticChunked(cost, n, out.data(), sms, ctx.stream.get()); });
           }},
          {"queue: warp pop x32", "8x256/SM",
           [&] {
             return RunPops(ctx, PopKind::kWarp32, ctx.full_blocks, cost, n, out.data(), repeats);
           }},
          {"queue: warp pop x32", "1x256/SM",
           [&] { return RunPops(ctx, PopKind::kWarp32, sms, cost, n, out.data(), repeats); }},
          {"queue: block pop x2048", "8x256/SM",
           [&] {
             return RunPops(ctx, PopKind::kBlock2048, ctx.full_blocks, cost, n, out.data(),
                            repeats);
           }},
      };
      double static_ms = 0;
      for (std::size_t m = 0; m < modes.size(); ++m) {
        BATON_RETURN_IF_ERROR(out.Fill(0xff, ctx.stream.get()));
        BATON_ASSIGN_OR_RETURN(const PopRun run, modes[m].run());
        BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream.get()));
        BATON_RETURN_IF_ERROR(out.CopyTo(absl::MakeSpan(got)));
        bool same = true;
        if (m == 0) {
          want = got;
          static_ms = run.pop.median_ms;
        } else {
          same = std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0;
        }
        if (!same)
          report.Fail(absl::StrCat(modes[m].name, " (", Name(cost), ", n=", n,
                                   "): results differ from one thread per item"));
        if (!run.exactly_once) report.Fail(absl::StrCat(modes[m].name, ": ", run.why));
        Row& row = report.AddRow()
                       .Set("part", std::string("static vs dynamic"))
                       .Set("pop", modes[m].name)
                       .Set("grid", modes[m].grid)
                       .Set("cost", std::string(Name(cost)))
                       .Set("items", static_cast<std::int64_t>(n))
                       .Set("ms (median)", run.pop.median_ms)
                       .Set("min", run.pop.min_ms)
                       .Set("max", run.pop.max_ms)
                       .Set("vs 1 thread/item", static_ms / run.pop.median_ms);
        if (run.fill.samples_ms.empty()) {
          row.Set("fill ms (not timed)", std::string("-"));
        } else {
          row.Set("fill ms (not timed)", run.fill.median_ms);
        }
        row.Set("exactly once", run.exactly_once && same);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "queue_contention",
      "Pop throughput of the device work queue (per-thread, warp- and block-batched pops, every "
      "run checked exactly-once) and static vs queue scheduling of uneven work. Needs an "
      "H100/H200.",
      baton::samples::Run);
}
