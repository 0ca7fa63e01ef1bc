// tensor_parallel: one model over the GPUs of this host (issue #42;
// baton/decoder_model.h, TensorParallelOptions), at every size of --tp the
// host has GPUs for, beside its floor.
//
// Per size: a PeerGroup of GPUs 0..n-1, one DecoderModel per rank (its share
// of the weights: synthetic presets draw only their slices, so a 70B shape
// needs no 141 GB file), and one host loop that decides every step and
// launches it on every rank (decode_loop/host_loop.h, CreateRanks).
//  - Tokens: --parity_requests greedy requests run to the end at every size;
//    each size's tokens are compared with the first size's (TP1 when listed).
//    They need not be identical: a rank's partial sums are rounded to the
//    model's dtype before the all-reduce adds them, as vLLM and TensorRT-LLM
//    do (tests/model/decoder_tp_gpu_test.cc checks them against the CPU
//    reference under the near-tie rule, and that every rank's bits agree).
//  - Time per decode step: --steps steps of --batches sequences at
//    --context tokens each, replayed as captured graphs with no decision
//    (HostLoop::EnqueueScheduleReplay: a lower bound on any driver of the
//    same steps); the slowest rank's median over --repeats.
//  - The device-decided loop ("baton-lockstep"; --nolockstep leaves it out):
//    each rank's Runtime on its GPU, their device schedulers in lockstep
//    (common/ranks.h, baton/lockstep_group.h; TP1: one Runtime), tail-launch engine, running the
//    batch's requests (prompts of --context tokens read in chunks, then decoding): µs per step over
//    --steps decode steps, from rank 0's step counter and the host clock,
//    once every prompt has been read.
//  - Floor: (a rank's weight bytes + its KV bytes read) / the measured HBM
//    read bandwidth + 2 x layers x the latency of Baton's all-reduce of one
//    step's rows (measured here, 64 calls in a graph, like samples/all_reduce).
// No NCCL: the ranks exchange over peer memory (never NVLink
// multicast). Sizes above the visible GPUs are skipped with a note.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"
#include "baton/device.h"
#include "baton/peer_group.h"
#include "baton/runtime.h"
#include "baton/server.h"
#include "baton/status.h"
#include "baton/step_graph.h"
#include "common/bandwidth.h"
#include "common/init.h"
#include "common/ranks.h"
#include "common/report.h"
#include "common/timing.h"
#include "decode_loop/host_loop.h"

ABSL_FLAG(std::string, model, "small",
          "synthetic preset: tiny, small, llama-3.2-1b, llama-3.1-8b or llama-3.1-70b (shapes)");
ABSL_FLAG(std::string, checkpoint, "", "a Hugging Face checkpoint instead of --model");
ABSL_FLAG(std::string, tp, "1,2,4", "tensor-parallel sizes (above the visible GPUs: skipped)");
ABSL_FLAG(std::string, batches, "1,8", "decode batches timed");
ABSL_FLAG(int, context, 576, "tokens before each timed decode step");
ABSL_FLAG(int, steps, 64, "decode steps per timed replay");
ABSL_FLAG(int, repeats, 5, "timed replays (the median is reported)");
ABSL_FLAG(int, parity_requests, 4, "greedy requests whose tokens are compared across sizes");
ABSL_FLAG(int, parity_tokens, 32, "new tokens of each parity request");
ABSL_FLAG(std::string, gemm, "auto", "projections: auto (DecoderGemm::kAuto) or gemv (kBatonGemv)");
ABSL_FLAG(int, staging_mib, 64, "PeerGroupOptions::max_bytes, in MiB");
ABSL_FLAG(bool, lockstep, true,
          "time the device-decided loop too: each rank's Runtime, their schedulers in lockstep "
          "(driver baton-lockstep)");
ABSL_FLAG(int, as_rank_of, 1,
          "N > 1: run one rank's share of the preset (heads, key/value heads, FFN width and "
          "vocabulary divided by N) as a whole model on one GPU, at --tp=1: the rank's kernels "
          "without the exchanges");

