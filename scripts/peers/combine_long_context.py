#!/usr/bin/env python3
"""One long-context results file: Baton's long_context sample and the PyTorch peer, each beside the floor.

Reads Baton's `long_context --json` report and one or more long_context_peers.py
--json reports from the same GPU and writes --out (by convention
results/<gpu>-<date>-long-context-<model>.json) with rows {"model", "batch",
"context", "driver", "us_per_step", "floor_us", "over_floor"}: Baton's rows as
the sample wrote them (kv_pool_pages kept), then each peer row with the floor of
Baton's row at the same batch and context. The floor is Baton's (weights + the
KV cache at the measured steps' mean context, over the better of its two
measured HBM bandwidths: samples/long_context/main.cc), so every driver at a
point is divided by the same number. A peer row at a point Baton did not run is
an error (--skip-unmatched leaves it out instead, listed under left_out); a
peer row skipped for memory is listed under skipped. Both inputs' params and
devices are kept under "baton" and "peers".

    scripts/peers/combine_long_context.py --baton $OUT/long-context.json --peer $OUT/long-context-peer.json \\
        --out results/h100-<date>-long-context-llama-3.2-1b.json
    scripts/peers/combine_long_context.py --baton b.json --peer p-b1.json p-b8.json --out /tmp/x.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Any

ROW_KEYS = ("model", "batch", "context", "driver", "us_per_step", "floor_us", "over_floor")
BATON_PREFIX = "Baton "  # the sample's drivers: "Baton tail", "Baton conditional", "Baton dp"


class CombineError(RuntimeError):
    pass


def device_name(report: dict[str, Any]) -> str:
    """The GPU's name: the samples' report holds a device object, the peer's a string."""
    device = report.get("device")
    return str(device.get("name", "") if isinstance(device, dict) else device or "")


