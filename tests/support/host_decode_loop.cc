#include "support/host_decode_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "baton/step_graph.h"

namespace baton::testing {
absl::StatusOr<std::unique_ptr<HostDecodeLoop>> HostDecodeLoop::Create(const StepProgram& program) {
  int device = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return CreateRanks({program}, {device});
}

absl::StatusOr<std::unique_ptr<HostDecodeLoop>> HostDecodeLoop::CreateRanks(
    const std::vector<StepProgram>& programs, const std::vector<int>& devices) {
  if (programs.empty() || programs.size() != devices.size()) {
    return absl::InvalidArgumentError("HostDecodeLoop: one device per program");
  }
  const StepProgram& program = programs[0];
  std::unique_ptr<HostDecodeLoop> loop(new HostDecodeLoop());
  const std::vector<std::uint32_t>& buckets = program.buckets;
  const std::uint32_t n = program.max_batch;
  for (const StepProgram& p : programs) {
    if (n == 0 || !p.enqueue || p.buckets != buckets || p.max_batch != n || buckets.empty() ||
        buckets.front() == 0 ||
        std::adjacent_find(buckets.begin(), buckets.end(), std::greater_equal<>()) !=
            buckets.end()) {
      return absl::InvalidArgumentError(
          "HostDecodeLoop: the programs need max_batch, enqueue and the same strictly increasing "
          "buckets");
    }
  }
  loop->max_batch_ = n;
  loop->policy_ = program.tokens;
  loop->buckets_ = buckets;
  const std::uint32_t max_rows = std::max(n, program.tokens.max_rows());
  if (buckets.back() < max_rows) {
    return absl::InvalidArgumentError(absl::StrCat("HostDecodeLoop: the largest bucket ",
                                                   buckets.back(), " holds no whole step of ",
                                                   max_rows, " rows"));
  }
  loop->batch_ = std::make_unique<HostBatch>(n, program.pages);
  loop->ranks_.resize(programs.size());
  for (std::size_t r = 0; r < programs.size(); ++r) {
    Rank& rank = loop->ranks_[r];
    rank.device = devices[r];
    rank.pages = programs[r].pages;
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    BATON_ASSIGN_OR_RETURN(rank.stream, CreateStream());
    BATON_ASSIGN_OR_RETURN(rank.header, DeviceBuffer<StepHeader>::Create(1));
    BATON_ASSIGN_OR_RETURN(rank.items, DeviceBuffer<WorkItem>::Create(n));
    BATON_ASSIGN_OR_RETURN(rank.words,
                           DeviceBuffer<std::uint32_t>::Create(kStepWords * size_t{n}));
    StepArgs& a = rank.args;
    a.header = rank.header.data();
    a.items = rank.items.data();
    a.max_batch = n;
    PointStepWords(a, rank.words.data());
    a.max_tokens = max_rows;
    for (std::uint32_t size : buckets) {
      StepContext context;
      context.bucket_size = size;
      context.args = a;
      BATON_ASSIGN_OR_RETURN(Graph graph,
                             CaptureGraph(rank.stream.get(), [&](cudaStream_t stream) {
                               return programs[r].enqueue(context, stream);
                             }));
      BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph.get()));
      rank.graphs.push_back(std::move(exec));
    }
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[0]));
  return loop;
}

absl::Status HostDecodeLoop::Step(std::uint32_t batch, std::uint32_t rows, std::uint32_t bucket) {
  StepHeader header;
  header.step = step_++;
  header.batch = batch;
  header.bucket = bucket;
  header.bucket_size = buckets_[bucket];
  header.tokens = rows;
  const StepArgs& host = batch_->args();
  const std::size_t bytes = batch * sizeof(std::uint32_t);
  const bool pages_changed = batch_->TakePagesChanged();
  for (Rank& rank : ranks_) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    cudaStream_t s = rank.stream.get();
    const StepArgs& d = rank.args;
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d.header, &header, sizeof(header), cudaMemcpyHostToDevice, s));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.items, host.items, batch * sizeof(WorkItem),
                                               cudaMemcpyHostToDevice, s));
    const std::pair<std::uint32_t*, const std::uint32_t*> up[] = {
        {d.slots, host.slots},
        {d.item_steps, host.item_steps},
        {d.item_tokens, host.item_tokens},
        {d.tokens, host.tokens},
        {d.token_offsets, host.token_offsets}};
    for (const auto& [to, from] : up) {
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, s));
    }
    // Nothing finished yet, and a result the step does not write reads as poison.
    BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.finished, 0, bytes, s));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.results, 0xFF, bytes, s));
    // The page table, when the plan or the last retirement changed it.
    if (pages_changed) {
      const std::vector<std::uint32_t>& table = batch_->page_table();
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.pages.page_table, table.data(),
                                                 table.size() * sizeof(std::uint32_t),
                                                 cudaMemcpyHostToDevice, s));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(rank.graphs[bucket].get(), s));
  }
  Rank& first = ranks_[0];
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(first.device));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.finished, first.args.finished, bytes,
                                             cudaMemcpyDeviceToHost, first.stream.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.results, first.args.results, bytes,
                                             cudaMemcpyDeviceToHost, first.stream.get()));
  for (Rank& rank : ranks_) {
    BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(rank.device));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(rank.stream.get()));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(first.device));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Completion>> HostDecodeLoop::Run(absl::Span<const WorkItem> items) {
  std::vector<Completion> completions;
  HostBatch& b = *batch_;
  const StepArgs& a = b.args();
  b.Reset();
  std::size_t next = 0;
  // A step runs at least one token of the oldest unfinished item, so no run
  // takes more steps than all of the items' tokens: a loop past that is a bug.
  std::uint64_t step_limit = 1;
  for (const WorkItem& item : items) step_limit += InputTokens(item) + (std::uint64_t{1} << 16);
  for (std::uint64_t steps = 0; next < items.size() || b.batch() > 0; ++steps) {
    if (steps == step_limit) {
      return absl::InternalError(absl::StrCat("HostDecodeLoop: ", completions.size(), " of ",
                                              items.size(), " items finished in ", step_limit,
                                              " steps"));
    }
    while (next < items.size() && b.CanAdmit(items[next])) b.Admit(items[next++]);
    const std::uint32_t rows = b.PlanTokens(policy_);
    const int bucket = ChooseStepBucket(
        buckets_.data(), static_cast<std::uint32_t>(buckets_.size()), b.batch(), rows);
    if (bucket < 0) return absl::InternalError("HostDecodeLoop: no bucket holds the step");
    BATON_RETURN_IF_ERROR(Step(b.batch(), rows, static_cast<std::uint32_t>(bucket)));
    b.Retire([&](std::uint32_t p) {
      completions.push_back(Completion{a.items[p].id,
                                       static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                                       a.item_steps[p] + 1, a.results[p]});
    });
  }
  return completions;
}

}  // namespace baton::testing
