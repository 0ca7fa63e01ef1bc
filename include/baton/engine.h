// The engines that drive the decode loop on the device, and why an engine
// stopped. Abseil-free: shared by the scheduler kernels and the host API.
#pragma once

#include <cstdint>

namespace baton {

enum class Engine : std::uint32_t {
  // Each bucket's step graph ends with the scheduler node, which tail-launches
  // the next step's bucket graph: one device launch per step.
  kTailLaunch = 0,
  // One host-launched graph: WHILE(continue) { scheduler; SWITCH(bucket) {
  // bucket bodies } }. No device launches.
  kConditional = 1,
  // A one-warp scheduler kernel launches the step's kernels (Baton's own
  // device step programs, StepProgram::device_step) into the tail-launch
  // stream with grids sized from the actual batch, then itself. No graphs;
  // batches above the largest bucket are fine. Slow by nature: the fallback.
  kDynamicParallelism = 2,
};

// Why the engine's loop ended (EngineStatus::reason).
enum class EngineExit : std::uint32_t {
  kRunning = 0,      // not ended
  kIdle = 1,         // nothing queued and nothing active; Submit restarts it
  kDrained = 2,      // Stop: everything in flight finished
  kAborted = 3,      // Abort: ended with work in flight
  kMailboxFull = 4,  // completions did not fit; Poll frees room and resumes
  kError = 5,        // a device error (see the error word)
};

// The engine's name in messages ("tail-launch", "conditional", ...).
[[nodiscard]] constexpr const char* EngineName(Engine engine) {
  switch (engine) {
    case Engine::kTailLaunch:
      return "tail-launch";
    case Engine::kConditional:
      return "conditional";
    case Engine::kDynamicParallelism:
      return "dynamic-parallelism";
  }
  return "unknown";
}

// Why an engine stopped, in words (Status messages, the trace's JSON).
[[nodiscard]] constexpr const char* EngineExitName(EngineExit exit) {
  switch (exit) {
    case EngineExit::kRunning:
      return "running";
    case EngineExit::kIdle:
      return "idle";
    case EngineExit::kDrained:
      return "drained";
    case EngineExit::kAborted:
      return "aborted";
    case EngineExit::kMailboxFull:
      return "mailbox full";
    case EngineExit::kError:
      return "device error";
  }
  return "unknown";
}

}  // namespace baton