def gpu_short(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; '' where the name says no GPU model."""
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return m.group(1) if m else ""


def combine(baton: dict[str, Any], peers: list[dict[str, Any]], model: str | None = None,
            skip_unmatched: bool = False) -> dict[str, Any]:
    if baton.get("sample") not in (None, "long_context"):
        raise CombineError(f"the Baton file is the {baton.get('sample')!r} sample's, not long_context's")
    for i, p in enumerate(peers):
        if p.get("sample") != "long_context_peers":
            raise CombineError(f"peer file {i + 1} is not a long_context_peers.py report (sample "
                               f"{p.get('sample')!r})")
        if p.get("params", {}).get("smoke_test"):
            raise CombineError(f"peer file {i + 1} is a CPU smoke test, not a measurement")
    # The floor divides by Baton's bandwidth on its GPU: a peer from another GPU model would be compared
    # with a floor it was never held to. (A blank name, as some sample reports have, cannot be checked.)
    gpu_b = gpu_short(device_name(baton))
    for i, p in enumerate(peers):
        gpu_p = gpu_short(device_name(p))
        if gpu_b and gpu_p and gpu_b != gpu_p:
            raise CombineError(f"Baton ran on {device_name(baton)!r}, peer file {i + 1} on {device_name(p)!r}: "
                               "one GPU model, both")
    baton_model = baton.get("params", {}).get("model")
    peer_models = {p.get("params", {}).get("model") for p in peers} - {None}
    if model is None:  # --model relabels every row; without it the labels must agree
        model = baton_model
        if not model:
            raise CombineError("the Baton file names no params.model; pass --model")
        if peer_models - {model}:
            raise CombineError(f"models differ: Baton {model!r}, peers {sorted(peer_models)} "
                               "(--model LABEL relabels both, if they ran the same checkpoint)")

    rows: list[dict[str, Any]] = []
    floors: dict[tuple[int, int], float] = {}
    for r in baton.get("rows", []):
        if not str(r.get("driver", "")).startswith(BATON_PREFIX):
            raise CombineError(f"Baton's row driver {r.get('driver')!r} does not start with {BATON_PREFIX!r}")
        key = (int(r["batch"]), int(r["context"]))
        if key in floors and abs(floors[key] - r["floor_us"]) > 1e-6 * floors[key]:
            raise CombineError(f"Baton's rows at batch {key[0]}, context {key[1]} have different floors")
        floors[key] = float(r["floor_us"])
        extra = {k: v for k, v in r.items() if k not in ROW_KEYS}
        rows.append({**{k: r.get(k) for k in ROW_KEYS}, "model": model, **extra})
    if not floors:
        raise CombineError("the Baton file has no rows")

    skipped, left_out = [], []
    for p in peers:
        for r in p.get("rows", []):
            key = (int(r["batch"]), int(r["context"]))
            if r.get("us_per_step") is None:
                skipped.append({"batch": key[0], "context": key[1], "driver": r.get("driver"),
                                "skipped": r.get("skipped", "no time")})
                continue
            if key not in floors:
                if skip_unmatched:
                    left_out.append({"batch": key[0], "context": key[1], "driver": r["driver"],
                                     "us_per_step": r["us_per_step"], "why": "no Baton row at this point"})
                    continue
                have = ", ".join(f"b{b} c{c}" for b, c in sorted(floors))
                raise CombineError(f"peer row {r['driver']!r} at batch {key[0]}, context {key[1]}: Baton has no "
                                   f"row there to take the floor from (it has {have}); run both on the same grid, "
                                   "or pass --skip-unmatched")
            floor = floors[key]
            extra = {k: v for k, v in r.items() if k not in ROW_KEYS}
            rows.append({"model": model, "batch": key[0], "context": key[1], "driver": r["driver"],
                         "us_per_step": r["us_per_step"], "floor_us": floor,
                         "over_floor": r["us_per_step"] / floor, **extra})
    rows.sort(key=lambda r: (r["batch"], r["context"], not r["driver"].startswith(BATON_PREFIX), r["us_per_step"]))
    new_tokens = {baton.get("params", {}).get("new_tokens")} | {p.get("params", {}).get("new_tokens") for p in peers}
    date = str(baton.get("date", ""))[:10] or str(peers[0].get("date", ""))[:10]
    return {
        "sample": "long_context_combined",
        "model": model,
        "gpu": gpu_b or gpu_short(device_name(peers[0])),
        "gpu_name": device_name(baton) or device_name(peers[0]),
        "date": date,
        "baton": {k: baton.get(k) for k in ("date", "device", "params", "passed", "failures")},
        "peers": [{k: p.get(k) for k in ("date", "device", "torch", "transformers", "checkpoint", "params",
                                          "checks", "complete")} for p in peers],
        "definitions": {
            "us_per_step": "Baton: the device step clock over the full-batch decode steps (baton.params.timing); "
                           "peer: CUDA events around each replay of the compiled step's CUDA graph "
                           "(peers[].params.timing); both the median step of a run, median of the runs",
            "floor_us": "Baton's: (weight bytes + the batch's KV cache at the measured steps' mean context) / the "
                        "better of baton.params.hbm_read_gbps and hbm_copy_gbps; a peer row takes Baton's at its "
                        "batch and context (the peer's own steps sit at context + new_tokens / 2, Baton's a few "
                        "tokens later: those it generated while the batch's prompts were read)",
            "over_floor": "us_per_step / floor_us",
        },
        "new_tokens_differ": len(new_tokens - {None}) > 1,
        "skipped": skipped,
        "left_out": left_out,
        "rows": rows,
    }


def print_table(out: dict[str, Any]) -> None:
    """Per batch and context: the floor, then each driver's µs per step and its multiple of the floor."""
    width = max(len(r["driver"]) for r in out["rows"])
    print(f"{'batch':>5} {'context':>8} {'floor us':>9}  {'driver':{width}} {'us/step':>9} {'x floor':>8}")
    last = None
    for r in out["rows"]:
        point = (r["batch"], r["context"])
        lead = f"{r['batch']:>5} {r['context']:>8} {r['floor_us']:>9.1f}" if point != last else " " * 24
        print(f"{lead}  {r['driver']:{width}} {r['us_per_step']:>9.1f} {r['over_floor']:>8.2f}")
        last = point
    for s in out["skipped"]:
        print(f"  skipped: b{s['batch']} context {s['context']} {s['driver']}: {s['skipped']}")
    for s in out["left_out"]:
        print(f"  left out: b{s['batch']} context {s['context']} {s['driver']}: {s['why']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baton", required=True, help="Baton's long_context --json report")
    parser.add_argument("--peer", required=True, nargs="+", help="long_context_peers.py --json report(s)")
    parser.add_argument("--out", required=True, help="results/<gpu>-<date>-long-context-<model>.json")
    parser.add_argument("--model", help="the rows' model label (default: the Baton file's params.model)")
    parser.add_argument("--skip-unmatched", action="store_true",
                        help="leave out peer rows at points Baton did not run, instead of failing")
    args = parser.parse_args(argv)
    try:
        baton = json.loads(pathlib.Path(args.baton).read_text())
        peers = [json.loads(pathlib.Path(p).read_text()) for p in args.peer]
        out = combine(baton, peers, args.model, args.skip_unmatched)
    except (CombineError, OSError, KeyError, ValueError, TypeError) as error:
        print(f"combine_long_context: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    print_table(out)
    if any(p.get("complete") is False for p in out["peers"]):
        print("combine_long_context: note: a peer run stopped before its last point (complete: false)",
              file=sys.stderr)
    if out["new_tokens_differ"]:
        print("combine_long_context: note: Baton and the peer timed different new_tokens", file=sys.stderr)
    if out["baton"]["passed"] is False:
        print("combine_long_context: Baton's sample reports passed: false", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
