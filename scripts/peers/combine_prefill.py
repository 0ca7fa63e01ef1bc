#!/usr/bin/env python3
"""One prefill results file per GPU call: Baton's prefill sample, the PyTorch peers and the floor.

Reads Baton's `prefill --json` report and prefill_peers.py's --json report from the
same GPU call and writes results/<gpu>-<date>[tag]-prefill-<model>.json (the
date is Baton's report's) with rows {"model", "batch", "prompt_tokens",
"new_tokens", "driver", "ttft_ms", "request_ms"}: Baton's drivers as the sample
timed them (its ttft_ms at batch 8 is the last request's first token), the
peers as prefill_peers.py timed them (its settings are copied), and a "floor"
row per (batch, prompt) whose ttft_ms is the prefill floor (the peers file's
floor_inputs: max(weights once / bandwidth, FLOPs / matmul throughput)). Also
Baton's mixed run and the targets: for the H100 each with whether it is met;
for another GPU the same figures beside, with no target (met: null).

    scripts/peers/combine_prefill.py --baton prefill.json --peers prefill-peers.json            # -> results/
    scripts/peers/combine_prefill.py --baton b.json --peers p.json --tag -rerun --out /tmp/x.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
ROW_KEYS = ("model", "batch", "prompt_tokens", "new_tokens", "driver", "ttft_ms", "request_ms")
BATON_PREFIX = "Baton "  # the sample names its drivers "Baton host loop", "Baton tail-launch", ...
FLOOR = "floor"
# (key, target text, what is measured): targets hold on the H100 only; other GPUs get the figures.
TARGET_GPUS = {"H100"}
PROMPT, NEW_TOKENS, BATCH = 1000, 128, 8
TARGETS = [
    ("b1_ttft", f"b1 {PROMPT}-token prompt: time to first token <= 5 ms", 5.0),
    ("b1_request", f"b1 {PROMPT}-token prompt + {NEW_TOKENS} new tokens: request <= 150 ms", 150.0),
    ("b8_last_first_token", f"{BATCH} x {PROMPT}-token prompts together: the last first token <= 40 ms", 40.0),
    ("mixed_itl_p99", "mixed run: decode inter-token latency p99 <= 3x its steady decode step", 3.0),
]


class CombineError(RuntimeError):
    pass


def gpu_short(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'."""
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    if not m:
        raise CombineError(f"cannot tell the GPU model from {name!r}")
    return m.group(1)


