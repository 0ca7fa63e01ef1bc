"""The roofline block: issue #44's grid, Baton's decode step beside the compiled PyTorch peer and the floor over
batch and context on one GPU, from each GPU's newest results/<gpu>-*-roofline-<model>.json per model (written by
scripts/peers/combine_roofline.py), a table per file with its targets' counts, and the plot where
results/<same name>.png sits beside it. README.md holds it only between its markers: readme_performance.py
renders it where they are and leaves it out otherwise. self_test() renders it from files combine_roofline.py
makes of its own synthetic inputs (readme_performance.py --self-test-roofline)."""
import json
import pathlib
import re
import sys
import tempfile

from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .tables import link, series, table, wrap

sys.path.insert(0, str(inputs.ROOT / "scripts" / "peers"))
import combine_roofline  # noqa: E402  (the files' writer, stdlib only: its floor driver, the self-test's inputs)
from combine_roofline import BATON, FLOOR, PEER  # noqa: E402

GLOB = "*-roofline-*.json"


def files():
    """Each (GPU, model)'s newest roofline file: a GPU may have one per model."""
    found = []
    for gpu in inputs.gpus(GLOB):
        for model in sorted({p.name.split("-roofline-", 1)[1] for p in inputs.current(f"{gpu}-{GLOB}")}):
            found.append(inputs.newest_file(gpu, f"*-roofline-{model}"))
    return found


def _us(r):
    """'1,100.0 (1.10×)': a row's µs per step and its multiple of the floor (a skipped or failed row says so)."""
    if r.get("us_per_step") is None:
        return "skipped" if r.get("skipped") else "failed" if r.get("failed") else ""
    return f"{r['us_per_step']:,.1f}" + ("" if r.get("vs_floor") is None else f" ({r['vs_floor']:.2f}×)")


def _file_part(b, path):
    d = b.json(path)
    # Baton's rows are the ones carrying the targets (as combine_roofline.plot tells them apart).
    baton = {(r["batch"], r["context"]): r for r in d["rows"] if "floor_target" in r}
    floors = {(r["batch"], r["context"]): r for r in d["rows"] if r["driver"] == FLOOR}
    peer_rows = [r for r in d["rows"] if r["driver"] != FLOOR and "floor_target" not in r]
    # The fastest timed PyTorch row per point, as the summary compares it (else a skipped one, to say so).
    peer = {}
    for r in sorted(peer_rows, key=lambda r: r["us_per_step"] is None):
        k = (r["batch"], r["context"])
        if k not in peer or (r["us_per_step"] is not None and r["us_per_step"] < peer[k]["us_per_step"]):
            peer[k] = r
    vs = {(x["batch"], x["context"]): x["baton_vs_pytorch"] for x in d["summary"]["baton_vs_pytorch"]}
    points = sorted({(r["batch"], r["context"]) for r in d["rows"]})

    def ratio(k):
        return "" if k not in vs else f"{vs[k]:.2f}×" + (" faster" if vs[k] > 1 else "")

    cols = [("batch", lambda k: f"{k[0]}"), ("context", lambda k: f"{k[1]:,}"),
            ("floor µs", lambda k: f"{floors[k]['us_per_step']:,.1f}" if k in floors else ""),
            ("Baton µs (× floor)", lambda k: _us(baton[k]) if k in baton else "")]
    if peer:
        cols += [("PyTorch µs (× floor)", lambda k: _us(peer[k]) if k in peer else ""),
                 ("Baton vs PyTorch", ratio)]
    drivers = [f"`{d}`" for d in dict.fromkeys(r["driver"] for r in peer_rows)]
    variants = drivers[0] if len(drivers) == 1 else f"its fastest variant at each point, {series(drivers, ' or ')}"
    model = DISPLAY.get(d["model"].lower(), d["model"])
    plot = path.with_suffix(".png")
    out = [f"{model}'s shape on one {d['device']}, µs per decode step over batch and context: Baton "
           f"(`tensor_parallel --tp=1`, {series(sorted({r['driver'] for r in baton.values()}))}) beside the compiled "
           f"PyTorch peer (`scripts/peers/long_context_peers.py`: {variants}) and the floor, the weights and the "
           "batch's KV cache read once at the HBM read bandwidth Baton measured; × floor is a step over the floor, "
           f"Baton vs PyTorch the PyTorch step over Baton's ({link(path)}"
           + (f"; plot: {link(plot)}" if plot.exists() else "") + "):", "", table(cols, points), ""]
    s = d["summary"]
    out += [f"Issue #44's targets, judged on Baton's rows in the file: the floor target "
            f"(`{s['floor_target']['rule']}`) met at {s['floor_target']['met']} of the {s['floor_target']['of']} "
            f"points it applies to, the faster target (`{s['faster_target']['rule']}`) at "
            f"{s['faster_target']['met']} of {s['faster_target']['of']}."
            # A file of part of the grid says which part (its own "scope" line, written beside the combiner's).
            + (f" {d['scope']}" if d.get("scope") else ""), ""]
    return out


def roofline_block():
    b = inputs.Block("roofline")
    paths = inputs.require([p for p in files() if p], "roofline", GLOB, "scripts/peers/combine_roofline.py")
    b.exempt += EXEMPT_NAMES
    out = []
    for path in paths:
        out += _file_part(b, path)
    return b, "\n".join(out).rstrip()


