#!/usr/bin/env python3
"""PNG plots from a combine_results.py file (results/<gpu>-<date>-peers-<model>.json).

    scripts/peers/plot_results.py results/h200-<date>-peers-llama-3.2-1b.json --out-dir docs

writes <out-dir>/peers-<model>-tokens.png (tokens/s against batch for Baton's best engine, its host
loop, each PyTorch peer and the HBM floor) and, when the file has the b1 kernel breakdown,
<out-dir>/peers-<model>-b1-kernels.png (the b1 step's time per kernel kind against what its bytes
would take at the measured read bandwidth).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [  # (label, how to pick the row of a batch): the fastest PyTorch loop (SDPA's native GQA) first
    ("Baton (best engine)", lambda r: r["driver"] in ("Baton tail-launch", "Baton conditional")),
    ("Baton host loop (graph + sync)", lambda r: r["driver"] == "Baton host graph + sync"),
    ("PyTorch compiled + CUDA graph, native GQA, .item() per step",
     lambda r: r["driver"] == "gpt-fast-gqa-compiled+sync"),
    ("PyTorch compiled + CUDA graph, native GQA, no sync", lambda r: r["driver"] == "gpt-fast-gqa-compiled-nosync"),
    ("PyTorch compiled + CUDA graph, K/V repeated per head, .item() per step",
     lambda r: r["driver"] == "gpt-fast-compiled+sync"),
    ("transformers generate (eager)", lambda r: r["driver"] == "transformers-generate"),
    ("HBM floor (weights once per step)", lambda r: r["driver"].startswith("HBM floor")),
]


def plot_tokens(data: dict, path: pathlib.Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, pick in SERIES:
        points = {}
        for r in data["rows"]:
            if pick(r):
                points[r["batch"]] = max(points.get(r["batch"], 0), r["tokens_per_s"])
        if points:
            xs = sorted(points)
            style = "--" if label.startswith("HBM") else "-"
            ax.plot(xs, [points[x] for x in xs], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    batches = sorted({r["batch"] for r in data["rows"]})
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch (concurrent sequences)")
    ax.set_ylabel("tokens/s (decode)")
    ax.set_title(f"{data['model']} bf16 decode on one {data['gpu']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_kernels(data: dict, path: pathlib.Path) -> None:
    kernels = data["b1_kernels_ncu"]["kernels"]
    read = data.get("read_bandwidth_GBps") or data["copy_bandwidth_GBps"]
    labels, spent, floor = [], [], []
    for k in sorted(kernels, key=lambda k: -k["us_each"] * k["launches"]):
        labels.append(f"{k['kernel'].replace('__nv_bfloat16', 'bf16')} grid {k['grid']} x{k['launches']:g}")
        spent.append(k["us_each"] * k["launches"])
        floor.append(k["dram_read_MB_each"] * 1e6 / (read * 1e9) * 1e6 * k["launches"])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.5))
    y = range(len(labels))
    ax.barh(y, spent, label="measured (ncu, each kernel alone)")
    ax.barh(y, floor, height=0.4, label=f"its bytes at {read:.0f} GB/s read")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("us per decode step")
    ax.set_title(f"{data['model']} batch 1: where the step goes ({data['gpu']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--out-dir", default="docs")
    args = parser.parse_args(argv)
    data = json.loads(pathlib.Path(args.results).read_text())
    out = pathlib.Path(args.out_dir)
    plot_tokens(data, out / f"peers-{data['model']}-tokens.png")
    if "b1_kernels_ncu" in data:
        plot_kernels(data, out / f"peers-{data['model']}-b1-kernels.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
