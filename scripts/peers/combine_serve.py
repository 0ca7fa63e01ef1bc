#!/usr/bin/env python3
"""Merges `python -m baton bench --json` and `serve_peers.py --json` (one trace, one GPU, one call) into
results/<gpu>-<date>-serve-<model>.json and plots latency against load.

    scripts/peers/combine_serve.py BATON.json PEERS.json --model llama-3.2-1b \\
        --out results/h100-<date>-serve-llama-3.2-1b.json --plot serve.png
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from typing import Any, List


def combine(baton: dict, peers: dict, model: str) -> dict[str, Any]:
    if baton["lengths"] != peers["lengths"] or baton["trace_seed"] != peers["trace_seed"]:
        raise SystemExit("combine_serve: the two files ran different traces (lengths, trace_seed)")
    return {"model": model, "gpu": peers["gpu"], "date": peers["date"], "torch": peers["torch"],
            "lengths": baton["lengths"],
            "trace_seed": baton["trace_seed"], "max_batch": baton["max_batch"],
            "baton": {k: baton[k] for k in ("engine", "max_tokens_per_step")},
            "rows": baton["rows"] + peers["rows"]}


def plot(data: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drivers: List[str] = list(dict.fromkeys(r["driver"] for r in data["rows"]))
    rates = sorted({r["rate"] for r in data["rows"] if r["rate"] != "inf"})
    position = {rate: i for i, rate in enumerate(rates)} | {"inf": len(rates)}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for color, driver in enumerate(drivers):
        color = f"C{color}"
        rows = sorted((r for r in data["rows"] if r["driver"] == driver), key=lambda r: position[r["rate"]])
        x = [position[r["rate"]] for r in rows]
        axes[0].plot(x, [r["ttft_p50_ms"] for r in rows], marker="o", label=f"{driver} p50", color=color)
        axes[0].plot(x, [r["ttft_p99_ms"] for r in rows], marker="x", linestyle="--", label=f"{driver} p99", color=color)
        axes[1].plot(x, [r["tpot_p50_ms"] for r in rows], marker="o", label=f"{driver} p50", color=color)
        axes[1].plot(x, [r["tpot_p99_ms"] for r in rows], marker="x", linestyle="--", label=f"{driver} p99", color=color)
        axes[2].plot(x, [r["output_tokens_per_s"] for r in rows], marker="o", label=driver, color=color)
    for ax, title in zip(axes, ("time to first token (ms)", "time per output token (ms)", "output tokens/s")):
        ax.set_xticks(range(len(rates) + 1), [f"{r:g}" for r in rates] + ["all at once"])
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].legend(fontsize=8)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Serving {data['model']} on {data['gpu']}: {data['lengths']} lengths, "
                 f"max batch {data['max_batch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baton", type=pathlib.Path)
    parser.add_argument("peers", type=pathlib.Path)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--plot", type=pathlib.Path)
    args = parser.parse_args(argv)
    data = combine(json.loads(args.baton.read_text()), json.loads(args.peers.read_text()), args.model)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    if args.plot:
        plot(data, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
