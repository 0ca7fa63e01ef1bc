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
Baton µs, > 1: Baton faster) per point and counts the rows meeting each target. --previous takes earlier files
of this script back in (a grid measured over several calls, an earlier call's raw inputs gone): their points stay
as they were unless the new inputs (or a later --previous file) cover them, Baton's side and PyTorch's apart;
--previous alone re-renders a file. Exits 2, naming the file and the fix, on an input that is missing, not JSON,
without usable rows, or at odds with the others' model or GPU.

    scripts/peers/combine_roofline.py --model llama-3.2-1b --baton $OUT/tp1-c1024.json $OUT/tp1-c8192.json \\
        --pytorch $OUT/long-context-peer.json --json results/h100-<date>-roofline-llama-3.2-1b.json \\
        --plot results/h100-<date>-roofline-llama-3.2-1b.png  # beside the JSON: the README block links it
    scripts/peers/combine_roofline.py --previous results/h100-<date>-roofline-llama-3.2-1b.json \\
        --baton $OUT/tp1-c16.json --pytorch $OUT/pytorch-c16.json --json $OUT/roofline-llama-3.2-1b.json
    scripts/peers/combine_roofline.py --self-test   # synthetic inputs: no GPU, torch or matplotlib needed
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import io
import json
import pathlib
import sys
import tempfile
import unittest.mock
from typing import Any

BATON, PEER, FLOOR = "tensor_parallel", "long_context_peers", "floor"  # the inputs' "sample" fields; floor driver
# A --previous file's "sample" in "sources"; the key under which its rows carry (driver, floor_us, vs_floor).
COMBINED, KEPT = "combine_roofline", "kept"
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


def read_json(where: str, path: str, fix: str) -> Any:
    """The JSON in `path`, or an error naming `where` (the flag and file) and the fix."""
    if not pathlib.Path(path).is_file():
        raise CombineError(f"{where}: no such file; {fix}")
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CombineError(f"{where}: not JSON ({error}); {fix}") from None


def check_timed(where: str, r: dict[str, Any], timed: tuple[str, ...], fix: str) -> None:
    """Refuses a row without an integer batch and context and a driver, or without the positive times `timed`."""
    if not all(isinstance(r.get(k), int) for k in ("batch", "context")) or not r.get("driver"):
        raise CombineError(f"{where}: a row without an integer batch and context, or a driver: {r}")
    if not all(isinstance(r.get(k), (int, float)) and r[k] > 0 for k in timed):
        raise CombineError(f"{where}: row b{r['batch']} context {r['context']} {r['driver']!r} has no positive "
                           f"{' and '.join(timed)}; {fix}")


def load(path: str, kind: str) -> dict[str, Any]:
    """One input report, checked to be the right sample's, with at least one usable row."""
    flag, writer = (("--baton", "build/bin/tensor_parallel --tp=1 ... --json FILE") if kind == BATON else
                    ("--pytorch", "scripts/peers/long_context_peers.py ... --json FILE"))
    fix = f"pass the file that `{writer}` wrote"
    report = read_json(f"{flag} {path}", path, fix)
    if not isinstance(report, dict) or report.get("sample") != kind or not isinstance(report.get("rows"), list):
        what = report.get("sample") if isinstance(report, dict) else None
        raise CombineError(f"{flag} {path}: not a {kind} report with a \"rows\" list (sample: {what!r}); {fix}")
    if kind == PEER and (report.get("params", {}).get("smoke_test") or device_name(report) == "CPU"):
        raise CombineError(f"{flag} {path}: a CPU smoke test, not a measurement; rerun the peer with --device cuda")
    rows = [r for r in report["rows"] if isinstance(r, dict) and r.get("tp", 1) == 1]
    for r in rows:
        timed = ("us_per_step", "floor_us") if kind == BATON else (("us_per_step",) if not r.get("skipped") else ())
        check_timed(f"{flag} {path}", r, timed, "rerun that point")
    if not rows:
        fix = "run tensor_parallel with --tp=1" if kind == BATON else "rerun the peer: it wrote no point"
        raise CombineError(f"{flag} {path}: no usable rows{' with tp 1' if kind == BATON else ''}; {fix}")
    return {**report, "rows": rows, "path": path}


def load_previous(path: str) -> dict[str, Any]:
    """An earlier file of this script as the Baton and PyTorch reports it was made of (its rows as it keeps them,
    each with its vs_floor), with its device label, the GPUs its sources name, its date and its sources."""
    flag, fix = f"--previous {path}", "pass a file that `combine_roofline.py ... --json FILE` wrote"
    data = read_json(flag, path, fix)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), t) for k, t in
                                             (("rows", list), ("summary", dict), ("sources", list))):
        what = data.get("sample") if isinstance(data, dict) else None
        raise CombineError(f"{flag}: not a combined roofline file with \"rows\", \"summary\" and \"sources\" "
                           f"(sample: {what!r}); {fix}")
    baton, peer, floors = [], [], {}
    for r in (r for r in data["rows"] if isinstance(r, dict)):
        side = baton if "floor_target" in r else None if r.get("driver") == FLOOR else peer  # as plot() tells them
        timed = (("us_per_step", "floor_us") if side is baton else ("us_per_step",)
                 if side is None or r.get("us_per_step") is not None else ())
        check_timed(flag, r, timed, fix)
        if side is None:
            floors[r["batch"], r["context"]] = r["us_per_step"]
        else:
            side.append({**r, KEPT: (r["driver"], r.get("floor_us"), r.get("vs_floor"))})
    if floors != {(r["batch"], r["context"]): r["floor_us"] for r in baton}:
        raise CombineError(f"{flag}: its {FLOOR!r} rows are not its Baton rows' floor_us, one per point; {fix}")
    if not baton and not peer:
        raise CombineError(f"{flag}: no usable rows; {fix}")
    sources = [s for s in data["sources"] if isinstance(s, dict)]
    named = [str(s["device"]).strip() for s in sources if str(s.get("device") or "").strip()]
    label = str(data.get("device") or "").strip()
    return {"path": path, "date": str(data.get("date") or ""), "device": label, "devices": named or [label],
            "sources": sources, "baton": {"sample": BATON, "path": path, "rows": baton},
            "peer": {"sample": PEER, "path": path, "rows": peer}}