def floor_of(inputs: dict[str, Any], batch: int, prompt: int) -> float:
    """The prefill floor in ms of a shape, from the peers file's floor_inputs (its own formula)."""
    for s in inputs.get("shapes", []):
        if s["batch"] == batch and s["prompt_tokens"] == prompt:
            return s["floor_ms"]
    flops = (2 * inputs["non_embedding_parameters"] * batch * prompt + 2 * inputs["lm_head_parameters"] * batch
             + 4 * inputs["layers"] * inputs["heads"] * inputs["head_dim"] * batch * prompt * (prompt + 1) // 2)
    return round(max(flops / (inputs["matmul_tflops"] * 1e12),
                     inputs["weight_bytes"] / (inputs["bandwidth_GBps"] * 1e9)) * 1e3, 4)


# The drivers the targets are about: Baton's engines, the GPU deciding every step (the host loop
# is the baseline they replace; the dynamic-parallelism engine is the fallback).
TARGET_DRIVERS = ("Baton tail-launch", "Baton conditional")


def from_sample_report(report: dict[str, Any]) -> dict[str, Any]:
    """The prefill sample's --json (the samples' common report: device, params, rows of kind
    "request" and "mixed", each with its max_tokens_per_step and max_tokens_without_decodes) in
    this script's Baton shape: the first budget's rows and mixed run, every budget's 1000-token
    tail-launch requests and mixed runs as the budget sweep."""
    rows = report.get("rows", [])

    def budget(r: dict[str, Any]) -> tuple[Any, Any]:
        return r["max_tokens_per_step"], r.get("max_tokens_without_decodes")

    primary = budget(rows[0]) if rows else (None, None)
    main = [{k: v for k, v in r.items() if k != "kind"} for r in rows
            if r.get("kind") == "request" and budget(r) == primary]
    mixed = [r for r in rows if r.get("kind") == "mixed" and budget(r) == primary]
    sweep = [r for r in rows if (r.get("kind") == "mixed" or (r["prompt_tokens"] == PROMPT
                                                               and r["driver"] == "Baton tail-launch"))]
    return {"sample": "prefill", "gpu": report.get("device", {}).get("name", ""),
            "date": str(report.get("date", ""))[:10], "params": {**report.get("params", {}),
                                                                "max_tokens_per_step": primary[0],
                                                                "max_tokens_without_decodes": primary[1]},
            "rows": main, "mixed": mixed[0] if mixed else None, "budget_sweep": sweep,
            "passed": report.get("passed"), "failures": report.get("failures", [])}


def _best(rows: list[dict[str, Any]], key: str, batch: int, prompt: int,
          new_tokens: int | None = None) -> dict[str, Any] | None:
    """Baton's engine with the best `key` at a shape."""
    cands = [r for r in rows if r["driver"] in TARGET_DRIVERS and r["batch"] == batch
             and r["prompt_tokens"] == prompt and r.get(key) is not None
             and (new_tokens is None or r["new_tokens"] == new_tokens)]
    return min(cands, key=lambda r: r[key]) if cands else None


def targets(gpu: str, rows: list[dict[str, Any]], mixed: dict[str, Any] | None) -> list[dict[str, Any]]:
    has = gpu in TARGET_GPUS
    out = []
    for key, text, limit in TARGETS:
        t: dict[str, Any] = {"key": key, "target": text, "gpu_has_target": has}
        if key == "mixed_itl_p99":
            ok = mixed and mixed.get("itl_p99_ms") is not None and mixed.get("steady_step_ms")
            t["measured_ratio"] = round(mixed["itl_p99_ms"] / mixed["steady_step_ms"], 3) if ok else None
            t["limit_ratio"] = limit
            t["driver"] = mixed.get("driver") if mixed else None
            value = t["measured_ratio"]
        else:
            field = "request_ms" if key == "b1_request" else "ttft_ms"
            batch = BATCH if key.startswith("b8") else 1
            r = _best(rows, field, batch, PROMPT, NEW_TOKENS if field == "request_ms" else None)
            t["measured_ms"] = r[field] if r else None
            t["limit_ms"] = limit
            t["driver"] = r["driver"] if r else None
            value = t["measured_ms"]
        t["met"] = (value is not None and value <= limit) if has else None
        out.append(t)
    return out


def combine(baton: dict[str, Any], peers: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    if "device" in baton and "gpu" not in baton:
        baton = from_sample_report(baton)
    if baton.get("sample") not in (None, "prefill"):
        raise CombineError(f"the Baton file is the {baton.get('sample')!r} sample's, not prefill's")
    gpu_b, gpu_p = baton.get("gpu", ""), peers.get("gpu", "")
    if gpu_b != gpu_p:
        raise CombineError(f"the files come from different GPUs ({gpu_b!r} vs {gpu_p!r}): one GPU call, both")
    model = model or baton.get("model") or peers.get("model")
    if peers.get("model") not in (None, model) or baton.get("model") not in (None, model):
        raise CombineError(f"models differ: Baton {baton.get('model')!r}, peers {peers.get('model')!r}")
    gpu = gpu_short(gpu_b)
    rows: list[dict[str, Any]] = []
    for r in baton["rows"]:
        if not r["driver"].startswith(BATON_PREFIX):
            raise CombineError(f"Baton's row driver {r['driver']!r} does not start with {BATON_PREFIX!r}")
        extra = {k: v for k, v in r.items() if k not in ROW_KEYS}
        rows.append({**{k: r.get(k) for k in ROW_KEYS}, "model": model, **extra})
    for r in peers["rows"]:
        rows.append({**{k: r.get(k) for k in ROW_KEYS}, "model": model})
    inputs = peers["floor_inputs"]
    shapes = sorted({(r["batch"], r["prompt_tokens"]) for r in rows})
    for batch, prompt in shapes:
        rows.append({"model": model, "batch": batch, "prompt_tokens": prompt, "new_tokens": None, "driver": FLOOR,
                     "ttft_ms": floor_of(inputs, batch, prompt), "request_ms": None})
    rows.sort(key=lambda r: (r["batch"], r["prompt_tokens"], r["driver"] != FLOOR, r["ttft_ms"] is None,
                             r["ttft_ms"] or 0))
    mixed = baton.get("mixed")
    return {
        "model": model, "gpu": gpu, "gpu_name": gpu_b, "date": baton.get("date") or peers.get("date"),
        "baton": {"params": baton.get("params", {}), "passed": baton.get("passed"), "date": baton.get("date")},
        "peers": {k: peers.get(k) for k in ("date", "torch", "transformers", "settings")},
        "peers_checks": {k: v for k, v in peers.get("checks", {}).items() if not k.startswith("tiny_presets")},
        "floor_inputs": inputs,
        "mixed": mixed,
        "budget_sweep": baton.get("budget_sweep", []),
        "targets": targets(gpu, rows, mixed),
        "definitions": {
            "ttft_ms": "Baton: its prefill sample's time to first token (batch 8: the last request's first token); "
                       "peers: prompt ids on the host to every first token on the host, median (peers.settings); "
                       "floor: max(weight bytes once / bandwidth, prefill FLOPs / matmul throughput) (floor_inputs)",
            "request_ms": "prompt to new_tokens tokens: Baton's sample's request time; the peers' peers.settings",
        },
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baton", required=True, help="Baton's prefill --json report")
    parser.add_argument("--peers", required=True, help="prefill_peers.py --json report of the same GPU call")
    parser.add_argument("--model", help="the rows' model label (default: the files')")
    parser.add_argument("--tag", default="", help="appended to the date in the file name (e.g. b, -rerun)")
    parser.add_argument("--results-dir", default=str(ROOT / "results"), help="default: %(default)s")
    parser.add_argument("--out", help="write here instead of <results-dir>/<gpu>-<date><tag>-prefill-<model>.json")
    args = parser.parse_args(argv)
    try:
        out = combine(json.loads(pathlib.Path(args.baton).read_text()),
                      json.loads(pathlib.Path(args.peers).read_text()), args.model)
    except (CombineError, KeyError, ValueError) as error:
        print(f"combine_prefill: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    path = pathlib.Path(args.out) if args.out else (
        pathlib.Path(args.results_dir) / f"{out['gpu'].lower()}-{out['date']}{args.tag}-prefill-{out['model']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    for r in out["rows"]:
        ttft = "-" if r["ttft_ms"] is None else f"{r['ttft_ms']:9.2f}"
        req = "" if r["request_ms"] is None else f"{r['request_ms']:9.1f}"
        print(f"  b{r['batch']:<2} p{r['prompt_tokens']:<5} {r['driver']:28} ttft {ttft:>9} ms  request {req:>9}")
    for t in out["targets"]:
        value = t.get("measured_ms", t.get("measured_ratio"))
        verdict = "no target here" if t["met"] is None else "met" if t["met"] else "MISSED"
        print(f"  {t['target']}: {value} ({t['driver']}): {verdict}")
    if out["baton"]["passed"] is False:
        print("combine_prefill: Baton's sample reports passed: false", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
