#!/usr/bin/env python3
"""PNG plot from a combine_tp.py file: µs per decode step against tp, one line per (driver, batch), and Baton's
floor per batch dashed; one panel per model (and context) in the file.

    scripts/peers/plot_tp.py --results results/h100x4-<date>-tp.json --out /tmp/tp-llama-3.1-8b.png
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = "osD^v<>p*"


def panels(rows: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return sorted({(str(r.get("model")), r.get("context")) for r in rows}, key=lambda p: (p[0], p[1] or 0))


def plot(data: dict[str, Any], path: pathlib.Path) -> None:
    rows = [r for r in data["rows"] if isinstance(r.get("tp"), int)]
    groups = panels(rows)
    if not groups:
        raise SystemExit("error: no rows with a tp to plot")
    fig, axes = plt.subplots(1, len(groups), figsize=(7.5 * len(groups), 4.8), squeeze=False)
    drivers = list(dict.fromkeys(r["driver"] for r in rows))
    colours = {d: f"C{i % 10}" for i, d in enumerate(drivers)}
    batches = sorted({r["batch"] for r in rows})
    marker = {b: MARKERS[i % len(MARKERS)] for i, b in enumerate(batches)}
    for ax, (model, context) in zip(axes[0], groups):
        mine = [r for r in rows if str(r.get("model")) == model and r.get("context") == context]
        for driver in drivers:
            for batch in batches:
                points = {r["tp"]: r["us_per_step"] for r in mine if r["driver"] == driver and r["batch"] == batch
                          and isinstance(r.get("us_per_step"), (int, float))}
                if points:
                    xs = sorted(points)
                    ax.plot(xs, [points[x] for x in xs], "-", color=colours[driver], marker=marker[batch],
                            label=f"{driver}, batch {batch}")
        for batch in batches:  # the floor: one value per tp (Baton's rows and the PyTorch rows copied from them)
            floor = {r["tp"]: r["floor_us"] for r in mine if r["batch"] == batch
                     and isinstance(r.get("floor_us"), (int, float))}
            if floor:
                xs = sorted(floor)
                ax.plot(xs, [floor[x] for x in xs], "--", color="black", marker=marker[batch], alpha=0.6,
                        label=f"floor, batch {batch}")
        tps = sorted({r["tp"] for r in mine})
        ax.set_xscale("log", base=2)
        ax.set_xticks(tps, [str(t) for t in tps])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("tensor-parallel GPUs (tp)")
        ax.set_ylabel("µs per decode step")
        ctx = f", context {context}" if context is not None else ""
        gpu, date = (", ".join(map(str, v)) if isinstance(v, list) else v for v in (data.get("gpu"), data.get("date")))
        ax.set_title(f"{model} bf16 decode step{ctx}\n{gpu or 'unknown GPU'}, {date or ''}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="a combine_tp.py file")
    parser.add_argument("--out", required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    plot(json.loads(pathlib.Path(args.results).read_text()), pathlib.Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
