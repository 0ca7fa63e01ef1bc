#include "decode_loop/host_loop.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
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

absl::Status HostLoop::EnqueueReplays(const WorkItem& item, std::uint32_t item_step, int steps) {
  StepArgs& a = host_args_;
  for (std::uint32_t p = 0; p < max_batch_; ++p) {
    a.items[p] = item;
    a.slots[p] = p;
    a.item_steps[p] = item_step;
    a.finished[p] = 0;
  }
  BATON_RETURN_IF_ERROR(Upload(max_batch_, static_cast<std::uint32_t>(buckets_.size() - 1), 0));
  for (int s = 0; s < steps; ++s) {
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_.back().get(), stream_.get()));
  }
  return absl::OkStatus();
}

}  // namespace baton::samples
