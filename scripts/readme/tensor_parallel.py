"""The tensor-parallel block: one model over the GPUs of a host (issue #42), Baton's step beside its floor and the
PyTorch tensor-parallel peer, from every current results/<gpu>x<N>-*-tp-<model>.json (written by
scripts/peers/combine_tp.py), a table per file (each file is one call, or says where it is not: compare within a
table), with the all-reduce microbenchmark where the file has one. README.md holds it between its markers."""
from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .tables import link, series, span, table

GLOB = "*-tp-*.json"


def files():
    return [p for p in inputs.current(GLOB) if inputs._PREFIX.match(p.name) and "x" in p.name.split("-")[0]]


def _allreduce(rows):
    """'at TP2 5.45–5.58 µs against NCCL's 7.13–8.10 ...': Baton's all-reduce per size range, beside each peer."""
    names = {"nccl (all_reduce sample)": "NCCL's", "nccl": "NCCL's through PyTorch",
             "pytorch-symm": "PyTorch's symmetric-memory one-shot"}
    parts = []
    for tp in sorted({r["tp"] for r in rows}):
        ours = [r["us_per_call"] for r in rows if r["tp"] == tp and r["driver"] == "baton"]
        if not ours:
            continue
        peers = [f"{name} {span([r['us_per_call'] for r in rows if r['tp'] == tp and r['driver'] == d], '.2f')}"
                 for d, name in names.items()
                 if any(r["tp"] == tp and r["driver"] == d and r["us_per_call"] is not None for r in rows)]
        sizes = sorted({r["bytes"] for r in rows if r["tp"] == tp and r["driver"] == "baton"})
        parts.append(f"TP{tp}, {sizes[0] // 1024}–{sizes[-1] // 1024} KB: {span(ours, '.2f')} µs against "
                     + series(peers))
    return "; ".join(parts)


def tensor_parallel_block():
    b = inputs.Block("tensor-parallel")
    b.exempt += EXEMPT_NAMES + ["Llama-3.1-70B"]
    found = inputs.require(sorted(files(), key=inputs.order), "tensor-parallel", GLOB,
                           "scripts/peers/combine_tp.py")
    out = []
    for path in found:
        d = b.json(path)
        # Baton's graph replay (the bound; files before the lockstep driver name no driver), and where the file
        # has them the device-decided loop's rows (samples/tensor_parallel --lockstep).
        baton = {(r["tp"], r["batch"]): r for r in d["rows"]
                 if r.get("source") == "baton" and r.get("driver", "baton-graphs") == "baton-graphs"}
        lockstep = {(r["tp"], r["batch"]): r for r in d["rows"]
                    if r.get("source") == "baton" and r.get("driver") == "baton-lockstep"}
        best = {}
        for r in d["rows"]:
            if r.get("source") != "pytorch" or r.get("us_per_step") is None:
                continue
            k = (r["tp"], r["batch"])
            if k not in best or r["us_per_step"] < best[k]["us_per_step"]:
                best[k] = r
        points = sorted(baton)
        context = d["rows"][0]["context"]
        model = DISPLAY.get(d["model"], {"llama-3.1-70b": "Llama-3.1-70B"}.get(d["model"], d["model"]))
        cols = [("TP", lambda k: f"{k[0]}"), ("batch", lambda k: f"{k[1]}"),
                ("Baton µs/step (× floor)",
                 lambda k: f"{baton[k]['us_per_step']:,.0f} ({b.derive(baton[k]['us_per_step'] / baton[k]['floor_us']):.2f}×)"),
                ("floor µs", lambda k: f"{baton[k]['floor_us']:,.0f}")]
        if lockstep:
            cols[2] = ("Baton graph replay µs/step (× floor)", cols[2][1])
            cols.insert(3, ("device-decided loop µs/step (× floor)", lambda k: "" if k not in lockstep else
                            f"{lockstep[k]['us_per_step']:,.0f} "
                            f"({b.derive(lockstep[k]['us_per_step'] / lockstep[k]['floor_us']):.2f}×)"))
        if best:
            cols += [("best PyTorch µs/step", lambda k: "" if k not in best else
                      f"{best[k]['us_per_step']:,.0f} ({best[k]['driver'].replace('pytorch-', '')})"),
                     ("PyTorch / Baton", lambda k: "" if k not in best else
                      f"{b.derive(best[k]['us_per_step'] / baton[k]['us_per_step']):.2f}×")]
        peer = " beside PyTorch's tensor-parallel step (`scripts/peers/tp_peers.py`)" if best else " (no peer)"
        gpus = d["gpus"] if not isinstance(d["gpus"], list) else max(d["gpus"])
        out += [f"{model}'s shape, random bf16 weights, {context} tokens of context, µs per decode step on "
                f"{gpus} {d['gpu']}s{peer} ({link(path)}):", "", table(cols, points), ""]
        if d.get("allreduce") and _allreduce(d["allreduce"]):
            out += [f"All-reduce of bf16 rows, 64 calls per CUDA graph, µs per call: {_allreduce(d['allreduce'])}.",
                    ""]
    return b, "\n".join(out).rstrip()
