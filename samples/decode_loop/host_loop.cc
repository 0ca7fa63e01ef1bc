#include "decode_loop/host_loop.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "baton/bucket_table.h"
#include "baton/status.h"
#include "baton/step_graph.h"

namespace baton::samples {
namespace {

// Lays the StepArgs arrays out back to back from `base`.
StepArgs LayOut(unsigned char* base, std::uint32_t max_batch, std::size_t& up_bytes,
                std::size_t& down_offset, std::size_t& down_bytes) {
  StepArgs args;
  args.max_batch = max_batch;
  std::size_t at = 0;
  args.header = reinterpret_cast<StepHeader*>(base + at);
  at += 64;
  args.items = reinterpret_cast<WorkItem*>(base + at);
  at += sizeof(WorkItem) * max_batch;
  args.slots = reinterpret_cast<std::uint32_t*>(base + at);
  at += 4 * max_batch;
  args.item_steps = reinterpret_cast<std::uint32_t*>(base + at);
  at += 4 * max_batch;
  down_offset = at;
  args.finished = reinterpret_cast<std::uint32_t*>(base + at);
  at += 4 * max_batch;
  args.results = reinterpret_cast<std::uint32_t*>(base + at);
  at += 4 * max_batch;
  up_bytes = at;
  down_bytes = at - down_offset;
  return args;
}

}  // namespace

std::vector<ScheduleRun> ScheduleRuns(absl::Span<const std::uint32_t> lengths,
                                      std::uint32_t max_batch) {
  std::vector<ScheduleRun> runs;
  std::vector<double> item_step_sums;  // per run: the item steps of all its positions
  std::vector<std::uint32_t> active_steps, active_lengths;  // in batch order
  std::size_t next = 0;
  for (;;) {
    while (active_steps.size() < max_batch && next < lengths.size()) {
      active_steps.push_back(0);
      active_lengths.push_back(std::max<std::uint32_t>(lengths[next++], 1));
    }
    if (active_steps.empty()) break;
    const std::uint32_t batch = static_cast<std::uint32_t>(active_steps.size());
    if (runs.empty() || runs.back().batch != batch) {
      runs.push_back(ScheduleRun{batch, 0, 0});
      item_step_sums.push_back(0);
    }
    ++runs.back().steps;
    std::size_t kept = 0;
    for (std::size_t p = 0; p < active_steps.size(); ++p) {
      item_step_sums.back() += active_steps[p];
      if (active_steps[p] + 1 >= active_lengths[p]) continue;  // retires after this step
      active_steps[kept] = active_steps[p] + 1;
      active_lengths[kept] = active_lengths[p];
      ++kept;
    }
    active_steps.resize(kept);
    active_lengths.resize(kept);
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const double positions = static_cast<double>(runs[r].batch) * runs[r].steps;
    runs[r].item_step = static_cast<std::uint32_t>(item_step_sums[r] / positions + 0.5);
  }
  return runs;
}

std::uint64_t ScheduleSteps(absl::Span<const ScheduleRun> runs) {
  std::uint64_t steps = 0;
  for (const ScheduleRun& run : runs) steps += run.steps;
  return steps;
}

absl::StatusOr<std::unique_ptr<HostLoop>> HostLoop::Create(DecoderModel& model,
                                                           std::vector<std::uint32_t> buckets) {
  std::unique_ptr<HostLoop> loop(new HostLoop());
  loop->max_batch_ = model.options().max_batch;
  if (buckets.empty() || buckets.back() != loop->max_batch_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "HostLoop: the largest bucket must equal the model's max_batch %u", loop->max_batch_));
  }
  loop->buckets_ = std::move(buckets);
  BATON_ASSIGN_OR_RETURN(loop->stream_, CreateStream());
  std::size_t up = 0, down_offset = 0, down = 0;
  LayOut(nullptr, loop->max_batch_, up, down_offset, down);
  BATON_ASSIGN_OR_RETURN(loop->device_, DeviceBuffer<unsigned char>::Create(up));
  BATON_ASSIGN_OR_RETURN(loop->host_, MappedHostBuffer<unsigned char>::Create(up));
  std::memset(loop->host_.host(), 0, up);
  loop->device_args_ = LayOut(loop->device_.data(), loop->max_batch_, loop->up_bytes_,
                              loop->down_offset_, loop->down_bytes_);
  loop->host_args_ = LayOut(loop->host_.host(), loop->max_batch_, up, down_offset, down);
  BATON_RETURN_IF_ERROR(loop->Upload(0, 0, 0));
  for (std::uint32_t bucket : loop->buckets_) {
    StepContext ctx;
    ctx.bucket_size = bucket;
    ctx.args = loop->device_args_;
    BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(loop->stream_.get(), [&](cudaStream_t s) {
                             return model.EnqueueStep(ctx, s);
                           }));
    BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), loop->stream_.get()));
    loop->graphs_.push_back(std::move(exec));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(loop->stream_.get()));
  return loop;
}

