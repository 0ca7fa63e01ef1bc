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
#include "carried_decision.h"
#include "engines/engine_driver.h"
#include "engines/scheduler_nodes.h"
#include "foundation/nvtx.h"

namespace baton::detail {
namespace {

class ConditionalEngine final : public EngineDriver {
 public:
  Engine kind() const override { return Engine::kConditional; }

  absl::Status Prepare(const StepProgram& program, const EngineSetup& setup) override {
    if (graph_.has_value()) return absl::OkStatus();
    const NvtxRange range("PrepareConditionalEngine");
    BATON_ASSIGN_OR_RETURN(carried_, CarriedDecision::Create());
    BATON_ASSIGN_OR_RETURN(params_, DeviceBuffer<GraphEngineParams>::Create(1));
    const GraphEngineParams* params = params_.data();
    // The scheduler only needs the bucket sizes to choose with: the entries
    // carry no graph handle because it launches nothing.
    std::vector<DeviceBucketEntry> entries;
    for (std::uint32_t size : program.buckets) entries.push_back({nullptr, size, 0});
    BATON_ASSIGN_OR_RETURN(sizes_, DeviceBuffer<DeviceBucketEntry>::Create(entries.size()));
    BATON_RETURN_IF_ERROR(sizes_.CopyFrom(entries));
    BATON_ASSIGN_OR_RETURN(Stream capture, CreateStream());
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
    auto step = [&](GraphSection& section, std::uint32_t bucket) {
      const NvtxRange bucket_range(absl::StrCat("PrepareBucket ", program.buckets[bucket]).c_str());
      const StepContext context{program.buckets[bucket], setup.scheduler.args};
      return section.Capture([&](cudaStream_t stream) { return program.enqueue(context, stream); });
    };
    // A bucket's steps per loop body (EngineSetup::StepsFor).
    auto steps_of = [&](std::uint32_t bucket) { return setup.StepsFor(program.buckets[bucket]); };
    // The steps of one loop body and the inner nodes between them.
    auto body_steps = [&](GraphSection& section, std::uint32_t bucket) -> absl::Status {
      BATON_RETURN_IF_ERROR(step(section, bucket));
      for (std::uint32_t k = 1; k < steps_of(bucket); ++k) {
        BATON_RETURN_IF_ERROR(section.Capture(
            [&](cudaStream_t stream) { return CaptureTailInnerNode(params, stream, bucket); }));
        BATON_RETURN_IF_ERROR(step(section, bucket));
      }
      return absl::OkStatus();
    };
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
        BATON_RETURN_IF_ERROR(body_steps(loop, 0));
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
            BATON_RETURN_IF_ERROR(step(body, b));
            BATON_RETURN_IF_ERROR(scheduler(body, ConditionalRole::kInner, b));
            return body.While(stay_handles[b], [&](GraphSection& inner) {
              BATON_RETURN_IF_ERROR(body_steps(inner, b));
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
    BATON_ASSIGN_OR_RETURN(ConditionalGraph graph, builder.Build(capture.get()));
    GraphEngineParams written;
    written.scheduler = setup.scheduler;
    written.scheduler.buckets =
        DeviceBucketTable{sizes_.data(), static_cast<std::uint32_t>(entries.size())};
    written.carried = carried_.device_word();
    written.while_handle = while_handle;
    written.switch_handle = switch_handle;
    written.stay_handles = stay_handles_.data();
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(params_.data(), &written, sizeof(written), cudaMemcpyHostToDevice));
    graph_.emplace(std::move(graph));
    return absl::OkStatus();
  }

  absl::Status Launch(cudaStream_t stream) override { return graph_->Launch(stream); }
  absl::Status Reset() override { return carried_.Reset(); }

 private:
  CarriedDecision carried_;
  DeviceBuffer<GraphEngineParams> params_;
  DeviceBuffer<DeviceBucketEntry> sizes_;
  DeviceBuffer<cudaGraphConditionalHandle> stay_handles_;
  std::optional<ConditionalGraph> graph_;
};

}  // namespace

std::unique_ptr<EngineDriver> CreateConditionalEngine() {
  return std::make_unique<ConditionalEngine>();
}

}  // namespace baton::detail
