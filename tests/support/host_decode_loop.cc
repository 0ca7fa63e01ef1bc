#include "support/host_decode_loop.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "baton/step_graph.h"

namespace baton::testing {

absl::StatusOr<std::unique_ptr<HostDecodeLoop>> HostDecodeLoop::Create(
    DecoderModel& model, std::vector<std::uint32_t> buckets) {
  std::unique_ptr<HostDecodeLoop> loop(new HostDecodeLoop());
  loop->max_batch_ = model.options().max_batch;
  if (buckets.empty() || buckets.front() == 0 || buckets.back() > loop->max_batch_ ||
      std::adjacent_find(buckets.begin(), buckets.end(), std::greater_equal<>()) != buckets.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostDecodeLoop: bucket sizes must increase strictly, from 1 up to max_batch ",
                     loop->max_batch_));
  }
  loop->buckets_ = std::move(buckets);
  const std::uint32_t n = loop->max_batch_;
  BATON_ASSIGN_OR_RETURN(loop->stream_, CreateStream());
  BATON_ASSIGN_OR_RETURN(loop->header_, DeviceBuffer<StepHeader>::Create(1));
  BATON_ASSIGN_OR_RETURN(loop->items_, DeviceBuffer<WorkItem>::Create(n));
  BATON_ASSIGN_OR_RETURN(loop->slots_, DeviceBuffer<std::uint32_t>::Create(n));
  BATON_ASSIGN_OR_RETURN(loop->item_steps_, DeviceBuffer<std::uint32_t>::Create(n));
  BATON_ASSIGN_OR_RETURN(loop->finished_, DeviceBuffer<std::uint32_t>::Create(n));
  BATON_ASSIGN_OR_RETURN(loop->results_, DeviceBuffer<std::uint32_t>::Create(n));
  StepContext context;
  context.args.header = loop->header_.data();
  context.args.items = loop->items_.data();
  context.args.slots = loop->slots_.data();
  context.args.item_steps = loop->item_steps_.data();
  context.args.finished = loop->finished_.data();
  context.args.results = loop->results_.data();
  context.args.max_batch = n;
  for (std::uint32_t size : loop->buckets_) {
    context.bucket_size = size;
    BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(loop->stream_.get(), [&](cudaStream_t stream) {
                             return model.EnqueueStep(context, stream);
                           }));
    BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph.get()));
    loop->graphs_.push_back(std::move(exec));
  }
  return loop;
}

absl::Status HostDecodeLoop::Step(const std::vector<Active>& active, std::uint32_t bucket,
                                  std::vector<std::uint32_t>& finished,
                                  std::vector<std::uint32_t>& results) {
  const std::size_t batch = active.size();
  StepHeader header;
  header.step = step_++;
  header.batch = static_cast<std::uint32_t>(batch);
  header.bucket = bucket;
  header.bucket_size = buckets_[bucket];
  std::vector<WorkItem> items(batch);
  std::vector<std::uint32_t> slots(batch), steps(batch);
  for (std::size_t p = 0; p < batch; ++p) {
    items[p] = active[p].item;
    slots[p] = active[p].slot;
    steps[p] = active[p].steps;
  }
  cudaStream_t s = stream_.get();
  const std::size_t words = batch * sizeof(std::uint32_t);
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(header_.data(), &header, sizeof(header), cudaMemcpyHostToDevice, s));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(items_.data(), items.data(), batch * sizeof(WorkItem),
                                             cudaMemcpyHostToDevice, s));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(slots_.data(), slots.data(), words, cudaMemcpyHostToDevice, s));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(item_steps_.data(), steps.data(), words, cudaMemcpyHostToDevice, s));
  // Nothing finished yet, and a result the step does not write reads as poison.
  BATON_RETURN_IF_ERROR(finished_.Fill(0, s));
  BATON_RETURN_IF_ERROR(results_.Fill(0xFF, s));
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[bucket].get(), s));
  finished.assign(batch, 0);
  results.assign(batch, 0);
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(finished.data(), finished_.data(), words, cudaMemcpyDeviceToHost, s));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(results.data(), results_.data(), words, cudaMemcpyDeviceToHost, s));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Completion>> HostDecodeLoop::Run(
    absl::Span<const std::uint32_t> entries) {
  std::vector<Completion> completions;
  std::vector<Active> active;
  std::set<std::uint32_t> free_slots;
  for (std::uint32_t s = 0; s < max_batch_; ++s) free_slots.insert(s);
  std::vector<std::uint32_t> finished, results;
  // No request runs longer than its context: a loop past that is a bug.
  const std::uint64_t step_limit = (entries.size() + 1) * std::uint64_t{kDecoderMaxContext + 1};
  std::size_t next = 0;
  for (std::uint64_t steps = 0; next < entries.size() || !active.empty(); ++steps) {
    if (steps == step_limit) {
      return absl::InternalError(absl::StrCat("HostDecodeLoop: ", completions.size(), " of ",
                                              entries.size(), " entries finished in ", step_limit,
                                              " steps"));
    }
    while (active.size() < buckets_.back() && next < entries.size()) {
      active.push_back({DecoderModel::WorkItemFor(entries[next++]), *free_slots.begin(), 0});
      free_slots.erase(free_slots.begin());
    }
    const std::uint32_t bucket = static_cast<std::uint32_t>(
        std::lower_bound(buckets_.begin(), buckets_.end(), active.size()) - buckets_.begin());
    BATON_RETURN_IF_ERROR(Step(active, bucket, finished, results));
    std::vector<Active> kept;
    for (std::size_t p = 0; p < active.size(); ++p) {
      Active a = active[p];
      ++a.steps;
      if (finished[p] == 0) {
        kept.push_back(a);
        continue;
      }
      completions.push_back(Completion{a.item.id,
                                       static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                                       a.steps, results[p]});
      free_slots.insert(a.slot);
    }
    active = std::move(kept);
  }
  return completions;
}

}  // namespace baton::testing
