#!/usr/bin/env python3
"""PNG plot from a combine_long_context.py file (results/<gpu>-<date>-long-context-<model>.json).

    scripts/peers/plot_long_context.py --json results/h100-<date>-long-context-llama-3.2-1b.json \\
        --out docs/long-context-llama-3.2-1b.png

µs per decode step against context (log2 axis), one panel per batch: a line for each of Baton's
drivers (solid, circles), each PyTorch peer (solid, squares) and the HBM floor (dashed, black:
weights + KV cache read once over the measured bandwidth). The values are the file's rows as
they are; how each was timed is in the file (definitions, baton.params, peers[].params).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # no display on the machines that make these
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

FLOOR = "floor: weights + KV cache once / HBM bandwidth"


def _style(driver: str) -> dict:
    if driver == FLOOR:
        return {"linestyle": "--", "color": "black", "marker": None}
    if driver.startswith("Baton"):
        return {"linestyle": "-", "marker": "o"}
    return {"linestyle": "-", "marker": "s"}


def plot(data: dict, path: pathlib.Path) -> None:
    rows = [r for r in data["rows"] if r.get("us_per_step") is not None]
    if not rows:
        raise SystemExit("plot_long_context: the file has no rows with us_per_step")
    batches = sorted({r["batch"] for r in rows})
    # Baton's drivers first, then the peers, the floor last: the legend reads from the runtime to the bound.
    drivers = sorted({r["driver"] for r in rows}, key=lambda d: (not d.startswith("Baton"), d)) + [FLOOR]
    fig, axes = plt.subplots(1, len(batches), figsize=(6.2 * len(batches), 4.8), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        at = [r for r in rows if r["batch"] == batch]
        for driver in drivers:
            if driver == FLOOR:  # one floor per context (every driver's row there carries the same one)
                points = sorted({r["context"]: r["floor_us"] for r in at if r.get("floor_us")}.items())
            else:
                points = sorted((r["context"], r["us_per_step"]) for r in at if r["driver"] == driver)
            if points:
                ax.plot([c for c, _ in points], [u for _, u in points], label=driver, **_style(driver))
        contexts = sorted({r["context"] for r in at})
        ax.set_xscale("log", base=2)
        ax.set_xticks(contexts, [f"{c // 1024}K" if c % 1024 == 0 else str(c) for c in contexts])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")  # the steps span 1 ms to tens of ms: ratios read as distances
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(int(v))[0] in "25" else ""))
        ax.set_xlabel("context (prompt tokens per sequence)")
        ax.set_title(f"batch {batch}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("µs per decode step")
    handles: dict = {}
    for ax in axes[0]:  # the union of every panel's lines, each once
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    labels = [d for d in drivers if d in handles]
    fig.legend([handles[d] for d in labels], labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8,
               frameon=False)
    fig.suptitle(f"{data['model']} bf16 decode step at long contexts on one {data.get('gpu_name') or data['gpu']} "
                 f"({data['date']})")
    fig.tight_layout(rect=(0, 0.06 + 0.035 * ((len(labels) - 1) // 3), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, help="a combine_long_context.py file")
    parser.add_argument("--out", required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    data = json.loads(pathlib.Path(args.json).read_text())
    if data.get("sample") != "long_context_combined":
        print(f"plot_long_context: {args.json} is not a combine_long_context.py file", file=sys.stderr)
        return 2
    plot(data, pathlib.Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