def newest(layers: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The reports of layers (oldest first), less each row at a point that a later layer covers: later wins."""
    covered: set[tuple[int, int]] = set()
    kept: list[dict[str, Any]] = []
    for layer in reversed(layers):
        kept = [{**rep, "rows": [r for r in rep["rows"] if (r["batch"], r["context"]) not in covered]}
                for rep in layer] + kept
        covered |= {(r["batch"], r["context"]) for rep in layer for r in rep["rows"]}
    return kept


def points(rows: list[dict[str, Any]]) -> str:
    """'context 576: batches 1, 8; context 8192: batch 1': the points that rows cover."""
    by_context: dict[int, list[int]] = {}
    for batch, context in sorted({(r["batch"], r["context"]) for r in rows}, key=lambda p: (p[1], p[0])):
        by_context.setdefault(context, []).append(batch)
    return "; ".join(f"context {c}: batch{'es' if len(bs) > 1 else ''} {', '.join(map(str, bs))}"
                     for c, bs in by_context.items()) or "none (newer inputs cover all its points)"


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
        kept = r.get(KEPT)  # a --previous file's row: its vs_floor (of the unrounded times) stands with its floor
        return {"model": label, "batch": r["batch"], "context": r["context"], "driver": driver,
                "us_per_step": rnd(us), "floor_us": rnd(floor),
                "vs_floor": kept[2] if kept and kept[:2] == (driver, rnd(floor)) else
                rnd(us / floor, 3) if us is not None and floor else None}

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
            gpu: str | None = None, relabel: bool = False,
            previous: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # One model: every row's label must name the same one (--relabel trusts --model instead: the same shape
    # under two names, such as a preset and a checkpoint directory). A --previous file's rows count as inputs.
    if relabel and not model:
        raise CombineError("--relabel needs --model LABEL: the label every row takes")
    previous = previous or []  # load_previous()'s, oldest first
    old_baton, old_peers = [p["baton"] for p in previous], [p["peer"] for p in previous]
    labels = [(rep["path"], model_key(r["model"])) for rep in old_baton + old_peers + baton + peers
              for r in rep["rows"] if r.get("model")]
    found = one_value("models", [] if relabel else labels, "one model per combined file (if both ran the same "
                      "weights' shape under two names, pass --model LABEL --relabel)")
    label = model or next((pathlib.PurePath(str(r["model"])).name for rep in old_baton + baton for r in rep["rows"]
                           if r.get("model")), found or "unnamed model")  # Baton's spelling, less any path
    # One GPU: the floor is Baton's bandwidth on its GPU, meaningless for a peer timed on another. A --previous
    # file's GPU is the one its sources name (else its label); its label stands unless --gpu gives one.
    device = one_value("devices", [(p["path"], d) for p in previous for d in p["devices"]] +
                       [(rep["path"], device_name(rep)) for rep in baton + peers], "combine the runs of one GPU only")
    gpu = gpu or next((p["device"] for p in reversed(previous) if p["device"]), None)
    if not (gpu or device):
        raise CombineError("no input names its GPU; pass --gpu LABEL")
    # Per point and side (Baton's row with its floor; the PyTorch rows): the new inputs', else the last
    # --previous file's that has it.
    n = len(previous)
    all_baton, all_peers = newest([[r] for r in old_baton] + [baton]), newest([[r] for r in old_peers] + [peers])
    kept = [[*b["rows"], *q["rows"]] for b, q in zip(all_baton[:n], all_peers[:n])]
    rows, peer_rows = merge(all_baton, all_peers, label)
    summary = evaluate(rows, peer_rows)
    # Per point: Baton's row, the PyTorch rows fastest first (skipped last), the floor.
    rank = {**{r["driver"]: 1 for r in peer_rows}, **{r["driver"]: 0 for r in rows}, FLOOR: 2}
    rows = sorted(rows + peer_rows, key=lambda r: (r["batch"], r["context"], rank[r["driver"]],
                                                   r["us_per_step"] or float("inf")))
    dates = [str(rep["date"])[:10] for rep in previous + baton + peers if rep.get("date")]
    sources = [*(s for p, k in zip(previous, kept) for s in [*p["sources"], {
        "file": pathlib.Path(p["path"]).name, "sample": COMBINED, "date": p["date"], "device": p["device"],
        "rows": len(k) + sum("floor_target" in r for r in k)}]),  # with a floor row per Baton row
               *({"file": pathlib.Path(rep["path"]).name, "sample": rep["sample"], "date": rep.get("date"),
                  "device": device_name(rep), "rows": len(rep["rows"]),
                  **{k: rep[k] for k in ("passed", "complete") if k in rep}} for rep in baton + peers)]
    what = "; ".join(f"{pathlib.Path(p['path']).name} ({points(k)})" for p, k in zip(previous, kept))
    return {
        "date": max(dates) if dates else datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "device": gpu or device,
        "model": label,
        "what": f"{label} decode step against batch and context on one GPU (issue #44's roofline grid): Baton "
                "(tensor_parallel --tp=1, CUDA graphs) beside the compiled PyTorch peer and the HBM floor"
                + (f". Rows kept from earlier files of this script (--previous): {what}." if what else ""),
        "method": "Baton: tensor_parallel --tp=1, its captured steps replayed, the median of its repeats; floor_us: "
                  "Baton's (weights + the batch's KV cache at the steps' mean context / the HBM read bandwidth it "
                  "measured), also on the PyTorch rows at its point. PyTorch: long_context_peers.py, the compiled "
                  "step in a CUDA graph, CUDA events around each replay, the median step of a run, median of the "
                  "runs. vs_floor = us_per_step / floor_us; baton_vs_pytorch = the fastest PyTorch row's / Baton's.",
        "rows": rows,
        "summary": summary,
        "sources": [s for i, s in enumerate(sources) if s not in sources[:i]],  # a file passed again: once
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
        importlib.import_module("matplotlib")
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
    parser.add_argument("--previous", nargs="+", default=[], metavar="FILE", help="earlier --json files of this "
                        "script: their points stay unless the new inputs (or a later file here) cover them")
    parser.add_argument("--model", help="every row's model label (default: the inputs', which must agree)")
    parser.add_argument("--relabel", action="store_true", help="take --model for inputs whose labels differ")
    parser.add_argument("--gpu", help="the device label (default: the last --previous file's, else the "
                        "inputs' device names; those must agree)")
    parser.add_argument("--json", help="the combined results file to write")
    parser.add_argument("--plot", help="the PNG to write (needs matplotlib)")
    parser.add_argument("--self-test", action="store_true", help="combine synthetic inputs and check; exit")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.json or not (args.previous or args.baton and args.pytorch):
        parser.error("--baton, --pytorch and --json are required (or --previous FILE with --json, or --self-test)")
    if args.plot and not have_matplotlib():  # before any work: a plot asked for and impossible is a failure
        print("combine_roofline: --plot needs matplotlib, which is not installed (pip install matplotlib, or drop "
              "--plot)", file=sys.stderr)
        return 2
    try:
        out = combine([load(p, BATON) for p in args.baton], [load(p, PEER) for p in args.pytorch], args.model,
                      args.gpu, args.relabel, [load_previous(p) for p in args.previous])
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
        # --previous: this script's own files re-enter a new one, per point and side, the newest input winning.
        full = tmp / "full.json"
        full.write_text(json.dumps(out))  # the whole grid, as the first run wrote it
        raw = {k: json.loads(pathlib.Path(f[k]).read_text()) for k in ("baton", "peer")}

        def part(name: str, kind: str, context: int, scale: float = 1.0, drop: str = "") -> str:
            """One context of a synthetic input, its times (and floors) scaled, without the driver drop."""
            rows = [{**r, **{k: r[k] * scale for k in ("us_per_step", "floor_us") if r.get(k)}}
                    for r in raw[kind]["rows"] if r["context"] == context and r["driver"] != drop]
            (tmp / name).write_text(json.dumps({**raw[kind], "rows": rows}))
            return str(tmp / name)

        def made(name: str, *argv: str) -> tuple[str, dict[str, Any], list]:
            code, err = run(*argv, "--json", str(tmp / name))
            expect(code == 0, f"{argv}: exit {code}: {err}")
            data = json.loads((tmp / name).read_text())
            return str(tmp / name), data, [(r["batch"], r["context"], r["driver"], r["us_per_step"], r["floor_us"],
                                            r["vs_floor"]) for r in data["rows"]]

        b8k, p8k = part("b8k.json", "baton", 8192), part("p8k.json", "peer", 8192)
        b64k, p64k = part("b64k.json", "baton", 65536), part("p64k.json", "peer", 65536)
        prev8k, _, _ = made("prev8k.json", "--baton", b8k, "--pytorch", p8k)
        # (a) one context's file plus the other's new inputs: the whole grid, as combining all at once gives it.
        _, m, _ = made("a.json", "--previous", prev8k, "--baton", b64k, "--pytorch", p64k)
        expect([m[k] for k in ("rows", "summary", "date", "device")] == [out[k] for k in ("rows", "summary", "date",
                                                                                      "device")], m)
        t = m["summary"]
        expect([(t[k]["met"], t[k]["of"]) for k in ("floor_target", "faster_target")] == [(1, 2), (3, 5)], t)
        expect([s["file"] for s in m["sources"]] == ["b8k.json", "p8k.json", "prev8k.json", "b64k.json",
                                                     "p64k.json"] and m["sources"][2]["rows"] == 10, m["sources"])
        expect("prev8k.json (context 8192: batches 1, 64, 128)" in m["what"], m["what"])
        # --previous alone: the same file again.
        _, m, _ = made("again.json", "--previous", str(full))
        expect([m[k] for k in ("rows", "summary", "model", "device")] == [out[k] for k in ("rows", "summary", "model",
                                                                                       "device")], m)
        # (b) a point in both: the new input's Baton row and floor (b1 c8192: 550.0 over 500.0), the PyTorch rows
        # kept there against that floor; the other context as it was. Faster now at b64 c8192 too.
        _, m, rows = made("b.json", "--previous", str(full), "--baton", part("fast.json", "baton", 8192, 0.5))
        expect({(1, 8192, "baton-graphs", 550.0, 500.0, 1.1), (1, 8192, FLOOR, 500.0, 500.0, 1.0),
                (1, 8192, GQA, 1500.0, 500.0, 3.0)} <= set(rows) and len(rows) == len(out["rows"]), rows)
        expect([r for r in m["rows"] if r["context"] == 65536] == [r for r in out["rows"] if r["context"] == 65536]
               and (m["summary"]["faster_target"]["met"], m["summary"]["faster_target"]["of"]) == (4, 5), m)
        slow = part("slow.json", "peer", 8192, 2.0, GROUPED)  # the GQA rows only, twice as slow
        _, _, rows = made("p.json", "--previous", str(full), "--pytorch", slow)
        expect((1, 8192, GQA, 3000.0, 1000.0, 3.0) in rows and (1, 8192, "baton-graphs", 1100.0, 1000.0, 1.1) in rows
               and not any(r[1:3] == (8192, GROUPED) for r in rows), rows)
        fast, _, _ = made("fast8k.json", "--baton", str(tmp / "fast.json"), "--pytorch", p8k)
        for order, us in [((str(full), fast), 550.0), ((fast, str(full)), 1100.0)]:  # the later file wins
            _, _, rows = made("order.json", "--previous", *order)
            expect((1, 8192, "baton-graphs", us) in [r[:4] for r in rows], (order, rows))
        # (c) refused: another model's file, another GPU's input, a file that is not this script's.
        other, _, _ = made("other8b.json", "--baton", b8k, "--pytorch", p8k, "--model", "llama-3.1-8b", "--relabel")
        for argv, why, named in [  # the models' message names both labels
                ((other, "--baton", b64k, "--pytorch", p64k), "models differ: ", other),
                ((str(full), "--pytorch", f["elsewhere"]), "devices differ", f["elsewhere"]),
                ((f["missing"],), "no such file", f["missing"]), ((f["garbled"],), "not JSON", f["garbled"]),
                ((f["baton"],), "not a combined roofline file", f["baton"])]:
            code, err = run("--previous", *argv, "--json", str(tmp / "refused.json"))
            expect(code == 2 and why in err and named in err, (why, code, err))
            expect(why != "models differ: " or "'llama-3.1-8b'" in err and "'llama-3.2-1b'" in err, err)
        expect(not (tmp / "refused.json").exists(), "a refused --previous combination wrote its file")
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
