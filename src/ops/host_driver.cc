// EnqueueNodes (ops/host_driver.h): a plan bound to a launch frame and
// enqueued op by op, and the cuBLASLt op's host call.
#include "ops/host_driver.h"

#include "absl/strings/str_cat.h"
#include "baton/cublaslt_matmul.h"
#include "baton/status.h"

namespace baton::ops {

absl::Status Linear::enqueue(const Args& a, cudaStream_t stream) {
  if (a.plan == nullptr) {
    return absl::InternalError(absl::StrCat("step plan: projection ",
                                            static_cast<int>(a.projection),
                                            " has no cuBLASLt plan for bucket ", a.rows));
  }
  return a.plan->Enqueue(stream, a.x, a.w, a.bias, a.y);
}

absl::Status EnqueueNodes(const OpNode* nodes, std::size_t count, const OpFrame& frame,
                          cudaStream_t stream) {
  for (std::size_t i = 0; i < count; ++i) {
    OpNode node = nodes[i];
    const absl::Status status = visit<absl::Status>(
        StepOps{}, node.kind,
        [&](auto tag) -> absl::Status {
          using Op = typename decltype(tag)::type;
          typename Op::Args args = node.args<Op>();
          Op::bind(args, frame, node);
          if constexpr (Op::kHostOnly) {
            return Op::enqueue(args, stream);
          } else {
            node.set<Op>(args);
            const cudaError_t e = EnqueueNode(node, stream);
            if (e == cudaSuccess) return absl::OkStatus();
            // (The failure lives in the Status now: a caller's later
            // cudaGetLastError() must not blame their own launch for it.)
            if (!IsStickyCudaError(e)) (void)cudaGetLastError();
            return CudaStatus(e, absl::StrCat("op ", Op::kName, " (node ", i, " of the plan)"),
                              __FILE__, __LINE__);
          }
        },
        absl::InternalError(absl::StrCat("step plan: node ", i, " names op kind ", node.kind,
                                         ", past the op table")));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace baton::ops
