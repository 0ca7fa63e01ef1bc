#include "decode_loop/host_loop.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "baton/host_batch.h"
#include "baton/status.h"
#include "baton/step_graph.h"

namespace baton::samples {
namespace {

// Lays the StepArgs arrays out back to back from `base`.
StepArgs LayOut(unsigned char* base, std::uint32_t max_batch, std::uint32_t max_tokens,
                std::size_t& up_bytes, std::size_t& down_offset, std::size_t& down_bytes) {
  StepArgs args;
  args.max_batch = max_batch;
  args.max_tokens = max_tokens;
  std::size_t at = 0;
  args.header = reinterpret_cast<StepHeader*>(base + at);
  at += 64;
  args.items = reinterpret_cast<WorkItem*>(base + at);
  at += sizeof(WorkItem) * max_batch;
  PointStepWords(args, reinterpret_cast<std::uint32_t*>(base + at));
  at += sizeof(std::uint32_t) * kStepWords * max_batch;
  // Only finished and results (the last two arrays) come back.
  down_offset = reinterpret_cast<unsigned char*>(args.finished) - base;
  down_bytes = at - down_offset;
  // Padded so that the schedule replay's back-to-back copies keep every
  // WorkItem (alignas(16)) aligned.
  up_bytes = (at + 63) / 64 * 64;
  return args;
}

}  // namespace

std::vector<ScheduleRun> ScheduleRuns(std::uint32_t count, std::uint32_t prompt,
                                      std::uint32_t new_tokens, std::uint32_t max_batch,
                                      const TokenPolicy& policy) {
  std::vector<ScheduleRun> runs;
  std::vector<double> ran_sums;  // per decode run: the tokens before each position's step
  HostBatch b(max_batch);
  const StepArgs& a = b.args();
  std::uint32_t next = 0;
  const WorkItem item = WorkItem::make(0, 0, prompt);
  for (;;) {
    for (; b.CanAdmit() && next < count; ++next) b.Admit(item);
    const std::uint32_t batch = b.batch();
    if (batch == 0) break;
    const std::uint32_t rows = b.PlanTokens(policy);
    bool decoding = rows == batch;
    for (std::uint32_t p = 0; p < batch && decoding; ++p) decoding = a.tokens[p] == 1;
    // A decode run ends at a replay graph's steps, so that its mean context
    // stays within a few tokens of every step's (attention's cost steps
    // with its tiles of keys).
    const bool extends = decoding && !runs.empty() && runs.back().chunks.empty() &&
                         runs.back().batch == batch &&
                         runs.back().steps < HostLoop::kReplayStepsPerGraph;
    if (!extends) {
      ScheduleRun run;
      run.batch = batch;
      run.rows = rows;
      if (!decoding) {
        for (std::uint32_t p = 0; p < batch; ++p) {
          run.chunks.push_back({a.item_tokens[p], a.tokens[p], a.item_tokens[p] < prompt});
        }
      }
      runs.push_back(std::move(run));
      ran_sums.push_back(0);
    }
    ++runs.back().steps;
    for (std::uint32_t p = 0; p < batch; ++p) {
      ran_sums.back() += a.item_tokens[p];
      // The step produces token index ran + tokens; the request ends with
      // its last new token (no stop tokens).
      const std::uint32_t produced = a.item_tokens[p] + a.tokens[p];
      a.finished[p] = a.tokens[p] > 0 && produced >= prompt && produced + 1 - prompt >= new_tokens;
    }
    b.Retire([](std::uint32_t) {});
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const double positions = static_cast<double>(runs[r].batch) * runs[r].steps;
    runs[r].item_tokens = static_cast<std::uint32_t>(ran_sums[r] / positions + 0.5);
  }
  return runs;
}

std::uint64_t ScheduleSteps(absl::Span<const ScheduleRun> runs) {
  std::uint64_t steps = 0;
  for (const ScheduleRun& run : runs) steps += run.steps;
  return steps;
}

absl::StatusOr<std::unique_ptr<HostLoop>> HostLoop::Create(const StepProgram& program) {
  int device = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return CreateRanks({program}, {device});
}

absl::StatusOr<std::unique_ptr<HostLoop>> HostLoop::CreateRanks(
    const std::vector<StepProgram>& programs, const std::vector<int>& devices) {
  if (programs.empty() || programs.size() != devices.size()) {
    return absl::InvalidArgumentError("HostLoop: give one device per program (rank)");
  }
  const StepProgram& program = programs[0];
  std::unique_ptr<HostLoop> loop(new HostLoop());
  loop->max_batch_ = program.max_batch;
  loop->policy_ = program.tokens;
  const std::uint32_t max_tokens = StepRowsLimit(program.tokens, program.max_batch);
  for (const StepProgram& p : programs) {
    if (p.max_batch == 0 || p.buckets.empty() || p.buckets.back() < max_tokens ||
        p.max_batch != program.max_batch || p.buckets != program.buckets) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "HostLoop: every rank's program needs the same max_batch and buckets, the largest of "
          "at least %u rows",
          max_tokens));
    }
  }
  loop->buckets_ = program.buckets;
  std::size_t up = 0, down_offset = 0, down = 0;
  LayOut(nullptr, loop->max_batch_, max_tokens, up, down_offset, down);
  BATON_ASSIGN_OR_RETURN(loop->host_, MappedHostBuffer<unsigned char>::Create(up));
  std::memset(loop->host_.host(), 0, up);
  loop->host_args_ =
      LayOut(loop->host_.host(), loop->max_batch_, max_tokens, loop->up_bytes_,
             loop->down_offset_, loop->down_bytes_);
  loop->ranks_.resize(programs.size());
  for (std::size_t r = 0; r < programs.size(); ++r) {
    Rank& rank = loop->ranks_[r];
    rank.device = devices[r];
    rank.pages = programs[r].pages;
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    BATON_ASSIGN_OR_RETURN(rank.stream, CreateStream());
    BATON_ASSIGN_OR_RETURN(rank.device_args_bytes, DeviceBuffer<unsigned char>::Create(up));
    rank.device_args = LayOut(rank.device_args_bytes.data(), loop->max_batch_, max_tokens, up,
                              down_offset, down);
  }
  BATON_RETURN_IF_ERROR(loop->Upload(0, 0, 0, 0));
  for (std::size_t r = 0; r < programs.size(); ++r) {
    Rank& rank = loop->ranks_[r];
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    for (std::uint32_t bucket : loop->buckets_) {
      StepContext ctx;
      ctx.bucket_size = bucket;
      ctx.args = rank.device_args;
      BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(rank.stream.get(), [&](cudaStream_t s) {
                               return programs[r].enqueue(ctx, s);
                             }));
      BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), rank.stream.get()));
      rank.graphs.push_back(std::move(exec));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(rank.stream.get()));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(loop->ranks_[0].device));
  return loop;
}

