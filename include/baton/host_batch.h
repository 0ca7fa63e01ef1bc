// A batch kept in host memory and moved by the batch policy (batch_policy.h):
// the arrays a step's StepArgs point at, the free-slot stack and the batch
// size. Host-driven loops (the decode_loop sample's host loop, the tests'
// host decode loop) and the tests of the device scheduler replay the
// device's decisions with it, so every driver retires, admits and chunks
// through the same functions. Host code only; no Abseil.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/batch_policy.h"
#include "baton/step_args.h"
#include "baton/work_item.h"

namespace baton {

class HostBatch {
 public:
  // A batch of up to `max_batch` positions in arrays of its own, empty, with
  // every slot free.
  explicit HostBatch(std::uint32_t max_batch)
      : items_(max_batch), words_(std::size_t{kStepWords} * max_batch) {
    args_.items = items_.data();
    args_.max_batch = max_batch;
    PointStepWords(args_, words_.data());
    Reset();
  }
  // A batch kept in the caller's host arrays (`arrays`: items, the word
  // arrays and max_batch; e.g. mapped memory a loop uploads from), which
  // must outlive this object. Empty, with every slot free.
  explicit HostBatch(const StepArgs& arrays) : args_(arrays) { Reset(); }
  // args() may point into this object's arrays.
  HostBatch(const HostBatch&) = delete;
  HostBatch& operator=(const HostBatch&) = delete;

  // Empty again, with the device scheduler's initial free stack (slot 0 on
  // top), so host and device hand out the same slots.
  void Reset() {
    batch_ = 0;
    free_count_ = args_.max_batch;
    free_slots_.resize(args_.max_batch);
    for (std::uint32_t i = 0; i < args_.max_batch; ++i) free_slots_[i] = args_.max_batch - 1 - i;
  }

  [[nodiscard]] bool CanAdmit() const { return batch_ < args_.max_batch && free_count_ > 0; }
  // Admits `item` at the end of the batch (requires CanAdmit()).
  void Admit(const WorkItem& item) {
    batch_ = AdmitItem(args_, batch_, free_slots_.data(), free_count_, item);
  }
  // Retires the finished positions, calling retired(p) for each first.
  template <class Retired>
  void Retire(Retired&& retired) {
    batch_ = RetireStep(args_, batch_, free_slots_.data(), free_count_, retired);
  }
  // Plans the next step's tokens; returns its rows.
  std::uint32_t PlanTokens(const TokenPolicy& policy) {
    return PlanStepTokens(policy, args_, batch_);
  }

  [[nodiscard]] const StepArgs& args() const { return args_; }
  [[nodiscard]] std::uint32_t batch() const { return batch_; }
  [[nodiscard]] std::uint32_t free_count() const { return free_count_; }
  // The free stack's slots, bottom first: [0, free_count()).
  [[nodiscard]] const std::vector<std::uint32_t>& free_slots() const { return free_slots_; }

 private:
  std::vector<WorkItem> items_;       // owned arrays (empty over the caller's)
  std::vector<std::uint32_t> words_;  // [kStepWords][max_batch]
  std::vector<std::uint32_t> free_slots_;
  StepArgs args_;
  std::uint32_t batch_ = 0;
  std::uint32_t free_count_ = 0;
};

}  // namespace baton