absl::Status HostLoop::Upload(std::uint32_t batch, std::uint32_t bucket, std::uint64_t step) {
  StepHeader& header = *host_args_.header;
  header.step = step;
  header.batch = batch;
  header.bucket = bucket;
  header.bucket_size = buckets_[bucket];
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_.data(), host_.host(), up_bytes_,
                                             cudaMemcpyHostToDevice, stream_.get()));
  return absl::OkStatus();
}

absl::Status HostLoop::Run(absl::Span<const WorkItem> items, std::uint64_t first_step,
                           std::vector<Completion>& completions) {
  StepArgs& a = host_args_;
  free_slots_.clear();
  for (std::uint32_t s = max_batch_; s-- > 0;) free_slots_.push_back(s);
  std::size_t next = 0;
  std::uint32_t batch = 0;
  std::uint64_t step = first_step;
  std::fill(a.finished, a.finished + max_batch_, 0u);
  for (;;) {
    // Admit into free slots, in order.
    while (batch < max_batch_ && next < items.size()) {
      a.items[batch] = items[next++];
      a.slots[batch] = free_slots_.back();
      free_slots_.pop_back();
      a.item_steps[batch] = 0;
      ++batch;
    }
    if (batch == 0) break;
    const std::uint32_t bucket = static_cast<std::uint32_t>(
        std::lower_bound(buckets_.begin(), buckets_.end(), batch) - buckets_.begin());
    BATON_RETURN_IF_ERROR(Upload(batch, bucket, step));
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[bucket].get(), stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_.host() + down_offset_,
                                               device_.data() + down_offset_, down_bytes_,
                                               cudaMemcpyDeviceToHost, stream_.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    ++step;
    ++steps_;
    // Retire finished items, keep the rest in order (as the device does).
    std::uint32_t kept = 0;
    for (std::uint32_t p = 0; p < batch; ++p) {
      if (a.finished[p] != 0) {
        completions.push_back(Completion{a.items[p].id,
                                         static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                                         a.item_steps[p] + 1, a.results[p]});
        free_slots_.push_back(a.slots[p]);
        a.finished[p] = 0;
        continue;
      }
      a.items[kept] = a.items[p];
      a.slots[kept] = a.slots[p];
      a.item_steps[kept] = a.item_steps[p] + 1;
      ++kept;
    }
    batch = kept;
  }
  return absl::OkStatus();
}

absl::Status HostLoop::PrepareScheduleReplay(DecoderModel& model, std::vector<ScheduleRun> runs,
                                             const WorkItem& item) {
  if (runs.empty()) return absl::InvalidArgumentError("HostLoop: an empty schedule to replay");
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
    BATON_ASSIGN_OR_RETURN(const std::uint32_t bucket, ChooseBucket(buckets_, run.batch));
    std::size_t up = 0, down_offset = 0, down = 0;
    const StepArgs a = LayOut(staged.data() + r * up_bytes_, max_batch_, up, down_offset, down);
    a.header->step = 0;
    a.header->batch = run.batch;
    a.header->bucket = bucket;
    a.header->bucket_size = buckets_[bucket];
    for (std::uint32_t p = 0; p < run.batch; ++p) {
      a.items[p] = item;
      a.slots[p] = p;
      a.item_steps[p] = run.item_step;
    }
    replay_buckets_.push_back(bucket);
  }
  BATON_ASSIGN_OR_RETURN(replay_args_, DeviceBuffer<unsigned char>::Create(staged.size()));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(replay_args_.data(), staged.data(), staged.size(), cudaMemcpyHostToDevice));
  replay_graphs_.resize(buckets_.size());
  for (const std::uint32_t bucket : replay_buckets_) {
    if (replay_graphs_[bucket]) continue;
    StepContext ctx;
    ctx.bucket_size = buckets_[bucket];
    ctx.args = device_args_;
    BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
                             for (std::uint32_t k = 0; k < kReplayStepsPerGraph; ++k) {
                               BATON_RETURN_IF_ERROR(model.EnqueueStep(ctx, s));
                             }
                             return absl::OkStatus();
                           }));
    BATON_ASSIGN_OR_RETURN(replay_graphs_[bucket], InstantiateGraph(graph.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(replay_graphs_[bucket].get(), stream_.get()));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  replay_runs_ = std::move(runs);
  return absl::OkStatus();
}

absl::Status HostLoop::EnqueueScheduleReplay() {
  if (replay_runs_.empty()) {
    return absl::FailedPreconditionError("HostLoop: PrepareScheduleReplay first");
  }
  for (std::size_t r = 0; r < replay_runs_.size(); ++r) {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_.data(), replay_args_.data() + r * up_bytes_,
                                               up_bytes_, cudaMemcpyDeviceToDevice, stream_.get()));
    const std::uint32_t bucket = replay_buckets_[r];
    std::uint32_t left = replay_runs_[r].steps;
    for (; left >= kReplayStepsPerGraph; left -= kReplayStepsPerGraph) {
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(replay_graphs_[bucket].get(), stream_.get()));
    }
    for (; left > 0; --left) {
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[bucket].get(), stream_.get()));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::samples