absl::Status HostLoop::Upload(std::uint32_t batch, std::uint32_t rows, std::uint32_t bucket,
                              std::uint64_t step) {
  StepHeader& header = *host_args_.header;
  header.step = step;
  header.batch = batch;
  header.bucket = bucket;
  header.bucket_size = buckets_[bucket];
  header.tokens = rows;
  for (Rank& rank : ranks_) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.device_args_bytes.data(), host_.host(),
                                               up_bytes_, cudaMemcpyHostToDevice,
                                               rank.stream.get()));
  }
  return absl::OkStatus();
}

absl::Status HostLoop::Run(absl::Span<const WorkItem> items, std::uint64_t first_step,
                           std::vector<Completion>& completions,
                           const std::function<void()>& after_step) {
  const StepArgs& a = host_args_;
  HostBatch b(a, ranks_[0].pages);
  std::size_t next = 0;
  std::uint64_t step = first_step;
  std::fill(a.finished, a.finished + max_batch_, 0u);
  for (;;) {
    while (next < items.size() && b.CanAdmit(items[next])) b.Admit(items[next++]);
    const std::uint32_t batch = b.batch();
    if (batch == 0) break;
    const std::uint32_t rows = b.PlanTokens(policy_);
    const int bucket =
        ChooseStepBucket(buckets_.data(), static_cast<std::uint32_t>(buckets_.size()), batch, rows);
    if (bucket < 0) return absl::InternalError("HostLoop: no bucket holds the step");
    // The page table, when this step's plan or the last retirement changed
    // it (the device scheduler writes it in place; here it goes up, to every
    // rank's: each holds its share of every page).
    const bool pages_changed = b.TakePagesChanged();
    BATON_RETURN_IF_ERROR(Upload(batch, rows, static_cast<std::uint32_t>(bucket), step));
    for (Rank& rank : ranks_) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
      if (pages_changed) {
        BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.pages.page_table, b.page_table().data(),
                                                   b.page_table().size() * sizeof(std::uint32_t),
                                                   cudaMemcpyHostToDevice, rank.stream.get()));
      }
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(rank.graphs[bucket].get(), rank.stream.get()));
    }
    Rank& first = ranks_[0];
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(first.device));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_.host() + down_offset_,
                                               first.device_args_bytes.data() + down_offset_,
                                               down_bytes_, cudaMemcpyDeviceToHost,
                                               first.stream.get()));
    for (Rank& rank : ranks_) BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(rank.stream.get()));
    if (after_step) after_step();
    ++step;
    ++steps_;
    b.Retire([&](std::uint32_t p) {
      completions.push_back(Completion{a.items[p].id,
                                       static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                                       a.item_steps[p] + 1, a.results[p]});
    });
  }
  return absl::OkStatus();
}

