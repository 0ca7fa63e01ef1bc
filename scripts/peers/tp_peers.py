#!/usr/bin/env python3
"""PyTorch peer for issue #42 (tensor parallelism): a Llama-shaped decode step split Megatron's way over the GPUs
of one host, what a PyTorch user gets beside Baton's tensor_parallel sample.

Per tp in --tp, tp worker processes (torch.multiprocessing, spawn; torch.distributed over NCCL, initialised
through a free localhost TCP port; tp=1 is one process with no process group and no all-reduce). Each rank holds
its shard of random bf16 weights (std 0.02) made on its GPU (tp_step.py: q|k|v and gate|up column-parallel,
o_proj and down_proj row-parallel, the LM head by vocabulary rows then an all-gather of the logits and the argmax;
embedding and norms on every rank) and, per batch, a static KV cache [batch, kv_heads/tp, len, head_dim] per
layer filled with random values. The step: embedding lookup of `batch` tokens, the layers (the new token's K/V
written at position --context, SDPA with enable_gqa over context + 1 keys, on the fastest of the flash, cuDNN and
memory-efficient backends, picked per batch and recorded), final norm, LM head, gather, argmax into a static
output; the whole step captured in one CUDA graph per (tp, batch, driver). Drivers of the two all-reduces per
layer, tp > 1:
  nccl: torch.distributed.all_reduce on the default (NCCL) group, captured in the graph;
  symm: PyTorch's symmetric memory, torch.ops.symm_mem.one_shot_all_reduce_out over a buffer from
        symm_mem.empty + rendezvous (every rank loads its peers' buffers; no multicast). The allocation backend:
        CUDA (torch's default, left as it is; set_backend("CUDA") fails when it is already the default), else
        NVSHMEM (with NVSHMEM_DISABLE_NVLS=1); the one that passed a checked all-reduce is in each symm row's
        "symm_backend" and in the notes, or every attempt's reason in the rows' "error" (tp_symm.py).
  The LM head's logits are gathered by NCCL's all_gather in both.
Timing: 3 warm-up replays, then per repeat all ranks start together and replay --steps times between two CUDA
events; µs per step = elapsed / steps; the slowest rank per repeat, the median over --repeats. All-reduce
microbenchmark (tp > 1, each driver): CALLS_PER_GRAPH back-to-back all-reduces of each size (bytes of bf16) in one
graph, µs per call, the slowest rank's median over --allreduce-repeats.

NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are assigned before torch is
imported, here and in every worker: NVLink multicast is never used (see tp_step.py).

    scripts/peers/tp_peers.py --model llama-3.1-8b --tp 1,2,4 --batches 1,8 --context 576 --steps 64 \\
        --repeats 5 --allreduce-sizes 4096,8192,16384,32768,65536 --json $OUT/tp-peers-llama-3.1-8b.json
    scripts/peers/tp_peers.py --self-test                  # tiny model, float32: tp=N's logits against tp=1's
    scripts/peers/tp_peers.py --model llama-3.1-70b --tp 1,2,4,8 --dry-run   # shard shapes and bytes, no GPU
    scripts/peers/tp_peers.py --model tiny --device cpu --tp 1,2 --layers 2 --context 64 --steps 2 --repeats 1

--device cpu is a smoke test of the code paths (gloo, eager, float32, host clock), not a measurement; its
drivers' names say so. A tp above the GPUs present, or one that does not divide the KV heads (heads, FFN,
vocabulary), is skipped with a note; a (tp, batch) that does not fit gets rows with "error".
"""
from __future__ import annotations

import os

# Multicast off before anything imports torch (tp_step.py says why); assigned, not setdefault.
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

import tp_step  # noqa: E402  (sets the same variables again, then imports torch)
from tp_step import (AR_DRIVERS, MODELS, cache_len, divisibility_problem, driver_label, kv_cache_bytes,  # noqa: E402
                     shard_shapes, weight_bytes)
