// The conditional engine: one host-launched graph. With one bucket,
//   [scheduler] -> WHILE(continue) { step; ...; scheduler }
// and with several (the SWITCH is entered only when the bucket changes),
//   WHILE(continue) { outer scheduler; SWITCH(bucket) {
//     b: [step_b; inner scheduler; WHILE(stay_b) { step_b; ...; inner scheduler }] } }
// A loop body holds n steps (RuntimeOptions::conditional_steps_per_iteration;
// one for a bucket past max_batch, EngineSetup::StepsFor) with inner nodes
// between them, so the WHILE is evaluated once per n steps
// (engines/carried_decision.h when the bucket changes mid-body). No device
// launches.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/conditional_builder.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "engines/scheduler_nodes.h"
#include "foundation/nvtx.h"
#include "graph_engine.h"

namespace baton::detail {
namespace {

class ConditionalEngine final : public GraphEngine {
 public:
  ConditionalEngine() : GraphEngine("PrepareConditionalEngine") {}

  absl::Status Launch(cudaStream_t stream) override { return graph_->Launch(stream); }

 private:
  absl::Status BuildGraphs(const StepProgram& program, const EngineSetup& setup,
                           const GraphEngineParams* params, cudaStream_t capture,
                           GraphEngineParams* written) override {
    // The scheduler only needs the bucket sizes to choose with: the entries
    // carry no graph handle because it launches nothing.
    std::vector<DeviceBucketEntry> entries;
    for (std::uint32_t size : program.buckets) entries.push_back({nullptr, size, 0});
    BATON_ASSIGN_OR_RETURN(written->scheduler.buckets, UploadBucketSizes(entries, sizes_));
    BATON_ASSIGN_OR_RETURN(
        ConditionalGraphBuilder builder,
        ConditionalGraphBuilder::Create(absl::StrCat(setup.program_name, " (conditional engine)")));

    auto scheduler = [&](GraphSection& section, ConditionalRole role, std::uint32_t body_bucket,
                         bool after_inner = false) {
      return section.Capture([&](cudaStream_t stream) {
        return CaptureSchedulerNode(Engine::kConditional, params, stream, role, body_bucket,
                                    after_inner);
      });
    };
    // `count` steps of `bucket` and the inner nodes between them.
    auto steps = [&](GraphSection& section, std::uint32_t bucket, std::uint32_t count) {
      const NvtxRange bucket_range(absl::StrCat("PrepareBucket ", program.buckets[bucket]).c_str());
      return section.Capture([&](cudaStream_t stream) {
        return EnqueueSteps(program, setup, params, bucket, count, stream);
      });
    };
    // A bucket's steps per loop body (EngineSetup::StepsFor).
    auto steps_of = [&](std::uint32_t bucket) { return setup.StepsFor(program.buckets[bucket]); };
    cudaGraphConditionalHandle while_handle = 0;
    cudaGraphConditionalHandle switch_handle = 0;
    const std::uint32_t bucket_count = static_cast<std::uint32_t>(program.buckets.size());
    std::vector<cudaGraphConditionalHandle> stay_handles(bucket_count, 0);
    if (bucket_count == 1) {
      // One bucket needs no SWITCH (a conditional level costs several us per
      // step): decide once before the loop, then each iteration runs the step
      // and decides the next one, so a stop never runs a stale step.
      BATON_ASSIGN_OR_RETURN(while_handle, builder.root().CreateHandle(/*default_value=*/0));
      BATON_RETURN_IF_ERROR(scheduler(builder.root(), ConditionalRole::kLoop, 0));
      BATON_RETURN_IF_ERROR(builder.root().While(while_handle, [&](GraphSection& loop) {
        BATON_RETURN_IF_ERROR(steps(loop, 0, steps_of(0)));
        return scheduler(loop, ConditionalRole::kLoop, 0, /*after_inner=*/steps_of(0) > 1);
      }));
    } else {
      BATON_ASSIGN_OR_RETURN(while_handle, builder.root().CreateHandle(/*default_value=*/1));
      BATON_RETURN_IF_ERROR(builder.root().While(while_handle, [&](GraphSection& loop) {
        BATON_ASSIGN_OR_RETURN(switch_handle, loop.CreateHandle(kNoBucket));
        BATON_RETURN_IF_ERROR(scheduler(loop, ConditionalRole::kOuter, 0));
        std::vector<SectionFiller> bodies;
        for (std::uint32_t b = 0; b < bucket_count; ++b) {
          bodies.push_back([&, b](GraphSection& body) -> absl::Status {
            BATON_ASSIGN_OR_RETURN(stay_handles[b], body.CreateHandle(/*default_value=*/0));
            BATON_RETURN_IF_ERROR(steps(body, b, 1));
            BATON_RETURN_IF_ERROR(scheduler(body, ConditionalRole::kInner, b));
            return body.While(stay_handles[b], [&](GraphSection& inner) {
              BATON_RETURN_IF_ERROR(steps(inner, b, steps_of(b)));
              return scheduler(inner, ConditionalRole::kInner, b, /*after_inner=*/steps_of(b) > 1);
            });
          });
        }
        return loop.Switch(switch_handle, bodies);
      }));
    }
    BATON_ASSIGN_OR_RETURN(stay_handles_,
                           DeviceBuffer<cudaGraphConditionalHandle>::Create(bucket_count));
    BATON_RETURN_IF_ERROR(stay_handles_.CopyFrom(stay_handles));
    BATON_ASSIGN_OR_RETURN(ConditionalGraph graph, builder.Build(capture));
    written->while_handle = while_handle;
    written->switch_handle = switch_handle;
    written->stay_handles = stay_handles_.data();
    graph_.emplace(std::move(graph));
    return absl::OkStatus();
  }

  DeviceBuffer<DeviceBucketEntry> sizes_;
  DeviceBuffer<cudaGraphConditionalHandle> stay_handles_;
  std::optional<ConditionalGraph> graph_;
};

}  // namespace

std::unique_ptr<EngineDriver> CreateConditionalEngine() {
  return std::make_unique<ConditionalEngine>();
}

}  // namespace baton::detail
