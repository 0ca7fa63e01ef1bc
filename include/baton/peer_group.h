// baton::PeerGroup: the GPUs of one host as ranks of one process, with the
// buffers a one-shot all-reduce needs in each rank's memory and every rank's
// pointers to every other's (peer access over NVLink or PCIe: plain loads and
// stores, never NVLink multicast). The tensor-parallel model (issue #42)
// drives its ranks from threads of one process, so peers are reached by
// pointer after cudaDeviceEnablePeerAccess; ranks in several processes would
// register the same buffers as NCCL symmetric windows instead.
//
//   PeerGroupOptions options;
//   options.devices = {0, 1, 2, 3};
//   auto group = PeerGroup::Create(options);  // peer access enabled, buffers made
//   group->AllReduce(rank, in, out, count, DecoderDType::kBFloat16, stream_of_rank);
//
// The all-reduce (collective/all_reduce.cuh) is one kernel per rank: each
// block copies its slice of the input into its own rank's staging buffer,
// signals every peer with a flag (a release store at system scope), waits
// for every peer's flag (acquire loads of its own memory), then sums the
// ranks' slices in rank order in float and stores the result in the
// storage type. Every rank adds the same values in the same order, so every
// rank holds bit-identical results. Staging alternates between two halves
// by the call's parity, so a call's writes never meet a peer's reads of the
// call before (each rank passes call e + 1's barrier only after every peer
// finished reading call e). A kernel node with its arguments by value: it
// captures into CUDA graphs and device-launched graphs alike. Every rank
// must run the same sequence of calls (same counts) or the flags deadlock:
// a wait that passes `wait_timeout` gives up, leaves its output unwritten and
// records the fault, which CheckFaults reports (no GPU hangs).
//
// Costs: per call, 2 * count * size bytes written locally, (ranks - 1) *
// count * size read from peers; one flag store per peer and block; latency
// is the flag round trip (about 2 NVLink latencies) plus the transfer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "baton/decoder_config.h"

namespace baton {

// The most ranks a group holds (the GPUs of one host).
inline constexpr int kMaxPeerRanks = 8;

struct PeerGroupOptions {
  std::vector<int> devices;           // CUDA ordinals, one rank each, rank = position; at least 2
  std::size_t max_bytes = 1u << 20;  // the largest all-reduce, in bytes (a multiple of 16)
  // Blocks of each rank's all-reduce kernel (1 to 32): each reduces its own
  // slice behind its own flags. More move more bytes at once; fewer send
  // fewer flags (samples/all_reduce --blocks compares them).
  int blocks = 16;
  // How long a rank waits for a peer's flag before it gives up (a peer that
  // never arrives: a rank that skipped a call, or died).
  absl::Duration wait_timeout = absl::Seconds(5);
};

namespace detail {
struct AllReduceView;
}

class PeerGroup {
 public:
  // FailedPrecondition when a pair of devices cannot access each other's
  // memory (names them) or fewer GPUs exist than named; InvalidArgument for
  // options out of range.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PeerGroup>> Create(
      const PeerGroupOptions& options);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  [[nodiscard]] int ranks() const;
  [[nodiscard]] int device(int rank) const;

  // Enqueues rank `rank`'s part of an all-reduce (sum) of `count` elements of
  // `dtype` on `stream` (a stream of that rank's device): out = the sum over
  // ranks of their `in`, in rank order, accumulated in float. in == out is
  // allowed. InvalidArgument for a rank out of range, a count of 0, past
  // max_bytes or not a whole number of 16-byte vectors, pointers not 16-byte
  // aligned; nothing is enqueued then. Every rank must enqueue the same
  // calls in the same order.
  [[nodiscard]] absl::Status AllReduce(int rank, const void* in, void* out, std::size_t count,
                                       DecoderDType dtype, cudaStream_t stream) const;

  // OK, or Internal naming each rank whose all-reduce gave up waiting (its
  // output was left unwritten): reads every rank's fault word (synchronous).
  // A group that faulted stays faulted: every later exchange of a faulted
  // rank returns at once (one timeout, not one per call); make a new group.
  [[nodiscard]] absl::Status CheckFaults() const;

  // The largest exchange, in bytes (PeerGroupOptions::max_bytes).
  [[nodiscard]] std::size_t max_bytes() const;
  // Rank `rank`'s view of the group, as the step's all-reduce op reads it
  // (ops/all_reduce.h; the tensor-parallel decoder's plans). rank in range.
  [[nodiscard]] const detail::AllReduceView& view(int rank) const;

 private:
  struct Impl;
  explicit PeerGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
