"""Timing for tp_step.py: CUDA-graph capture, the workers' control group, the timed loop, and the all-reduce
microbenchmark (CALLS_PER_GRAPH back-to-back all-reduces of one size in one graph, per driver)."""
from __future__ import annotations

import os

# Multicast off before torch is imported, should this module be imported first (tp_step.py says why).
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tp_symm  # noqa: E402

CALLS_PER_GRAPH = 64  # all-reduces per graph in the microbenchmark, as samples/all_reduce


def capture(fn: Callable[[], None], warmup: int = 3) -> torch.cuda.CUDAGraph:
    """fn warmed up on a side stream (allocator, cuBLAS and NCCL set up before capture), then captured whole.
    thread_local: the NCCL watchdog thread's event queries must not invalidate this thread's capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        fn()
    torch.cuda.synchronize()
    return graph


class Ctx:
    """A worker's rank, world and control group (gloo: flags and timings travel beside, not through, NCCL)."""

    def __init__(self, rank: int, tp: int, cuda: bool, control: Any) -> None:
        self.rank, self.tp, self.cuda, self.control = rank, tp, cuda, control

    def gather(self, obj: Any) -> list[Any]:
        if self.tp == 1:
            return [obj]
        out: list[Any] = [None] * self.tp
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def barrier(self) -> None:
        if self.tp > 1:
            dist.barrier(group=self.control)

    def agree(self, error: str | None) -> str | None:
        """Every rank's error, so that all ranks skip together (a rank alone in a collective would hang)."""
        errors = self.gather(error)
        if not any(errors):
            return None
        if len(set(errors)) == 1:
            return errors[0]
        return "; ".join(f"rank {r}: {e}" for r, e in enumerate(errors) if e)


def timed(ctx: Ctx, run: Callable[[], None], calls: int, repeats: int, warmup: int = 3) -> float:
    """µs per call: per repeat all ranks start together (control barrier) and run `run` (`calls` calls) between
    two CUDA events (host clock on the CPU); the slowest rank's time per repeat; the median over repeats."""
    for _ in range(warmup):
        run()
    mine = []
    for _ in range(repeats):
        if ctx.cuda:
            torch.cuda.synchronize()
        ctx.barrier()
        if ctx.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            mine.append(start.elapsed_time(end) * 1e3 / calls)
        else:
            t = time.perf_counter()
            run()
            mine.append((time.perf_counter() - t) * 1e6 / calls)
    per_rank = ctx.gather(mine)
    return statistics.median(max(r[i] for r in per_rank) for i in range(repeats))


def time_allreduce(ctx: Ctx, driver: str, size: int, opts: dict[str, Any]) -> float:
    """CALLS_PER_GRAPH back-to-back all-reduces of `size` bytes of bf16 in one graph (zeros: sums stay finite);
    'symm' through the backend tp_symm.setup() chose."""
    numel = size // 2
    device = torch.device("cuda", ctx.rank) if ctx.cuda else torch.device("cpu")
    if driver == "nccl":
        t = torch.zeros(numel, dtype=torch.bfloat16 if ctx.cuda else torch.float32, device=device)

        def calls() -> None:
            for _ in range(CALLS_PER_GRAPH):
                dist.all_reduce(t)
    else:
        name = dist.group.WORLD.group_name
        buf = tp_symm.buffer((numel,), torch.bfloat16, device, name)
        buf.zero_()
        res = torch.empty_like(buf)

        def calls() -> None:
            for _ in range(CALLS_PER_GRAPH):
                torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", name, res)
    if not ctx.cuda:
        return timed(ctx, calls, CALLS_PER_GRAPH, opts["allreduce_repeats"], warmup=1)
    graph = capture(calls, warmup=1)
    return timed(ctx, graph.replay, CALLS_PER_GRAPH, opts["allreduce_repeats"])