absl::Status HostLoop::PrepareScheduleReplay(const StepProgram& program,
                                             std::vector<ScheduleRun> runs,
                                             const WorkItem& decoding, const WorkItem& reading) {
  return PrepareScheduleReplay(std::vector<StepProgram>{program}, std::move(runs), decoding,
                               reading);
}

absl::Status HostLoop::PrepareScheduleReplay(const std::vector<StepProgram>& programs,
                                             std::vector<ScheduleRun> runs,
                                             const WorkItem& decoding, const WorkItem& reading) {
  if (runs.empty()) return absl::InvalidArgumentError("HostLoop: an empty schedule to replay");
  if (programs.size() != ranks_.size()) {
    return absl::InvalidArgumentError("HostLoop: give the replay every rank's program");
  }
  // Every run's arguments, laid out as the step reads them, staged once: a
  // replay copies them on the device, so nothing host-side can change under
  // a copy still in flight.
  std::vector<unsigned char> staged(runs.size() * up_bytes_, 0);
  replay_buckets_.clear();
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const ScheduleRun& run = runs[r];
    if (run.batch == 0 || run.batch > max_batch_ || run.steps == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "HostLoop: schedule run %u has batch %u and %u steps; batches must lie in [1, %u]",
          static_cast<std::uint32_t>(r), run.batch, run.steps, max_batch_));
    }
    const int bucket = ChooseStepBucket(
        buckets_.data(), static_cast<std::uint32_t>(buckets_.size()), run.batch, run.rows);
    if (bucket < 0) return absl::InvalidArgumentError("HostLoop: no bucket holds a run's step");
    std::size_t up = 0, down_offset = 0, down = 0;
    const StepArgs a = LayOut(staged.data() + r * up_bytes_, max_batch_,
                              ranks_[0].device_args.max_tokens, up, down_offset, down);
    a.header->step = 0;
    a.header->batch = run.batch;
    a.header->bucket = static_cast<std::uint32_t>(bucket);
    a.header->bucket_size = buckets_[bucket];
    a.header->tokens = run.rows;
    std::uint32_t offset = 0;
    for (std::uint32_t p = 0; p < run.batch; ++p) {
      const bool chunk = !run.chunks.empty();
      const std::uint32_t ran = chunk ? run.chunks[p].ran : run.item_tokens;
      const std::uint32_t tokens = chunk ? run.chunks[p].tokens : 1;
      a.items[p] = chunk && run.chunks[p].reading ? reading : decoding;
      a.slots[p] = p;
      a.item_steps[p] = 0;
      a.item_tokens[p] = ran;
      a.tokens[p] = tokens;
      a.token_offsets[p] = offset;
      offset += tokens;
    }
    replay_buckets_.push_back(static_cast<std::uint32_t>(bucket));
  }
  for (std::size_t k = 0; k < ranks_.size(); ++k) {
    Rank& rank = ranks_[k];
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    // Slot s's pages s * pages_per_slot + j (modulo the pool): the replay
    // times the work, whatever the cache holds.
    if (rank.pages.paged()) {
      std::vector<std::uint32_t> table(std::size_t{max_batch_} * rank.pages.pages_per_slot);
      for (std::size_t i = 0; i < table.size(); ++i) {
        table[i] = static_cast<std::uint32_t>(i % rank.pages.pool_pages);
      }
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(rank.pages.page_table, table.data(),
                                            table.size() * sizeof(std::uint32_t),
                                            cudaMemcpyHostToDevice));
    }
    BATON_ASSIGN_OR_RETURN(rank.replay_args, DeviceBuffer<unsigned char>::Create(staged.size()));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(rank.replay_args.data(), staged.data(), staged.size(),
                                          cudaMemcpyHostToDevice));
    rank.replay_graphs.clear();
    rank.replay_graphs.resize(buckets_.size());
    for (const std::uint32_t bucket : replay_buckets_) {
      if (rank.replay_graphs[bucket]) continue;
      StepContext ctx;
      ctx.bucket_size = buckets_[bucket];
      ctx.args = rank.device_args;
      BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(rank.stream.get(), [&](cudaStream_t s) {
                               for (std::uint32_t i = 0; i < kReplayStepsPerGraph; ++i) {
                                 BATON_RETURN_IF_ERROR(programs[k].enqueue(ctx, s));
                               }
                               return absl::OkStatus();
                             }));
      BATON_ASSIGN_OR_RETURN(rank.replay_graphs[bucket], InstantiateGraph(graph.get()));
      BATON_CUDA_RETURN_IF_ERROR(
          cudaGraphUpload(rank.replay_graphs[bucket].get(), rank.stream.get()));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(rank.stream.get()));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0].device));
  replay_runs_ = std::move(runs);
  return absl::OkStatus();
}

