#!/usr/bin/env python3
"""Issue #44's roofline grid for one GPU and one model: Baton's decode step beside the PyTorch peer and the floor.

Reads Baton's `tensor_parallel --tp=1 --json` reports (samples/tensor_parallel/main.cc; the layout of
samples/common/report.h: rows {"model", "tp", "batch", "context", "driver", "us_per_step", "floor_us", ...}) and
long_context_peers.py --json reports (rows {"model", "batch", "context", "driver", "us_per_step"}, null with
"skipped" where not timed), any number of each (the sample takes one --context per run), and writes one file
{"date", "device", "model", "what", "method", "rows", "summary", "sources"} whose rows {"model", "batch",
"context", "driver", "us_per_step", "floor_us", "vs_floor"} are Baton's points (tp 1), the peer's with Baton's
floor at the same point (null where Baton has none) and a "floor" row per point. Baton's rows carry #44's
targets (floor_target: vs_floor <= 1.20 at batch <= 64, context <= 32768; faster_target: faster than the
fastest PyTorch row there; null where one does not apply); the summary lists baton_vs_pytorch (PyTorch µs /
Baton µs, > 1: Baton faster) per point and counts the rows meeting each target. Exits 2, naming the file and
the fix, on an input that is missing, not JSON, without usable rows, or at odds with the others' model or GPU.

    scripts/peers/combine_roofline.py --model llama-3.2-1b --baton $OUT/tp1-c1024.json $OUT/tp1-c8192.json \\
        --pytorch $OUT/long-context-peer.json --json results/h100-<date>-roofline-llama-3.2-1b.json \\
        --plot results/h100-<date>-roofline-llama-3.2-1b.png  # beside the JSON: the README block links it
    scripts/peers/combine_roofline.py --self-test   # synthetic inputs: no GPU, torch or matplotlib needed
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import pathlib
import sys
import tempfile
import unittest.mock
from typing import Any

BATON, PEER, FLOOR = "tensor_parallel", "long_context_peers", "floor"  # the inputs' "sample" fields; floor driver
# Issue #44's targets: within 1.20x the floor where the step should be bandwidth-bound, and faster than PyTorch.
FLOOR_TARGET, TARGET_MAX_BATCH, TARGET_MAX_CONTEXT = 1.20, 64, 32768


class CombineError(RuntimeError):
    pass


def rnd(x: float | None, digits: int = 1) -> float | None:
    """Times to 0.1 µs, ratios to 3 places (digits=3): what the file keeps."""
    return None if x is None else round(float(x), digits)


def model_key(label: Any) -> str:
    """Baton labels a checkpoint run by its path and a preset by its name, the peer by the directory's name
    (or its --model): compare the last path component, case aside ('/tmp/ck/Llama-3.2-1B' ~ 'llama-3.2-1b')."""
    return pathlib.PurePath(str(label)).name.lower()


def device_name(report: dict[str, Any]) -> str:
    device = report.get("device")  # the samples' reports hold an object, the peer's a string
    return str((device.get("name") if isinstance(device, dict) else device) or "").strip()


def load(path: str, kind: str) -> dict[str, Any]:
    """One input report, checked to be the right sample's, with at least one usable row."""
    flag, writer = (("--baton", "build/bin/tensor_parallel --tp=1 ... --json FILE") if kind == BATON else
                    ("--pytorch", "scripts/peers/long_context_peers.py ... --json FILE"))
    fix = f"pass the file that `{writer}` wrote"
    if not pathlib.Path(path).is_file():
        raise CombineError(f"{flag} {path}: no such file; {fix}")
    try:
        report = json.loads(pathlib.Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CombineError(f"{flag} {path}: not JSON ({error}); {fix}") from None
    if not isinstance(report, dict) or report.get("sample") != kind or not isinstance(report.get("rows"), list):
        what = report.get("sample") if isinstance(report, dict) else None
        raise CombineError(f"{flag} {path}: not a {kind} report with a \"rows\" list (sample: {what!r}); {fix}")
    if kind == PEER and (report.get("params", {}).get("smoke_test") or device_name(report) == "CPU"):
        raise CombineError(f"{flag} {path}: a CPU smoke test, not a measurement; rerun the peer with --device cuda")
    rows = [r for r in report["rows"] if isinstance(r, dict) and r.get("tp", 1) == 1]
    for r in rows:
        if not all(isinstance(r.get(k), int) for k in ("batch", "context")) or not r.get("driver"):
            raise CombineError(f"{flag} {path}: a row without an integer batch and context, or a driver: {r}")
        timed = ("us_per_step", "floor_us") if kind == BATON else (("us_per_step",) if not r.get("skipped") else ())
        if not all(isinstance(r.get(k), (int, float)) and r[k] > 0 for k in timed):
            raise CombineError(f"{flag} {path}: row b{r['batch']} context {r['context']} has no positive "
                               f"{' and '.join(timed)}; rerun that point")
    if not rows:
        fix = "run tensor_parallel with --tp=1" if kind == BATON else "rerun the peer: it wrote no point"
        raise CombineError(f"{flag} {path}: no usable rows{' with tp 1' if kind == BATON else ''}; {fix}")
    return {**report, "rows": rows, "path": path}


def one_value(what: str, values: list[tuple[str, str]], fix: str) -> str | None:
    """The single non-blank value of (path, value) pairs, or an error naming two files that disagree."""
    seen = {value: path for path, value in reversed(values) if value}  # each value's first file
    if len(seen) > 1:
        (a, pa), (b, pb) = list(seen.items())[:2]
        raise CombineError(f"{what} differ: {pa} has {a!r}, {pb} has {b!r}; {fix}")
    return next(iter(seen), None)


def merge(baton: list[dict[str, Any]], peers: list[dict[str, Any]], label: str) -> tuple[list, list]:
    """(Baton's rows + a floor row per point, the PyTorch rows with Baton's floor at their point)."""
    def row(r: dict[str, Any], driver: str, us: float | None, floor: float | None) -> dict[str, Any]:
        return {"model": label, "batch": r["batch"], "context": r["context"], "driver": driver,
                "us_per_step": rnd(us), "floor_us": rnd(floor),
                "vs_floor": rnd(us / floor, 3) if us is not None and floor else None}

    floors: dict[tuple[int, int], float] = {}
    rows, peer_rows = [], []
    for rep in baton:
        for r in rep["rows"]:
            if (r["batch"], r["context"]) in floors:
                raise CombineError(f"{rep['path']}: a second Baton row at batch {r['batch']}, context "
                                   f"{r['context']}; pass one run per point")
            floors[r["batch"], r["context"]] = r["floor_us"]
            rows += [row(r, r["driver"], r["us_per_step"], r["floor_us"]), row(r, FLOOR, r["floor_us"], r["floor_us"])]
    for rep in peers:
        for r in rep["rows"]:
            if any((x["batch"], x["context"], x["driver"]) == (r["batch"], r["context"], r["driver"])
                   for x in peer_rows):
                raise CombineError(f"{rep['path']}: a second {r['driver']!r} row at batch {r['batch']}, context "
                                   f"{r['context']}; pass one run per point")
            peer_rows.append({**row(r, r["driver"], r.get("us_per_step"), floors.get((r["batch"], r["context"]))),
                              **{k: r[k] for k in ("skipped", "failed") if k in r and r.get("us_per_step") is None}})
    return rows, peer_rows


def evaluate(rows: list[dict[str, Any]], peer_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Marks Baton's rows with #44's targets (null where one does not apply) and returns the summary. On the
    file's rounded numbers, so that a reader can check each verdict from the row itself."""
    ratios = []
    for row in (r for r in rows if r["driver"] != FLOOR):
        point = (row["batch"], row["context"])
        in_scope = point[0] <= TARGET_MAX_BATCH and point[1] <= TARGET_MAX_CONTEXT
        row["floor_target"] = row["vs_floor"] <= FLOOR_TARGET if in_scope else None
        timed = [p for p in peer_rows if (p["batch"], p["context"]) == point and p["us_per_step"] is not None]
        best = min(timed, key=lambda p: p["us_per_step"]) if timed else None  # PyTorch at its best variant
        ratio = rnd(best["us_per_step"] / row["us_per_step"], 3) if best else None
        row["faster_target"] = ratio > 1.0 if ratio is not None else None
        if best:
            ratios.append({"batch": point[0], "context": point[1], "baton_us": row["us_per_step"], "pytorch_us":
                           best["us_per_step"], "pytorch_driver": best["driver"], "baton_vs_pytorch": ratio})
    rules = {"floor_target": f"vs_floor <= {FLOOR_TARGET:.2f} at batch <= {TARGET_MAX_BATCH}, context <= "
                             f"{TARGET_MAX_CONTEXT}", "faster_target": "Baton's us_per_step below the fastest "
                             "PyTorch row's at the same batch and context (baton_vs_pytorch > 1)"}
    verdicts = {t: [r[t] for r in rows if r.get(t) is not None] for t in rules}
    return {"baton_vs_pytorch": sorted(ratios, key=lambda x: (x["batch"], x["context"])),
            **{t: {"rule": rule, "met": sum(verdicts[t]), "of": len(verdicts[t])} for t, rule in rules.items()}}


def combine(baton: list[dict[str, Any]], peers: list[dict[str, Any]], model: str | None = None,
            gpu: str | None = None, relabel: bool = False) -> dict[str, Any]:
    # One model: every row's label must name the same one (--relabel trusts --model instead: the same shape
    # under two names, such as a preset and a checkpoint directory).
    if relabel and not model:
        raise CombineError("--relabel needs --model LABEL: the label every row takes")
    labels = [(rep["path"], model_key(r["model"])) for rep in baton + peers for r in rep["rows"] if r.get("model")]
    found = one_value("models", [] if relabel else labels, "one model per combined file (if both ran the same "
                      "weights' shape under two names, pass --model LABEL --relabel)")
    label = model or next((pathlib.PurePath(str(r["model"])).name for rep in baton for r in rep["rows"]
                           if r.get("model")), found or "unnamed model")  # Baton's spelling, less any path
    # One GPU: the floor is Baton's bandwidth on its GPU, meaningless for a peer timed on another.
    device = one_value("devices", [(rep["path"], device_name(rep)) for rep in baton + peers],
                       "combine the runs of one GPU only")
    if not (gpu or device):
        raise CombineError("no input names its GPU; pass --gpu LABEL")
    rows, peer_rows = merge(baton, peers, label)
    summary = evaluate(rows, peer_rows)
    # Per point: Baton's row, the PyTorch rows fastest first (skipped last), the floor.
    rank = {**{r["driver"]: 1 for r in peer_rows}, **{r["driver"]: 0 for r in rows}, FLOOR: 2}
    rows = sorted(rows + peer_rows, key=lambda r: (r["batch"], r["context"], rank[r["driver"]],
                                                   r["us_per_step"] or float("inf")))
    dates = [str(rep["date"])[:10] for rep in baton + peers if rep.get("date")]
    return {
        "date": max(dates) if dates else datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "device": gpu or device,
        "model": label,
        "what": f"{label} decode step against batch and context on one GPU (issue #44's roofline grid): Baton "
                "(tensor_parallel --tp=1, CUDA graphs) beside the compiled PyTorch peer and the HBM floor",
        "method": "Baton: tensor_parallel --tp=1, its captured steps replayed, the median of its repeats; floor_us: "
                  "Baton's (weights + the batch's KV cache at the steps' mean context / the HBM read bandwidth it "
                  "measured), also on the PyTorch rows at its point. PyTorch: long_context_peers.py, the compiled "
                  "step in a CUDA graph, CUDA events around each replay, the median step of a run, median of the "
                  "runs. vs_floor = us_per_step / floor_us; baton_vs_pytorch = the fastest PyTorch row's / Baton's.",
        "rows": rows,
        "summary": summary,
        "sources": [{"file": pathlib.Path(rep["path"]).name, "sample": rep["sample"], "date": rep.get("date"),
                     "device": device_name(rep), "rows": len(rep["rows"]),
                     **{k: rep[k] for k in ("passed", "complete") if k in rep}} for rep in baton + peers],
    }


def plot(out: dict[str, Any], path: pathlib.Path) -> None:
    """µs per step against batch (log2): a colour per context; Baton solid, PyTorch dashed, the floor dotted."""
    import matplotlib
    matplotlib.use("Agg")  # no display on the machines that make these
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullLocator

    rows = [r for r in out["rows"] if r["us_per_step"] is not None]
    contexts = sorted({r["context"] for r in rows})
    colour = {c: f"C{i % 10}" for i, c in enumerate(contexts)}
    baton = {r["driver"] for r in rows if "floor_target" in r}  # only Baton's rows carry the targets
    # The legend reads from the runtime to the bound: Baton's drivers, the peers', the floor.
    drivers = sorted({r["driver"] for r in rows}, key=lambda d: (d not in baton, d == FLOOR, d))
    peer_markers = dict(zip([d for d in drivers if d != FLOOR and d not in baton], "sD^v<>p*"))

    def style(d: str) -> dict[str, Any]:
        return ({"linestyle": ":", "linewidth": 0.9} if d == FLOOR else {"linestyle": "-", "marker": "o"}
                if d in baton else {"linestyle": "--", "marker": peer_markers[d], "markerfacecolor": "none"})

    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    for context in contexts:
        for driver in drivers:
            points = sorted((r["batch"], r["us_per_step"]) for r in rows
                            if r["context"] == context and r["driver"] == driver)
            if points:
                ax.plot([b for b, _ in points], [u for _, u in points], color=colour[context], **style(driver))
    batches = sorted({r["batch"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")  # the steps span a few hundred µs to tens of ms: ratios read as distances
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Within a decade the major ticks are too few: label the minor ones at 2, 3 and 5 x 10^k.
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:e}"[0] in "235" else ""))
    ax.set_xlabel("batch (sequences decoding together)")
    ax.set_ylabel("µs per decode step")
    ax.set_title(f"{out['model']} decode step on {out['device']}")
    ax.grid(True, which="both", alpha=0.3)
    # Two compact legends instead of one line per (driver, context): colours name contexts, styles drivers.
    ctx = [Line2D([], [], color=colour[c], linewidth=3, label=f"{c // 1024}K" if c % 1024 == 0 else str(c))
           for c in contexts]
    legend = ax.legend(handles=ctx, title="context", loc="upper left", fontsize=8, title_fontsize=8)
    ax.add_artist(legend)
    styles = [Line2D([], [], color="black", **style(d), label="floor (weights + KV cache once / HBM bandwidth)"
                     if d == FLOOR else f"Baton ({d})" if d in baton else d) for d in drivers]
    ax.legend(handles=styles, loc="lower right", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # not installed, or (in the self-test) hidden
        return False
    return True


def print_table(out: dict[str, Any]) -> None:
    print(f"{'batch':>5} {'context':>7} {'us/step':>9} {'x floor':>7}  driver")
    for r in out["rows"]:
        us = "skipped" if r["us_per_step"] is None else f"{r['us_per_step']:.1f}"
        vs = "" if r["vs_floor"] is None else f"{r['vs_floor']:.2f}"
        print(f"{r['batch']:>5} {r['context']:>7} {us:>9} {vs:>7}  {r['driver']}")
    s = out["summary"]
    for name in ("floor_target", "faster_target"):
        print(f"{name}: {s[name]['met']} of {s[name]['of']} Baton rows ({s[name]['rule']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baton", nargs="+", default=[], help="tensor_parallel --tp=1 --json reports")
    parser.add_argument("--pytorch", nargs="+", default=[], help="long_context_peers.py --json reports")
    parser.add_argument("--model", help="every row's model label (default: the inputs', which must agree)")
    parser.add_argument("--relabel", action="store_true", help="take --model for inputs whose labels differ")
    parser.add_argument("--gpu", help="the device label (default: the inputs' device names, which must agree)")
    parser.add_argument("--json", help="the combined results file to write")
    parser.add_argument("--plot", help="the PNG to write (needs matplotlib)")
    parser.add_argument("--self-test", action="store_true", help="combine synthetic inputs and check; exit")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.baton or not args.pytorch or not args.json:
        parser.error("--baton, --pytorch and --json are required (or --self-test)")
    if args.plot and not have_matplotlib():  # before any work: a plot asked for and impossible is a failure
        print("combine_roofline: --plot needs matplotlib, which is not installed (pip install matplotlib, or drop "
              "--plot)", file=sys.stderr)
        return 2
    try:
        out = combine([load(p, BATON) for p in args.baton], [load(p, PEER) for p in args.pytorch], args.model,
                      args.gpu, args.relabel)
    except CombineError as error:
        print(f"combine_roofline: error: {error}", file=sys.stderr)
        return 2
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print_table(out)
    print(f"wrote {path}")
    for src in out["sources"]:  # kept, not refused: the rows are still what was measured
        for k in (k for k in ("passed", "complete") if src.get(k) is False):
            print(f"combine_roofline: note: {src['file']} says {k}: false (its rows are kept)", file=sys.stderr)
    if args.plot:
        plot(out, pathlib.Path(args.plot))
    print(f"wrote {args.plot}" if args.plot else "(no --plot: no PNG written)")
    return 0


# --------------------------------------------------------------------------- self-test

GPU, GQA, GROUPED = ("NVIDIA H100 80GB HBM3", "PyTorch compiled, SDPA GQA, CUDA graph",
                     "PyTorch compiled, SDPA grouped queries, CUDA graph")
# (batch, context): (floor, Baton, PyTorch SDPA GQA; None: skipped). Batch 128 and context 65536 are past the floor
# target's scope; at b64 c8192 the grouped variant (2300 µs) is the fastest PyTorch row.
GRID = {(1, 8192): (1000.0, 1100.04, 1500.0), (64, 8192): (2000.0, 2500.0, 2400.0),
        (128, 8192): (3000.0, 3300.0, None), (1, 65536): (1500.0, 1650.0, 3000.0),
        (64, 65536): (4000.0, 4400.0, 5000.0), (128, 65536): (6000.0, 6600.0, 6000.0)}


def synthetic(tmp: pathlib.Path) -> dict[str, str]:
    """Input files in the two writers' formats (samples/common/report.cc, long_context_peers.py), and broken ones."""
    baton_rows = [{"model": "llama-3.2-1b", "tp": 1, "batch": b, "context": c, "driver": "baton-graphs",
                   "us_per_step": us, "floor_us": fl, "allreduce_us": 0.0, "vs_floor": us / fl,
                   "weight_gb_per_gpu": 2.47, "parity_identical": 0, "parity_of": 0, "parity_vs_tp": 1,
                   "first_divergence": -1} for (b, c), (fl, us, _) in GRID.items()]
    baton_rows.append({**baton_rows[0], "tp": 2, "us_per_step": 1.0})  # not tp 1: left out
    baton = {"sample": BATON, "date": "2026-11-28T10:00:00Z", "device": {"name": GPU, "compute_capability": "9.0"},
             "params": {"gpus": 1, "context": 8192, "model": "llama-3.2-1b"}, "rows": baton_rows, "passed": True}
    peer_rows = [{"model": "Llama-3.2-1B", "batch": b, "context": c, "us_per_step": us, "driver": GQA}
                 for (b, c), (_, _, us) in GRID.items()]
    peer_rows[2]["skipped"] = "out of GPU memory: ..."
    peer_rows.append({"model": "Llama-3.2-1B", "batch": 64, "context": 8192, "us_per_step": 2300.0, "driver": GROUPED})
    peer = {"sample": PEER, "date": "2026-11-28T11:00:00Z", "device": GPU, "params": {"smoke_test": False},
            "complete": True, "rows": peer_rows}
    files = {"baton": baton, "peer": peer, "empty": {**peer, "rows": []}, "elsewhere": {**peer, "device": "H200"},
             "other": {**peer, "rows": [{**r, "model": "llama-3.1-8b"} for r in peer_rows]}}
    for name, data in files.items():
        (tmp / f"{name}.json").write_text(json.dumps(data, indent=1))
    (tmp / "garbled.json").write_text("{not json")
    return {name: str(tmp / f"{name}.json") for name in [*files, "garbled", "missing"]}


def expect(ok: bool, what: Any) -> None:
    if not ok:  # not assert: python -O would drop the checks
        raise AssertionError(f"combine_roofline self-test failed: {what}")


def self_test() -> int:
    def run(*argv: str) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, err.getvalue()

    with tempfile.TemporaryDirectory() as scratch:
        tmp = pathlib.Path(scratch)
        f, result = synthetic(tmp), str(tmp / "out.json")
        code, err = run("--baton", f["baton"], "--pytorch", f["peer"], "--json", result)
        expect(code == 0, f"combining the synthetic inputs: exit {code}: {err}")
        out = json.loads(pathlib.Path(result).read_text())
        expect((out["model"], out["device"], out["date"]) == ("llama-3.2-1b", GPU, "2026-11-28"), out)
        rows = {(r["batch"], r["context"], r["driver"]): r for r in out["rows"]}
        expect(len(rows) == len(out["rows"]) == 6 * 3 + 1, sorted(rows))  # Baton, PyTorch, floor; the grouped row
        expect(all(r["model"] == "llama-3.2-1b" and set(r) >= {"batch", "context", "us_per_step", "floor_us",
                                                                "vs_floor"} for r in out["rows"]), out["rows"])
        b = rows[(1, 8192, "baton-graphs")]  # 1100.04 µs: rounded to 0.1 µs
        expect([b[k] for k in ("us_per_step", "floor_us", "vs_floor", "floor_target", "faster_target")] ==
               [1100.0, 1000.0, 1.1, True, True], b)
        expect(rows[(1, 8192, FLOOR)]["us_per_step"] == 1000.0 and rows[(1, 8192, GQA)]["vs_floor"] == 1.5, rows)
        s = rows[(128, 8192, GQA)]
        expect(s["us_per_step"] is None and s["vs_floor"] is None and s["skipped"] and s["floor_us"] == 3000.0, s)
        b = rows[(128, 8192, "baton-graphs")]  # batch 128: past the floor target; no timed PyTorch row
        expect(b["floor_target"] is None and b["faster_target"] is None, b)
        at = [r["driver"] for r in out["rows"] if (r["batch"], r["context"]) == (64, 8192)]
        expect(at == ["baton-graphs", GROUPED, GQA, FLOOR], at)  # Baton, PyTorch fastest first, the floor
        ratios = {(x["batch"], x["context"]): (x["baton_vs_pytorch"], x["pytorch_driver"])
                  for x in out["summary"]["baton_vs_pytorch"]}
        expect(ratios == {(1, 8192): (1.364, GQA), (64, 8192): (0.92, GROUPED), (1, 65536): (1.818, GQA),
                          (64, 65536): (1.136, GQA), (128, 65536): (0.909, GQA)}, ratios)
        t = out["summary"]  # floor: b1 c8192 1.1 yes, b64 c8192 1.25 no; faster: 3 of the 5 timed points
        expect([(t[k]["met"], t[k]["of"]) for k in ("floor_target", "faster_target")] == [(1, 2), (3, 5)], t)
        # Refused, naming the file: (--baton, --pytorch, what the message says, the file it names).
        for baton, peer, why, named in [
                ("baton", "missing", "no such file", "missing"), ("baton", "empty", "no usable rows", "empty"),
                ("garbled", "peer", "not JSON", "garbled"), ("peer", "peer", "not a tensor_parallel report", "peer"),
                ("baton", "other", "models differ", "other"), ("baton", "elsewhere", "devices differ", "elsewhere")]:
            code, err = run("--baton", f[baton], "--pytorch", f[peer], "--json", str(tmp / "refused.json"))
            expect(code == 2 and why in err and f[named] in err, (why, code, err))
        expect(not (tmp / "refused.json").exists(), "a refused combination wrote its file")
        code, err = run("--baton", f["baton"], "--pytorch", f["other"], "--json", result, "--model", "x", "--relabel")
        expect(code == 0 and json.loads(pathlib.Path(result).read_text())["model"] == "x", err)
        png = str(tmp / "p.png")
        with unittest.mock.patch.dict(sys.modules, {"matplotlib": None}):  # as if not installed
            code, err = run("--baton", f["baton"], "--pytorch", f["peer"], "--json", result, "--plot", png)
        expect(code == 2 and "matplotlib" in err and not pathlib.Path(png).exists(), err)
        if not have_matplotlib():
            print("combine_roofline self-test: matplotlib is not installed: the plot check skipped")
        else:
            code, err = run("--baton", f["baton"], "--pytorch", f["peer"], "--json", result, "--plot", png)
            expect(code == 0 and pathlib.Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err)
    print("combine_roofline self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