from peer_args import PeerError, exit_status, parse_list  # noqa: E402
from tp_timing import CALLS_PER_GRAPH  # noqa: E402

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SELF_TEST_TOL = 1e-4  # float32 logits, tp=N against tp=1: the same sums in another order


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(tp: int, opts: dict[str, Any]) -> dict[str, Any]:
    """Runs tp workers (tp_step.worker) and returns rank 0's results; a worker that died leaves what rank 0 had
    written by then, and the error under 'failed'."""
    with tempfile.TemporaryDirectory(prefix="tp-peers-") as tmp:
        path = pathlib.Path(tmp) / "rank0.json"
        failed = None
        try:
            mp.spawn(tp_step.worker, args=(tp, free_port(), opts, str(path)), nprocs=tp, join=True)
        except Exception as error:  # noqa: BLE001 (ProcessRaisedException, ProcessExitedException)
            failed = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300] if str(error) else ''}"
        result = json.loads(path.read_text()) if path.exists() else {}
    if failed:
        result["failed"] = failed
    return result


def nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 (a CPU-only build)
        return None


# --------------------------------------------------------------------------- self-test


def self_test(args: argparse.Namespace) -> int:
    """The tiny model in float32 with the same weights at every tp: tp=N's logits (eager and graph, each driver)
    against tp=1's, and each graph against its eager step. On CUDA tp = 2 and 4 where the GPUs are there; on the
    CPU (gloo) tp = 2 and 4."""
    cuda = args.device == "cuda"
    tps = [1] + [t for t in (2, 4) if not cuda or t <= torch.cuda.device_count()]
    opts = {"device": args.device, "self_test": True, "timeout": args.timeout}
    results = {}
    for tp in tps:
        r = spawn(tp, opts)
        if "failed" in r:
            print(f"self-test: tp {tp} failed: {r['failed']}")
            return 1
        results[tp] = r
    ok = True
    for tp in tps:
        for key, res in results[tp].items():
            ref = torch.tensor(results[1][f"tp1 {key.split()[1]}"]["eager"])
            checks = [("eager vs tp1", torch.tensor(res["eager"]), ref)]
            if "graph" in res:
                checks.append(("graph vs eager", torch.tensor(res["graph"]), torch.tensor(res["eager"])))
            for what, a, b in checks:
                err = ((a - b).abs().max() / b.abs().max()).item()
                good = err <= SELF_TEST_TOL
                ok &= good
                print(f"  tp {tp} {key:9} {what:14}: max rel logit error {err:.2e} {'ok' if good else 'FAILED'}")
            ref_tokens = results[1][f"tp1 {key.split()[1]}"]["eager_tokens"]
            same = res["eager_tokens"] == ref_tokens and res.get("graph_tokens", ref_tokens) == ref_tokens
            ok &= same
            print(f"  tp {tp} {key:9} argmax tokens equal to tp1's: {same}")
    print("self-test " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


# --------------------------------------------------------------------------- main


def dry_run(cfg: tp_step.Config, tps: list[int], batches: list[int], context: int) -> int:
    """Shard shapes and bytes per GPU for each tp; nothing allocated."""
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.layers} layers, {cfg.heads} heads, {cfg.kv_heads} KV heads, "
          f"head_dim {cfg.head_dim}, ffn {cfg.ffn}, vocab {cfg.vocab}; cache length {cache_len(context)}")
    for tp in tps:
        problem = divisibility_problem(cfg, tp)
        if problem:
            print(f"tp {tp}: skipped: {problem}")
            continue
        b = weight_bytes(cfg, tp)
        shapes = ", ".join(f"{k} {list(v)}" for k, v in shard_shapes(cfg, tp).items())
        caches = ", ".join(f"b{n} {kv_cache_bytes(cfg, tp, n, context) / 2**30:.2f}" for n in batches)
        print(f"tp {tp}: {b['streamed'] / 2**30:.2f} GiB streamed per step per GPU, {b['resident'] / 2**30:.2f} GiB "
              f"resident; KV caches GiB {caches}\n  {shapes}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-8b", choices=sorted(MODELS),
                        help="the shape (tiny: a test shape, not a model)")
    parser.add_argument("--tp", default="1,2,4", help="tensor-parallel sizes (GPUs per step)")
    parser.add_argument("--batches", default="1,8", help="sequences per step")
    parser.add_argument("--context", type=int, default=576, help="cached positions; the step attends to context + 1")
    parser.add_argument("--steps", type=int, default=64, help="graph replays per timed repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (median of the slowest rank's)")
    parser.add_argument("--allreduce-sizes", default="4096,8192,16384,32768,65536", help="bytes of bf16 per call")
    parser.add_argument("--allreduce-repeats", type=int, default=20, help="graph replays timed per size (median)")
    parser.add_argument("--no-allreduce", action="store_true", help="leave the all-reduce microbenchmark out")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the step's elementwise pieces (norms, RoPE, SiLU*up; drivers '-compiled')")
    parser.add_argument("--layers", type=int, help="override the layer count (smoke tests; the label says so)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test, not a timing")
    parser.add_argument("--timeout", type=int, default=180,
                        help="seconds a rank waits in a collective before its process group gives up (a hang ends)")
    parser.add_argument("--dry-run", action="store_true", help="print the shards' shapes and bytes; no GPU, no timing")
    parser.add_argument("--self-test", action="store_true", help="tp=N against tp=1 on the tiny shape, float32; exit")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    return exit_status(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    if args.device == "cuda" and not args.dry_run and not torch.cuda.is_available():
        raise PeerError("no CUDA device (use --device cpu for a smoke test, or --dry-run)")
    if args.self_test:
        return self_test(args)
    tps, batches = parse_list(args.tp, "tp"), parse_list(args.batches, "batches")
    sizes = parse_list(args.allreduce_sizes, "allreduce-sizes")
    if any(s % 16 for s in sizes):
        raise PeerError("--allreduce-sizes: multiples of 16 bytes (whole vectors of bf16)")
    if min(args.context, args.steps, args.repeats, args.allreduce_repeats) <= 0:
        raise PeerError("--context, --steps, --repeats and --allreduce-repeats must be positive")
    cfg = MODELS[args.model]
    label = args.model
    if args.layers:
        cfg, label = dataclasses.replace(cfg, layers=args.layers), f"{args.model}[{args.layers} layers]"
    if args.dry_run:
        return dry_run(cfg, tps, batches, args.context)
    cuda = args.device == "cuda"
    gpus = torch.cuda.device_count() if cuda else 0
    opts = {"device": args.device, "cfg": cfg, "label": label, "batches": batches, "context": args.context,
            "steps": args.steps, "repeats": args.repeats, "allreduce_sizes": sizes,
            "allreduce_repeats": args.allreduce_repeats, "no_allreduce": args.no_allreduce, "compile": args.compile,
            "timeout": args.timeout}
    rows: list[dict[str, Any]] = []
    allreduce: list[dict[str, Any]] = []
    notes: list[str] = []
    for tp in tps:
        skip = (f"tp {tp} > the {gpus} GPUs here" if cuda and tp > gpus else None) or divisibility_problem(cfg, tp)
        if skip:
            print(f"tp {tp}: skipped: {skip}")
            notes.append(f"tp {tp} skipped: {skip}")
            continue
        print(f"tp {tp}: {tp} process{'es' if tp > 1 else ''}", flush=True)
        result = spawn(tp, opts)
        rows += result.get("rows", [])
        allreduce += result.get("allreduce", [])
        notes += result.get("notes", [])
        if "failed" in result:  # rows for what the dead workers did not reach
            notes.append(f"tp {tp} workers failed: {result['failed']}")
            print(f"tp {tp}: workers failed: {result['failed']}")
            done = {(r["batch"], r["driver"]) for r in rows if r["tp"] == tp}
            for batch in batches:
                for d in (["tp1"] if tp == 1 else ["nccl", "symm"]):
                    driver = driver_label(d, args.compile, cuda)
                    if (batch, driver) not in done:
                        rows.append({"model": label, "tp": tp, "batch": batch, "context": args.context,
                                     "driver": driver, "us_per_step": None, "sdpa_backend": None,
                                     "weight_bytes_per_gpu": weight_bytes(cfg, tp)["streamed"],
                                     "error": f"workers failed: {result['failed']}"})
    report = {
        "gpu": torch.cuda.get_device_name(0) if cuda and gpus else "CPU",
        "gpus": gpus,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "nccl": nccl_version(),
        "model": label,
        "settings": {"context": args.context, "cache_len": cache_len(args.context), "steps": args.steps,
                     "repeats": args.repeats, "allreduce_repeats": args.allreduce_repeats,
                     "calls_per_graph": CALLS_PER_GRAPH, "dtype": "bfloat16" if cuda else "float32 (CPU smoke test)",
                     "compile": args.compile, "layers": cfg.layers,
                     "env": {k: os.environ.get(k) for k in (*tp_step.NO_MULTICAST, "TORCH_SYMMMEM",
                                                             "TORCH_SYMMMEM_IMPLICIT_POOL")}},
        "definitions": {
            "us_per_step": "one CUDA-graph replay of the whole step (all layers, LM head, gather, argmax): per repeat "
                           "the slowest rank's (elapsed between CUDA events / steps), median over repeats",
            "weight_bytes_per_gpu": "weights one step reads on each rank: every layer's shard, the norms and the "
                                    "LM head's vocab/tp rows (not the embedding table, of which it reads batch rows)",
            "us_per_call": f"{CALLS_PER_GRAPH} back-to-back all-reduces in one graph, the slowest rank's replay / "
                           f"{CALLS_PER_GRAPH}, median over allreduce_repeats",
            "drivers": {"nccl": "torch.distributed.all_reduce (NCCL, NVLS off)",
                        "symm": "torch.ops.symm_mem.one_shot_all_reduce_out (symmetric memory, no multicast; "
                                "allocation backend in symm_backend: CUDA preferred, NVSHMEM the fallback)",
                        "all-gather of the logits": "NCCL in both"},
            "allreduce drivers": AR_DRIVERS},
        "notes": notes,
        "rows": rows,
        "allreduce": allreduce,
    }
    print_table(report)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def print_table(report: dict[str, Any]) -> None:
    where = f"{report['gpus']}x {report['gpu']}" if report["gpus"] else report["gpu"]
    print(f"\n{report['model']} on {where} (torch {report['torch']}, NCCL "
          f"{report['nccl']}), context {report['settings']['context']}:")
    print(f"  {'tp':>3} {'batch':>5}  {'driver':40} {'us/step':>10}  sdpa / error")
    for r in report["rows"]:
        us = f"{r['us_per_step']:10.1f}" if r["us_per_step"] is not None else f"{'-':>10}"
        backend = f" (symm: {r['symm_backend']})" if r.get("symm_backend") and not r.get("error") else ""
        print(f"  {r['tp']:>3} {r['batch']:>5}  {r['driver']:40} {us}  {r.get('error') or r['sdpa_backend']}{backend}")
    if report["allreduce"]:
        print(f"  all-reduce, us per call ({CALLS_PER_GRAPH} calls per graph):")
        for r in report["allreduce"]:
            us = f"{r['us_per_call']:8.2f}" if r["us_per_call"] is not None else f"{'-':>8} {r.get('error')}"
            print(f"    tp {r['tp']} {r['driver']:13} {r['bytes']:>7} B {us}")


if __name__ == "__main__":
    sys.exit(main())
