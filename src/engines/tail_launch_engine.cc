// The tail-launch engine: each bucket's graph is [step; inner; step; ...;
// scheduler] with n steps (RuntimeOptions::tail_steps_per_launch; one for
// a bucket past max_batch, EngineSetup::StepsFor); its last
// node tail-launches the next step's bucket graph, so one device launch
// serves n steps while the batch stays in the bucket (engines/
// carried_decision.h otherwise). A one-node bootstrap graph starts the loop.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "baton/step_graph.h"
#include "engines/scheduler_nodes.h"
#include "foundation/nvtx.h"
#include "graph_engine.h"

namespace baton::detail {
namespace {

class TailLaunchEngine final : public GraphEngine {
 public:
  TailLaunchEngine() : GraphEngine("PrepareTailLaunchEngine") {}

  absl::Status Launch(cudaStream_t stream) override { return bootstrap_->Launch(stream); }

 private:
  absl::Status BuildGraphs(const StepProgram& program, const EngineSetup& setup,
                           const GraphEngineParams* params, cudaStream_t capture,
                           GraphEngineParams* written) override {
    std::vector<BucketGraph> graphs;
    for (std::uint32_t b = 0; b < program.buckets.size(); ++b) {
      const std::uint32_t size = program.buckets[b];
      const std::uint32_t steps = setup.StepsFor(size);
      const NvtxRange bucket_range(absl::StrCat("PrepareBucket ", size).c_str());
      CertifyOptions certify;
      certify.name = absl::StrCat(setup.program_name, " (bucket ", size, ", tail-launch engine)");
      BATON_ASSIGN_OR_RETURN(
          DeviceGraph graph,
          CaptureDeviceGraph(
              capture,
              [&](cudaStream_t stream) -> absl::Status {
                BATON_RETURN_IF_ERROR(EnqueueSteps(program, setup, params, b, steps, stream));
                return CaptureSchedulerNode(Engine::kTailLaunch, params, stream,
                                            ConditionalRole::kLoop, 0, /*after_inner=*/steps > 1);
              },
              certify));
      graphs.push_back(BucketGraph{size, std::move(graph)});
    }
    BATON_ASSIGN_OR_RETURN(BucketTable table, BucketTable::Create(std::move(graphs), capture));
    CertifyOptions certify;
    certify.name = "tail-launch engine bootstrap";
    BATON_ASSIGN_OR_RETURN(DeviceGraph bootstrap, CaptureDeviceGraph(
                                                      capture,
                                                      [&](cudaStream_t stream) {
                                                        return CaptureSchedulerNode(
                                                            Engine::kTailLaunch, params, stream);
                                                      },
                                                      certify));
    written->scheduler.buckets = table.device_table();
    table_.emplace(std::move(table));
    bootstrap_.emplace(std::move(bootstrap));
    return absl::OkStatus();
  }

  std::optional<BucketTable> table_;
  std::optional<DeviceGraph> bootstrap_;
};

}  // namespace

std::unique_ptr<EngineDriver> CreateTailLaunchEngine() {
  return std::make_unique<TailLaunchEngine>();
}

}  // namespace baton::detail