# --------------------------------------------------------------------------- self-test


def _fake_files(folder, scratch):
    """Roofline files combine_roofline.combine makes of its self-test's inputs: the H100's for two models (and
    an older one of the first, which the index archives), the H200's without PyTorch at one point, a plot."""
    f = combine_roofline.synthetic(scratch)
    baton, peer = combine_roofline.load(f["baton"], BATON), combine_roofline.load(f["peer"], PEER)
    older = {**baton, "rows": [{**r, "us_per_step": 9876.5} for r in baton["rows"]]}
    without = {**peer, "rows": [r for r in peer["rows"] if (r["batch"], r["context"]) != (64, 65536)]}
    made = {"h100-2026-11-28-roofline-llama-3.2-1b": combine_roofline.combine([baton], [peer]),
            "h100-2026-11-27-roofline-llama-3.2-1b": combine_roofline.combine([older], [peer]),
            "h100-2026-11-28-roofline-llama-3.1-8b": combine_roofline.combine([baton], [peer], "llama-3.1-8b",
                                                                              relabel=True),
            "h200-2026-11-28-roofline-llama-3.2-1b": combine_roofline.combine([baton], [without], gpu="NVIDIA H200")}
    for stem, data in made.items():
        (folder / f"{stem}.json").write_text(json.dumps(data, indent=1))
    (folder / "h100-2026-11-28-roofline-llama-3.2-1b.png").write_bytes(b"\x89PNG\r\n\x1a\n")


def expect(ok, what):
    if not ok:  # not assert: python -O would drop the checks
        raise AssertionError(f"roofline block self-test failed: {what}")


def self_test(markers, place):
    """Renders the block from fake files and checks its numbers, rows and placement (with readme_performance.py's
    markers() and place()); 0 if all hold, else an AssertionError naming the first that does not."""
    saved = inputs.RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        inputs.RESULTS, scratch = pathlib.Path(tmp) / "results", pathlib.Path(tmp) / "inputs"
        inputs.RESULTS.mkdir()
        scratch.mkdir()  # the combiner's inputs, apart: results/ holds only what its index can name
        try:
            _fake_files(inputs.RESULTS, scratch)
            inputs.results_index.write(inputs.RESULTS)  # the index the block reads its files from
            b, raw = roofline_block()
            body = wrap(raw)  # as readme_performance.py places it; the rows are checked on the unwrapped text
            expect(not b.check(body), f"untraced numbers: {b.check(body)}")
            expect(b.check(body + "\nA typed-in 123.456 µs.\n"), "a number no input holds passed the check")
            h100, h200 = raw.split("NVIDIA H200")
            for part, want in [
                    (raw, "| 1 | 8,192 | 1,000.0 | 1,100.0 (1.10×) | 1,500.0 (1.50×) | 1.36× faster |"),
                    # b64 c8192: the grouped variant is PyTorch's fastest there, and faster than Baton.
                    (raw, "| 64 | 8,192 | 2,000.0 | 2,500.0 (1.25×) | 2,300.0 (1.15×) | 0.92× |"),
                    (raw, "| 128 | 8,192 | 3,000.0 | 3,300.0 (1.10×) | skipped |  |"),
                    (h200, "| 64 | 65,536 | 4,000.0 | 4,400.0 (1.10×) |  |  |"),  # no PyTorch row there
                    (h100, "| 64 | 65,536 | 4,000.0 | 4,400.0 (1.10×) | 5,000.0 (1.25×) | 1.14× faster |"),
                    (raw, "Llama-3.1-8B's shape"), (raw, "on one NVIDIA H100 80GB HBM3,"),
                    (raw, "at 1 of the 2 points it applies to"), (h100, "at 3 of 5."), (h200, "at 2 of 4."),
                    (h100, "plot: [`h100-2026-11-28-roofline-llama-3.2-1b.png`]"),
                    (raw, "its fastest variant at each point, `PyTorch compiled, SDPA GQA, CUDA graph` or")]:
                expect(want in part, f"the block lacks {want!r}")
            expect(raw.count("| 1 | 8,192 |") == 3 and "9,876.5" not in raw and "plot:" not in h200,
                   "not one table per (GPU, model)'s newest file, or a plot not beside its file")
            begin, end = markers("roofline")
            placed = place(f"# x\n\n{begin}\nstale\n{end}\n\nrest\n", "roofline", body)
            expect(f"{begin}\n{body}\n{end}\n\nrest\n" in placed and "stale" not in placed,
                   "place() did not replace the block between its markers")
            for path in inputs.RESULTS.rglob("*-roofline-*"):
                path.unlink()
            inputs.results_index.write(inputs.RESULTS)
            try:
                roofline_block()
                expect(False, "no roofline file, yet the block rendered")
            except SystemExit as e:
                expect(GLOB in str(e), f"no roofline file: the message does not name {GLOB}: {e}")
        finally:
            inputs.RESULTS = saved
    # readme_performance.py renders the block only where its begin marker is: a lone half would be ignored.
    text = (inputs.ROOT / "README.md").read_text()
    expect(markers("roofline")[0] in text or not re.search(r"roofline (begin|end)", text),
           "README.md has a half-written roofline marker")
    print("roofline block self-test passed")
    return 0
