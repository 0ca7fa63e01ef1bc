#!/usr/bin/env python3
"""One results file for issue-style comparisons: Baton's drivers, the PyTorch peers and the HBM floor.

Reads decode_loop --json reports (one or more, e.g. b1/b8 on the GEMV and b32 with --gemm=auto) and
pytorch_peers.py --json reports from the same GPU call, and writes rows
{"model", "batch", "driver", "us_per_step", "tokens_per_s"} plus the floor (weight bytes / the better
of the measured copy and read bandwidths), the targets with whether each is met, and, when given, the
b1 step's kernel breakdown (an ncu --csv of one step, summed by kernel and launch shape).

    scripts/peers/combine_results.py --model llama-3.2-1b --baton dl-b1b8.json dl-b32.json \\
        --peers peers.json --ncu ncu-b1.csv --out results/h200-<date>-peers-llama-3.2-1b.json
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import pathlib
import re
import sys
from typing import Any

# decode_loop's bound row: "... (bound)" (graph replays of the steps the drivers ran, no decision).
BOUND_SUFFIX = "(bound)"
GPUS = ("H100", "H200")
# Targets per model and GPU: ms per step at batch 1 and 8 (the 1B preset), or the step against the HBM floor
# (the 8B preset); b32 against the fastest PyTorch loop that decides every step on the host (any compiled
# "+sync" peer, with or without native GQA or another compile mode).
TARGETS = {"llama-3.2-1b": {"H100": {"b1_ms": 0.90, "b8_ms": 1.0}, "H200": {"b1_ms": 0.70}}}
FLOOR_TARGETS = {"llama-3.1-8b": {"H200": {1: 1.10, 8: 1.10}}}
B32_VS_PEER = ("the fastest PyTorch +sync row", 1.5)


def is_compiled_sync_peer(driver: str) -> bool:
    """A compiled PyTorch peer with a host decision every step (pytorch_peers.py's "+sync" rows: K/V copied per
    query head or SDPA's native GQA, any compile mode)."""
    return driver.startswith("gpt-fast") and driver.endswith("+sync")


ENGINE_OVERHEAD_US = 3.0


def baton_rows(path: pathlib.Path, model: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    report = json.loads(path.read_text())
    rows, floors, engines = [], {}, set()
    params = report.get("params", {})
    # --gemm auto names the path each batch ran: Baton's GEMV up to --gemv_max_bucket (8 before the flag
    # existed), the wide GEMV up to --wide_gemv_max_bucket, then cuBLASLt.
    gemm = params.get("gemm")
    narrow = int(params.get("gemv_max_bucket", 8))
    wide = int(params.get("wide_gemv_max_bucket") or 0)
    for r in report["rows"]:
        batch = int(re.search(r"\bb(\d+)$", r["scenario"]).group(1))
        path = gemm
        if gemm == "auto":
            path = ("auto: GEMV" if batch <= narrow else "auto: wide GEMV" if batch <= wide
                    else "auto: cuBLASLt")
        if r["driver"].endswith(BOUND_SUFFIX):
            floors[batch] = r["hbm_floor_us"]
        # decode_loop names its engines "Baton ..."; the host loop and the bound get the prefix here.
        if r["driver"].startswith("Baton"):
            driver = r["driver"]
            engines.add(driver)
        else:
            driver = f"Baton {r['driver']}"
        # decode_loop's tokens/s counts the tokens its requests produced (fewer than batch per step
        # while continuous batching refills slots); the replays' row has none: batch per step.
        tokens_per_s = r.get("tokens_per_s", batch * 1e6 / r["step_us"])
        row = {"model": model, "batch": batch, "driver": driver, "us_per_step": round(r["step_us"], 1),
               "tokens_per_s": round(tokens_per_s, 1), "gemm": path}
        for key in ("overhead_us", "same_tokens", "p50_us", "p99_us"):
            if r.get(key) is not None:
                row[key] = r[key]
        rows.append(row)
    info = {"date": report.get("date"), "device": report.get("device"),
            "copy_bandwidth_GBps": params.get("copy_bandwidth_GBps"),
            "read_bandwidth_GBps": params.get("read_bandwidth_GBps"), "floors": floors,
            "engines": engines}
    return rows, info


GEMV_INPUT = {"0": "plain", "1": "SiLU(gate)*up", "2": "RMSNorm", "3": "embedding+RMSNorm"}
GEMV_OUTPUT = {"0": "store", "1": "residual add", "2": "SiLU(gate)*up out"}


def readable(name: str) -> str:
    """gemv_kernel<__nv_bfloat16, 2, 0> -> 'GEMV bf16 (RMSNorm in, store)'."""
    m = re.match(r"gemv_kernel<(\w+), (\d), (\d)>", name)
    if not m:
        return name.replace("__nv_bfloat16", "bf16").replace("__half", "fp16")
    dtype = "bf16" if "bfloat16" in m.group(1) else "fp16"
    return f"GEMV {dtype} ({GEMV_INPUT[m.group(2)]} in, {GEMV_OUTPUT[m.group(3)]})"


def kernel_breakdown(path: pathlib.Path, read_gbps: float) -> list[dict[str, Any]]:
    """Sums an ncu --csv (one decode step or more) by kernel name and grid."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    kernels: dict[int, dict[str, str]] = collections.OrderedDict()
    for r in csv.DictReader(lines[start:]):
        k = kernels.setdefault(int(r["ID"]), {"name": r["Kernel Name"]})
        k[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    groups: dict[tuple[str, str], list[float]] = collections.OrderedDict()
    for k in kernels.values():
        name = readable(re.sub(r"\(.*$", "", k["name"]).replace("void ", "").split("::")[-1])
        g = groups.setdefault((name, k.get("launch__grid_size", "?")), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += float(k["gpu__time_duration.sum"]) * 1e-3  # ns -> us
        g[2] += float(k["dram__bytes_read.sum"])
    out = []
    for (name, grid), (n, us, read) in groups.items():
        gbps = read / (us * 1e-6) / 1e9
        out.append({"kernel": name, "grid": grid, "launches": n, "us_each": round(us / n, 2),
                    "dram_read_MB_each": round(read / n / 1e6, 3), "GBps": round(gbps),
                    "fraction_of_read_bandwidth": round(gbps / read_gbps, 3)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--baton", nargs="+", required=True, help="decode_loop --json reports")
    parser.add_argument("--peers", nargs="*", default=[],
                        help="pytorch_peers.py --json reports (none: Baton's rows and the floor only)")
    parser.add_argument("--ncu", help="ncu --csv of the b1 step (gpu__time_duration.sum, dram__bytes_read.sum)")
    parser.add_argument("--ncu-steps", type=float, default=1.0, help="decode steps the ncu capture covers")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"floors": {}}
    engines: set[str] = set()  # Baton's engine rows' drivers
    for path in args.baton:
        r, i = baton_rows(pathlib.Path(path), args.model)
        rows += r
        info["floors"].update(i.pop("floors"))
        engines |= i.pop("engines")
        info.update({k: v for k, v in i.items() if v is not None})
    peers_meta = {}
    for path in args.peers:
        p = json.loads(pathlib.Path(path).read_text())
        rows += [dict(r, model=args.model) for r in p["rows"]]
        peers_meta = {k: p[k] for k in ("torch", "transformers", "settings") if k in p}
    for batch, floor in sorted(info["floors"].items()):
        rows.append({"model": args.model, "batch": batch, "driver": "HBM floor (weights once per step)",
                     "us_per_step": round(floor, 1), "tokens_per_s": round(batch * 1e6 / floor, 1)})
    rows.sort(key=lambda r: (r["batch"], r["us_per_step"]))

    device = json.dumps(info.get("device"))
    gpu = next((name for name in GPUS if name in device), "unknown GPU")
    def best(batch: int) -> dict[str, Any] | None:
        cands = [r for r in rows if r["batch"] == batch and r["driver"] in engines]
        return min(cands, key=lambda r: r["us_per_step"]) if cands else None
    targets = []
    for key, limit in TARGETS.get(args.model, {}).get(gpu, {}).items():
        batch = int(key[1:].split("_")[0])
        b = best(batch)
        if b:
            targets.append({"target": f"{gpu} batch {batch} <= {limit} ms/step", "engine": b["driver"],
                            "measured_ms": round(b["us_per_step"] / 1000, 3), "met": b["us_per_step"] <= limit * 1000})
    for batch, limit in FLOOR_TARGETS.get(args.model, {}).get(gpu, {}).items():
        b, floor = best(batch), info["floors"].get(batch)
        if b and floor:
            ratio = b["us_per_step"] / floor
            targets.append({"target": f"{gpu} batch {batch} <= {limit}x the HBM floor", "engine": b["driver"],
                            "measured_ratio": round(ratio, 3), "met": ratio <= limit})
    peer = sorted((r for r in rows if r["batch"] == 32 and is_compiled_sync_peer(r["driver"])),
                  key=lambda r: r["us_per_step"])
    b32 = best(32)
    if peer and b32:
        ratio = b32["tokens_per_s"] / peer[0]["tokens_per_s"]
        targets.append({"target": f"batch 32 >= {B32_VS_PEER[1]}x {B32_VS_PEER[0]}'s tokens/s", "engine": b32["driver"],
                        "peer": peer[0]["driver"], "measured_ratio": round(ratio, 3), "met": ratio >= B32_VS_PEER[1]})
    # The engines only: the host loop's overhead (a sync per step) is what they remove.
    engine_rows = [r for r in rows if r["driver"] in engines and "overhead_us" in r]
    if engine_rows:
        worst = max(r["overhead_us"] for r in engine_rows)
        targets.append({"target": f"engines' overhead <= {ENGINE_OVERHEAD_US} us per step and the same tokens",
                        "measured_worst_overhead_us": round(worst, 2),
                        "met": worst <= ENGINE_OVERHEAD_US and all(r.get("same_tokens", True) for r in engine_rows)})
    out: dict[str, Any] = {
        "model": args.model, "gpu": gpu, **info, "peers": peers_meta, "targets": targets,
        "definitions": {
            "us_per_step": "Baton: mean device step time over the run (decode_loop); peers: see peers.settings",
            "tokens_per_s": "Baton: tokens its requests produced per second (decode_loop); peers and the floor: "
                            "batch / step time",
            "overhead_us": "step time minus the bound row: graph replays of the same steps (batch sizes, "
                           "positions) with no decision (decode_loop)",
        },
        "rows": rows}
    if args.ncu:
        read = info.get("read_bandwidth_GBps") or info.get("copy_bandwidth_GBps")
        kernels = kernel_breakdown(pathlib.Path(args.ncu), read)
        for k in kernels:
            k["launches"] = k["launches"] / args.ncu_steps
        out["b1_kernels_ncu"] = {"note": "ncu --clock-control none, each kernel alone (no PDL overlap), "
                                         "per step; the step in a graph overlaps kernel boundaries",
                                 "kernels": kernels}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"  b{r['batch']:<3} {r['driver']:42s} {r['us_per_step']:10.1f} us/step {r['tokens_per_s']:12,.0f} tokens/s")
    for t in targets:
        print(f"  target: {t['target']}: {'met' if t['met'] else 'MISSED'} ({t})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