namespace baton::samples {
namespace {

// Llama shapes (bf16); tiny and small as decode_loop's.
absl::StatusOr<DecoderConfig> Preset(const std::string& name) {
  DecoderConfig c;
  c.dtype = DecoderDType::kBFloat16;
  c.vocab = 128256;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.rope.theta = 500000.0f;
  if (name == "tiny") {
    c.layers = 2, c.d_model = 256, c.heads = 8, c.kv_heads = 4, c.head_dim = 32, c.ffn = 768;
    c.vocab = 4096;
  } else if (name == "small") {
    c.layers = 4, c.d_model = 1024, c.heads = 16, c.kv_heads = 4, c.head_dim = 64, c.ffn = 2816;
    c.vocab = 32000;
  } else if (name == "llama-3.2-1b") {
    c.layers = 16, c.d_model = 2048, c.heads = 32, c.head_dim = 64, c.ffn = 8192;
  } else if (name == "llama-3.1-8b") {
    c.layers = 32, c.d_model = 4096, c.heads = 32, c.ffn = 14336;
  } else if (name == "llama-3.1-70b") {
    c.layers = 80, c.d_model = 8192, c.heads = 64, c.ffn = 28672;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: unknown preset '", name,
        "'; use tiny, small, llama-3.2-1b, llama-3.1-8b or llama-3.1-70b (or --checkpoint)"));
  }
  return c;
}

// One size's model: its ranks (common/ranks.h), their programs, a host
// loop over them.
struct Ranks {
  ModelRanks model;
  std::vector<StepProgram> programs;
  std::unique_ptr<HostLoop> loop;
};

absl::StatusOr<Ranks> Load(const DecoderModelOptions& options, int size) {
  Ranks ranks;
  BATON_ASSIGN_OR_RETURN(
      ranks.model,
      LoadRanks(options, size, static_cast<std::size_t>(absl::GetFlag(FLAGS_staging_mib)) << 20));
  ranks.programs = ranks.model.Programs();
  BATON_ASSIGN_OR_RETURN(ranks.loop, HostLoop::CreateRanks(ranks.programs, ranks.model.devices));
  return ranks;
}

// The latency of Baton's all-reduce of `bytes` bytes: 64 calls in each
// rank's graph, the slowest rank's time per call (median of 5).
absl::StatusOr<double> AllReduceMicros(const PeerGroup& group, std::size_t bytes) {
  constexpr int kCalls = 64;
  struct Rank {
    Stream stream;
    DeviceBuffer<std::uint16_t> data;
    GraphExec graph;
    Event start, stop;
  };
  std::vector<Rank> ranks(group.ranks());
  for (int r = 0; r < group.ranks(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(group.device(r)));
    BATON_ASSIGN_OR_RETURN(ranks[r].stream, CreateStream());
    BATON_ASSIGN_OR_RETURN(ranks[r].data, DeviceBuffer<std::uint16_t>::Create(bytes / 2));
    BATON_RETURN_IF_ERROR(ranks[r].data.Fill(0));
    BATON_ASSIGN_OR_RETURN(ranks[r].start, CreateEvent());
    BATON_ASSIGN_OR_RETURN(ranks[r].stop, CreateEvent());
    BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(ranks[r].stream.get(), [&](cudaStream_t s) {
                             for (int k = 0; k < kCalls; ++k) {
                               BATON_RETURN_IF_ERROR(group.AllReduce(
                                   r, ranks[r].data.data(), ranks[r].data.data(), bytes / 2,
                                   DecoderDType::kBFloat16, s));
                             }
                             return absl::OkStatus();
                           }));
    BATON_ASSIGN_OR_RETURN(ranks[r].graph, InstantiateGraph(graph.get()));
  }
  std::vector<double> per_call;
  for (int rep = -2; rep < 5; ++rep) {
    for (int r = 0; r < group.ranks(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(group.device(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks[r].start.get(), ranks[r].stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(ranks[r].graph.get(), ranks[r].stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks[r].stop.get(), ranks[r].stream.get()));
    }
    double slowest = 0.0;
    for (int r = 0; r < group.ranks(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(group.device(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ranks[r].stop.get()));
      float ms = 0.0f;
      BATON_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&ms, ranks[r].start.get(), ranks[r].stop.get()));
      slowest = std::max(slowest, static_cast<double>(ms));
    }
    if (rep >= 0) per_call.push_back(slowest * 1e3 / kCalls);
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(group.device(0)));
  BATON_RETURN_IF_ERROR(group.CheckFaults());
  return Median(per_call);
}