absl::Status HostLoop::EnqueueScheduleReplay() {
  if (replay_runs_.empty()) {
    return absl::FailedPreconditionError("HostLoop: PrepareScheduleReplay first");
  }
  // Run by run, every rank's launches of a run before the next run's: a
  // rank's graphs wait in its stream for the peers' all-reduces, and a host
  // that filled one rank's launch queue first could block on it while the
  // peers had nothing to run.
  for (std::size_t r = 0; r < replay_runs_.size(); ++r) {
    const std::uint32_t bucket = replay_buckets_[r];
    for (Rank& rank : ranks_) {
      BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.device_args_bytes.data(),
                                                 rank.replay_args.data() + r * up_bytes_,
                                                 up_bytes_, cudaMemcpyDeviceToDevice,
                                                 rank.stream.get()));
      std::uint32_t left = replay_runs_[r].steps;
      for (; left >= kReplayStepsPerGraph; left -= kReplayStepsPerGraph) {
        BATON_CUDA_RETURN_IF_ERROR(
            cudaGraphLaunch(rank.replay_graphs[bucket].get(), rank.stream.get()));
      }
      for (; left > 0; --left) {
        BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(rank.graphs[bucket].get(), rank.stream.get()));
      }
    }
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0].device));
  return absl::OkStatus();
}

}  // namespace baton::samples
