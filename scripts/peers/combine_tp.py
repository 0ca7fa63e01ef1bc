#!/usr/bin/env python3
"""One results file for issue #42 (tensor parallelism): Baton's tensor_parallel sample beside tp_peers.py.

Reads `tensor_parallel --json` reports (rows {"model", "tp", "batch", "context", "driver", "us_per_step",
"floor_us", "allreduce_us"}, all-reduce rows {"tp", "bytes", "driver", "us_per_call"}, "gpu", "gpus", "date") and
tp_peers.py --json reports from the same machine, and writes {"gpu", "gpus", "date", "model", "rows", "allreduce",
"sources"}: both sets of rows, each PyTorch row with floor_us and allreduce_us copied from Baton's row of the same
model, tp, batch and context (null where Baton has none), so that every row can be read against the same floor.
Prints a markdown table per (model, tp, batch, context): Baton's fastest row, the floor, the fastest PyTorch
row, and their ratios; then the all-reduce latencies side by side.

    scripts/peers/combine_tp.py --baton tp-baton.json --peers tp-peers.json --out results/h100x4-<date>-tp.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

KEY = ("model", "tp", "batch", "context")
COPIED = ("floor_us", "allreduce_us")  # Baton's per-(model, tp, batch, context) facts, given to the peer rows


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in KEY)


def load(paths: list[str]) -> list[dict[str, Any]]:
    reports = []
    for path in paths:
        try:
            reports.append(json.loads(pathlib.Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"error: {path}: {error}") from None
        if not isinstance(reports[-1].get("rows"), list):
            raise SystemExit(f"error: {path}: no top-level 'rows' list")
    return reports


def one_or_list(values: list[Any]) -> Any:
    """A field every report agrees on as itself; differing values as a list (in the order met)."""
    seen: list[Any] = []
    for v in values:  # by equality: settings and notes are dicts and lists
        if v is not None and v not in seen:
            seen.append(v)
    return seen[0] if len(seen) == 1 else (seen or None)


def baton_report(rep: dict[str, Any]) -> dict[str, Any]:
    """A samples/common Report (tensor_parallel or all_reduce --json) with the keys the peers' reports use: gpu from
    its device, gpus from its parameters, the date's day; an all_reduce report's rows become all-reduce rows (Baton's
    and the NCCL it measured beside it in the same call)."""
    out = dict(rep)
    device, params = rep.get("device") or {}, rep.get("params") or {}
    out.setdefault("gpu", device.get("name"))
    out.setdefault("gpus", params.get("gpus"))
    if isinstance(out.get("date"), str):
        out["date"] = out["date"][:10]
    if rep.get("sample") == "all_reduce":
        out["allreduce"] = [
            {"tp": r["ranks"], "bytes": r["bytes"], "driver": driver, "us_per_call": r.get(field)}
            for r in rep["rows"] for driver, field in (("baton", "baton_us"), ("nccl (all_reduce sample)", "nccl_us"))
            if r.get(field) is not None]
        out["rows"] = []
    return out


def combine(baton: list[dict[str, Any]], peers: list[dict[str, Any]], sources: dict[str, list[str]]) -> dict[str, Any]:
    baton = [baton_report(rep) for rep in baton]
    baton_rows = [dict(r, source="baton") for rep in baton for r in rep["rows"]]
    facts: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in baton_rows:  # the first Baton row of a key with a value gives it (Baton's drivers share the floor)
        f = facts.setdefault(key(r), {})
        for k in COPIED:
            if f.get(k) is None and r.get(k) is not None:
                f[k] = r[k]
    peer_rows = []
    unmatched = set()
    for rep in peers:
        for r in rep["rows"]:
            f = facts.get(key(r))
            if f is None:
                unmatched.add(key(r))
            peer_rows.append(dict(r, source="pytorch", **{k: (f or {}).get(k) for k in COPIED}))
    for k in sorted(unmatched, key=str):
        print(f"note: no Baton row for model {k[0]} tp {k[1]} batch {k[2]} context {k[3]}: the PyTorch row's "
              f"floor_us and allreduce_us are null", file=sys.stderr)
    gpus = [rep.get("gpu") for rep in baton + peers]
    if len({g for g in gpus if g}) > 1:
        print(f"warning: the reports come from different GPUs ({sorted({g for g in gpus if g})}): "
              "the rows are not comparable", file=sys.stderr)
    allreduce = ([dict(r, source="baton") for rep in baton for r in rep.get("allreduce", [])]
                 + [dict(r, source="pytorch") for rep in peers for r in rep.get("allreduce", [])])
    models = [r.get("model") for r in baton_rows + peer_rows]
    return {
        "gpu": one_or_list([rep.get("gpu") for rep in baton] or gpus),
        "gpus": one_or_list([rep.get("gpus") for rep in baton + peers]),
        "date": one_or_list([rep.get("date") for rep in baton] + [rep.get("date") for rep in peers]),
        "model": one_or_list(models),
        "peers": {k: one_or_list([rep.get(k) for rep in peers]) for k in ("torch", "nccl", "settings", "notes")},
        "definitions": {
            "us_per_step": "one decode step of the whole model on tp GPUs, the slowest rank's (each source's own "
                           "report says how it was timed)",
            "floor_us and allreduce_us": "Baton's (tensor_parallel), copied to the PyTorch rows of the same "
                                         "model, tp, batch and context; null where Baton has no such row",
        },
        "rows": sorted(baton_rows + peer_rows, key=lambda r: (str(r.get("model")), r.get("tp", 0), r.get("batch", 0),
                                                             r.get("context") or 0, r.get("source"),
                                                             r.get("us_per_step") or float("inf"))),
        "allreduce": sorted(allreduce, key=lambda r: (r.get("tp", 0), r.get("bytes", 0), r.get("source"))),
        "sources": sources,
    }


def fastest(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    timed = [r for r in rows if isinstance(r.get("us_per_step"), (int, float))]
    return min(timed, key=lambda r: r["us_per_step"]) if timed else None


def fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def markdown(out: dict[str, Any]) -> str:
    lines = ["| model | tp | batch | Baton µs | floor µs | Baton/floor | best PyTorch µs | PyTorch/Baton "
             "| Baton driver | PyTorch driver |", "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    keys = sorted({key(r) for r in out["rows"]}, key=lambda k: (str(k[0]), k[1] or 0, k[2] or 0, k[3] or 0))
    contexts = {k[3] for k in keys}
    for k in keys:
        rows = [r for r in out["rows"] if key(r) == k]
        b = fastest([r for r in rows if r["source"] == "baton"])
        p = fastest([r for r in rows if r["source"] == "pytorch"])
        floor = next((r.get("floor_us") for r in rows if r.get("floor_us") is not None), None)
        b_us, p_us = (b or {}).get("us_per_step"), (p or {}).get("us_per_step")
        model = k[0] if len(contexts) == 1 else f"{k[0]} (context {k[3]})"
        lines.append(f"| {model} | {k[1]} | {k[2]} | {fmt(b_us)} | {fmt(floor)} | {fmt(ratio(b_us, floor), 2)} | "
                     f"{fmt(p_us)} | {fmt(ratio(p_us, b_us), 2)} | {(b or {}).get('driver', '–')} | "
                     f"{(p or {}).get('driver', '–')} |")
    ar = out["allreduce"]
    drivers = list(dict.fromkeys(r["driver"] for r in ar))
    if ar:
        lines += ["", "| tp | bytes | " + " | ".join(f"{d} µs" for d in drivers) + " |",
                  "|---:|---:|" + "---:|" * len(drivers)]
        for tp, size in sorted({(r["tp"], r["bytes"]) for r in ar}):
            cells = []
            for d in drivers:
                us = [r.get("us_per_call") for r in ar if (r["tp"], r["bytes"], r["driver"]) == (tp, size, d)]
                cells.append(fmt(next((u for u in us if u is not None), None), 2))
            lines.append(f"| {tp} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baton", nargs="+", required=True,
                        help="tensor_parallel --json reports (and all_reduce --json reports: the all-reduce rows)")
    parser.add_argument("--peers", nargs="+", required=True, help="tp_peers.py --json reports")
    parser.add_argument("--out", required=True, help="the combined results file (results/<name>.json)")
    args = parser.parse_args(argv)
    out = combine(load(args.baton), load(args.peers),
                  {"baton": [pathlib.Path(p).name for p in args.baton],
                   "peers": [pathlib.Path(p).name for p in args.peers]})
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