// The replay's time per step: the slowest rank's, median of `repeats`.
absl::StatusOr<double> ReplayMicros(Ranks& ranks, int steps, int repeats) {
  HostLoop& loop = *ranks.loop;
  std::vector<Event> start(loop.ranks()), stop(loop.ranks());
  for (int r = 0; r < loop.ranks(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop.device(r)));
    BATON_ASSIGN_OR_RETURN(start[r], CreateEvent());
    BATON_ASSIGN_OR_RETURN(stop[r], CreateEvent());
  }
  std::vector<double> per_step;
  for (int rep = -1; rep < repeats; ++rep) {
    for (int r = 0; r < loop.ranks(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop.device(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(start[r].get(), loop.stream(r)));
    }
    BATON_RETURN_IF_ERROR(loop.EnqueueScheduleReplay());
    double slowest = 0.0;
    for (int r = 0; r < loop.ranks(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop.device(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop[r].get(), loop.stream(r)));
    }
    for (int r = 0; r < loop.ranks(); ++r) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop.device(r)));
      BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop[r].get()));
      float ms = 0.0f;
      BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start[r].get(), stop[r].get()));
      slowest = std::max(slowest, static_cast<double>(ms));
    }
    if (rep >= 0) per_step.push_back(slowest * 1e3 / steps);
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop.device(0)));
  return Median(per_step);
}

// The device-decided loop's time per decode step (see the header): `batch`
// requests of `context` prompt tokens on every rank's Runtime, rank 0's
// scheduler deciding; timed between rank 0's step counts once the prompts
// are read and `steps` decode steps later; then aborted.
absl::StatusOr<double> LockstepMicros(Ranks& ranks, const DecoderModelOptions& options,
                                      std::uint32_t batch, int context, int steps) {
  const DecoderConfig& c = ranks.model.lead().config();
  // Prompt steps at most: every prompt's rows through the step budget (the
  // requests' limits leave more than these and `steps` to decode: Run sizes
  // max_context so).
  const std::uint64_t prompt_steps =
      (std::uint64_t{batch} * context + options.max_tokens_per_step - 1) /
          options.max_tokens_per_step +
      2;
  std::vector<DecodeRequest> requests(batch);
  for (std::uint32_t i = 0; i < batch; ++i) {
    for (int t = 0; t < context; ++t)
      requests[i].prompt.push_back((i * 7919 + t * 104729) % c.vocab);
    requests[i].max_new_tokens = options.max_context - static_cast<std::uint32_t>(context) - 1;
  }
  BATON_RETURN_IF_ERROR(ranks.model.WriteRequests(requests));
  BATON_ASSIGN_OR_RETURN(RankRuntimes runtimes,
                         RankRuntimes::Create(ranks.model, RuntimeOptions{}, Engine::kTailLaunch));
  BATON_RETURN_IF_ERROR(runtimes.Start());
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < batch; ++i) items.push_back(ranks.model.lead().WorkItemFor(i));
  Runtime& lead = runtimes.lead();
  BATON_RETURN_IF_ERROR(lead.Submit(items));
  // Rank 0's step count and the time it was read at, once it reaches `at`.
  std::vector<Completion> done(batch);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto reach = [&](std::uint64_t at) -> absl::StatusOr<std::pair<std::uint64_t, double>> {
    for (;;) {
      BATON_ASSIGN_OR_RETURN(const std::size_t n, lead.Poll(absl::MakeSpan(done)));
      if (n != 0) return absl::InternalError("a request finished inside the timed window");
      const std::uint64_t now_steps = lead.stats().steps;
      const auto now = std::chrono::steady_clock::now();
      if (now_steps >= at) {
        return std::make_pair(
            now_steps, std::chrono::duration<double, std::micro>(now.time_since_epoch()).count());
      }
      if (now > deadline) return absl::DeadlineExceededError("the lockstep run stalled");
    }
  };
  BATON_ASSIGN_OR_RETURN(const auto first, reach(prompt_steps + 4));
  BATON_ASSIGN_OR_RETURN(const auto last, reach(first.first + steps));
  BATON_RETURN_IF_ERROR(runtimes.Stop(/*abort=*/true).status());
  BATON_RETURN_IF_ERROR(ranks.model.CheckFaults());
  return (last.second - first.second) / static_cast<double>(last.first - first.first);
}

