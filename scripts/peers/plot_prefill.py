#!/usr/bin/env python3
"""PNG plot from a combine_prefill.py file (results/<gpu>-<date>-prefill-<model>.json).

    scripts/peers/plot_prefill.py results/h100-<date>-prefill-llama-3.2-1b.json --out-dir docs

writes <out-dir>/prefill-<model>-ttft.png: time to first token against prompt tokens, log-log,
one panel per batch (1 and 8, or --batches), a line per driver (Baton's drivers solid, the
PyTorch peers dashed) and the floor dotted. The values are the file's rows as they are; how each
was timed is in the file (peers.settings, baton.params, definitions).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # no display on the machines that make these
import matplotlib.pyplot as plt  # noqa: E402

FLOOR = "floor"
LABELS = {  # the peers' row names, spelled out on the plot
    "gpt-fast-prefill-graph": "PyTorch: gpt-fast prefill, compiled + CUDA graph",
    "transformers-forward": "transformers forward (eager, sdpa)",
    FLOOR: "floor: max(weights once / bandwidth, FLOPs / matmul rate)",
}


def _style(driver: str) -> dict:
    if driver == FLOOR:
        return {"linestyle": ":", "color": "black", "marker": None}
    if driver.startswith("Baton"):
        return {"linestyle": "-", "marker": "o"}
    return {"linestyle": "--", "marker": "s"}


def plot(data: dict, path: pathlib.Path, batches: list[int]) -> None:
    rows = [r for r in data["rows"] if r.get("ttft_ms") is not None]
    batches = [b for b in batches if any(r["batch"] == b for r in rows)]
    if not batches:
        raise SystemExit(f"plot_prefill: no rows with ttft_ms at batches {batches}")
    # Baton first, then the peers, the floor last: the legend reads from fastest kind to the bound.
    drivers = sorted({r["driver"] for r in rows}, key=lambda d: (d == FLOOR, not d.startswith("Baton"), d))
    fig, axes = plt.subplots(1, len(batches), figsize=(6.2 * len(batches), 4.6), squeeze=False, sharey=True)
    for ax, batch in zip(axes[0], batches):
        for driver in drivers:
            points = sorted((r["prompt_tokens"], r["ttft_ms"]) for r in rows
                            if r["batch"] == batch and r["driver"] == driver)
            if points:
                ax.plot([p for p, _ in points], [t for _, t in points], label=LABELS.get(driver, driver),
                        **_style(driver))
        prompts = sorted({r["prompt_tokens"] for r in rows if r["batch"] == batch})
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(prompts, [str(p) for p in prompts])
        ax.minorticks_off()
        ax.set_xlabel("prompt tokens" + (" (each of the batch's prompts)" if batch > 1 else ""))
        ax.set_title(f"batch {batch}" + (": the last first token" if batch > 1 else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time to first token (ms)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"{data['model']} bf16 prefill on one {data.get('gpu_name') or data['gpu']} ({data['date']})")
    fig.tight_layout(rect=(0, 0.06 + 0.035 * ((len(labels) - 1) // 3), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="a combine_prefill.py file")
    parser.add_argument("--out-dir", default="docs")
    parser.add_argument("--batches", default="1,8", help="one panel each (default: %(default)s)")
    args = parser.parse_args(argv)
    data = json.loads(pathlib.Path(args.results).read_text())
    path = pathlib.Path(args.out_dir) / f"prefill-{data['model']}-ttft.png"
    plot(data, path, [int(b) for b in args.batches.split(",") if b])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
