"""The long-context block: Baton's long_context sample beside the compiled PyTorch peer and the floor, from
each GPU's newest results/<gpu>-*-long-context-vs-pytorch-*.json (written by
scripts/peers/combine_long_context.py). README.md holds it only between its markers: readme_performance.py
renders it where they are and leaves it out otherwise."""
from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .tables import link, table

GLOB = "*-long-context-vs-pytorch-*.json"
# Columns: (driver in the file, header); a driver a file lacks gets empty cells.
COLUMNS = [
    ("Baton tail", "Baton tail-launch"),
    ("Baton conditional", "Baton conditional"),
    ("Baton dp", "Baton dynamic parallelism"),
    ("PyTorch compiled, SDPA GQA, CUDA graph", "PyTorch: compiled, SDPA GQA, CUDA graph"),
]


def files():
    """Each GPU's newest long-context file (by its 'date', then its name)."""
    return [inputs.newest_file(g, GLOB) for g in inputs.gpus(GLOB)]


def long_context_block():
    b = inputs.Block("long-context")
    paths = inputs.require([p for p in files() if p], "long-context", GLOB,
                           "scripts/peers/combine_long_context.py")
    b.exempt += EXEMPT_NAMES
    out = []
    for path in paths:
        d = b.json(path)
        by = {(r["batch"], r["context"], r["driver"]): r for r in d["rows"]}
        points = sorted({(r["batch"], r["context"]) for r in d["rows"]})
        floors = {(r["batch"], r["context"]): r["floor_us"] for r in d["rows"]}

        def cell(point, driver):
            r = by.get((*point, driver))
            return "" if r is None else f"{r['us_per_step']:.1f} ({r['over_floor']:.2f}×)"

        cols = [("batch", lambda x: f"{x[0]}"), ("context", lambda x: f"{x[1]:,}"),
                ("floor", lambda x: f"{floors[x]:.1f}")]
        cols += [(label, lambda x, drv=drv: cell(x, drv)) for drv, label in COLUMNS
                 if any(k[2] == drv for k in by)]
        peer = d["peers"][0]
        out += [f"{DISPLAY.get(d['model'], d['model'])}'s shape, random bf16 weights, µs per decode step once every "
                "prompt is read (× the floor: the weights and the batch's KV cache read once at the measured "
                f"bandwidth): Baton's `long_context` sample beside the PyTorch peer "
                f"(`scripts/peers/long_context_peers.py`, torch {peer['torch']}: gpt-fast-style, compiled, SDPA with "
                f"native GQA, a CUDA graph) on one {d['gpu_name']} ({link(path)}).", "",
                table(cols, points), ""]
    return b, "\n".join(out).rstrip()