absl::Status Run(Report& report) {
  BATON_ASSIGN_OR_RETURN(const std::vector<std::uint32_t> sizes,
                         ParsePositiveList(absl::GetFlag(FLAGS_tp), "tp"));
  BATON_ASSIGN_OR_RETURN(const std::vector<std::uint32_t> batches,
                         ParsePositiveList(absl::GetFlag(FLAGS_batches), "batches"));
  const int context = absl::GetFlag(FLAGS_context), steps = absl::GetFlag(FLAGS_steps);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int parity_requests = absl::GetFlag(FLAGS_parity_requests);
  const int parity_tokens = absl::GetFlag(FLAGS_parity_tokens);
  if (context < 1 || steps < 1 || repeats < 1 || parity_requests < 0 || parity_tokens < 1) {
    return absl::InvalidArgumentError(
        "--context, --steps, --repeats and --parity_tokens must be >= 1, --parity_requests >= 0");
  }
  int gpus = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&gpus));
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice(0));
  report.SetDevice(device);
  report.SetParam("gpus", static_cast<std::int64_t>(gpus));
  report.SetParam("context", static_cast<std::int64_t>(context));
  report.SetParam("steps", static_cast<std::int64_t>(steps));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));

  DecoderModelOptions options;
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  std::string model_name = options.checkpoint;
  if (options.checkpoint.empty()) {
    model_name = absl::GetFlag(FLAGS_model);
    BATON_ASSIGN_OR_RETURN(options.config, Preset(model_name));
    if (const int n = absl::GetFlag(FLAGS_as_rank_of); n > 1) {
      DecoderConfig& c = options.config;
      if (c.heads % n != 0 || c.key_value_heads() % n != 0 || c.ffn % n != 0 || c.vocab % n != 0) {
        return absl::InvalidArgumentError(absl::StrCat("--as_rank_of=", n, " does not divide ",
                                                       model_name, "'s heads, FFN or vocabulary"));
      }
      c.kv_heads = c.key_value_heads() / n;
      c.heads /= n, c.ffn /= n, c.vocab /= n;
      model_name = absl::StrCat(model_name, " (one rank of ", n, ")");
    }
  }
  const std::uint32_t max_batch = *std::max_element(batches.begin(), batches.end());
  // The lockstep driver's requests decode past their prompt steps, then
  // --steps timed steps (LockstepMicros), with room to spare.
  const int prompt_steps = static_cast<int>((std::uint64_t{max_batch} * context + 255) / 256 + 8);
  const int max_context = std::max(context + steps + prompt_steps, 16 + parity_tokens) + 64;
  options.config.max_context = max_context;
  options.max_context = static_cast<std::uint32_t>(max_context);
  options.max_batch = std::max<std::uint32_t>(max_batch, parity_requests);
  options.max_tokens_per_step = std::max<std::uint32_t>(options.max_batch, 256);
  options.max_tokens_without_decodes = 0;
  options.max_requests = std::max<std::uint32_t>(std::max(parity_requests, 2), max_batch);
  options.max_logprobs = 0;
  options.gemm = absl::GetFlag(FLAGS_gemm) == "gemv" ? DecoderGemm::kBatonGemv : DecoderGemm::kAuto;
  report.SetParam("model", model_name);

  Stream stream;
  BATON_ASSIGN_OR_RETURN(stream, CreateStream());
  BATON_ASSIGN_OR_RETURN(const HbmBandwidth hbm, MeasureHbmBandwidth(stream.get()));
  report.SetParam("hbm_read_gbs", hbm.read_bytes_per_s / 1e9);

  std::vector<std::vector<std::int32_t>> first_tokens;  // the first size's, by request
  std::uint32_t first_size = 0;
  for (const std::uint32_t size : sizes) {
    if (static_cast<int>(size) > gpus) {
      std::printf("TP%u: skipped, %d GPU(s) visible\n", size, gpus);
      continue;
    }
    BATON_ASSIGN_OR_RETURN(Ranks ranks, Load(options, static_cast<int>(size)));
    const DecoderConfig& c = ranks.model.lead().config();

    // Tokens: greedy requests run to the end in lockstep.
    std::vector<DecodeRequest> requests(parity_requests);
    for (int i = 0; i < parity_requests; ++i) {
      for (int t = 0; t < 16; ++t) requests[i].prompt.push_back((i * 7919 + t * 104729) % c.vocab);
      requests[i].max_new_tokens = static_cast<std::uint32_t>(parity_tokens);
    }
    int identical = 0, first_divergence = -1;
    if (parity_requests > 0) {
      BATON_RETURN_IF_ERROR(ranks.model.WriteRequests(requests));
      std::vector<WorkItem> items;
      for (int i = 0; i < parity_requests; ++i) items.push_back(ranks.model.lead().WorkItemFor(i));
      std::vector<Completion> completions;
      BATON_RETURN_IF_ERROR(ranks.loop->Run(items, 0, completions));
      BATON_RETURN_IF_ERROR(ranks.model.CheckFaults());
      std::vector<std::vector<std::int32_t>> tokens;
      for (int i = 0; i < parity_requests; ++i) {
        BATON_ASSIGN_OR_RETURN(std::vector<std::int32_t> t,
                               ranks.model.lead().ReadGenerated(i, parity_tokens));
        tokens.push_back(std::move(t));
      }
      if (first_tokens.empty()) {
        first_tokens = tokens;
        first_size = size;
      }
      for (int i = 0; i < parity_requests; ++i) {
        if (tokens[i] == first_tokens[i]) {
          ++identical;
          continue;
        }
        for (int k = 0; k < parity_tokens; ++k) {
          if (tokens[i][k] != first_tokens[i][k]) {
            first_divergence = first_divergence < 0 ? k : std::min(first_divergence, k);
            break;
          }
        }
      }
    }

    // Time per decode step, and its floor.
    std::vector<DecodeRequest> replay(2);
    replay[0].prompt = {0};
    replay[0].max_new_tokens = static_cast<std::uint32_t>(max_context - 1);
    replay[1] = replay[0];
    for (const std::uint32_t batch : batches) {
      BATON_RETURN_IF_ERROR(ranks.model.WriteRequests(replay));
      ScheduleRun run;
      run.batch = batch;
      run.rows = batch;
      run.steps = static_cast<std::uint32_t>(steps);
      run.item_tokens = static_cast<std::uint32_t>(context);
      BATON_RETURN_IF_ERROR(ranks.loop->PrepareScheduleReplay(ranks.programs, {run},
                                                              ranks.model.lead().WorkItemFor(0),
                                                              ranks.model.lead().WorkItemFor(1)));
      BATON_ASSIGN_OR_RETURN(const double us, ReplayMicros(ranks, steps, repeats));
      BATON_RETURN_IF_ERROR(ranks.model.CheckFaults());
      double allreduce_us = 0.0;
      if (ranks.model.peers != nullptr) {
        BATON_ASSIGN_OR_RETURN(
            allreduce_us, AllReduceMicros(*ranks.model.peers, std::size_t{batch} * c.d_model * 2));
      }
      std::size_t weights = 0;
      for (const auto& m : ranks.model.models) weights = std::max(weights, m->weight_bytes());
      const double kv_bytes = 2.0 * c.layers * batch * (context + steps / 2.0) *
                              (c.kv_width() / static_cast<double>(size)) * 2.0;
      const double floor_us =
          (weights + kv_bytes) / hbm.read_bytes_per_s * 1e6 + 2.0 * c.layers * allreduce_us;
      // A driver's row: the shape, its time and the floor.
      const auto row = [&](const char* driver, double step_us) -> Row& {
        return report.AddRow()
            .Set("model", model_name)
            .Set("tp", static_cast<std::int64_t>(size))
            .Set("batch", static_cast<std::int64_t>(batch))
            .Set("context", static_cast<std::int64_t>(context))
            .Set("driver", driver)
            .Set("us_per_step", step_us)
            .Set("floor_us", floor_us)
            .Set("allreduce_us", allreduce_us)
            .Set("vs_floor", step_us / floor_us);
      };
      row("baton-graphs", us)
          .Set("weight_gb_per_gpu", weights / 1e9)
          .Set("parity_identical", static_cast<std::int64_t>(identical))
          .Set("parity_of", static_cast<std::int64_t>(parity_requests))
          .Set("parity_vs_tp", static_cast<std::int64_t>(first_size))
          .Set("first_divergence", static_cast<std::int64_t>(first_divergence));
      if (!absl::GetFlag(FLAGS_lockstep)) continue;
      BATON_ASSIGN_OR_RETURN(const double lockstep_us,
                             LockstepMicros(ranks, options, batch, context, steps));
      row("baton-lockstep", lockstep_us).Set("vs_graphs", lockstep_us / us);
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "tensor_parallel",
      "tensor_parallel: one model over the GPUs of this host (--tp sizes), beside its floor",
      baton::samples::Run);
}
