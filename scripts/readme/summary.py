"""The README's performance summary: the key rows of every GPU's run side by
side; each GPU's full block is generated into docs/performance-<gpu>.md."""
from . import decode, inputs, runtime
from .tables import link, series, table

# decode_loop drivers the summary shows (the bound row: either name).
SUMMARY_DRIVERS = [
    ("bound: graph replays of the same steps, no decision", decode.BOUNDS),
    ("host loop: graph launch + sync", (decode.HOST,)),
    ("**Baton tail-launch**", ("Baton tail-launch",)),
    ("**Baton conditional**", ("Baton conditional",)),
]
LAUNCH_DRIVERS = [
    ("host kernel launches + sync", "host launches + sync"),
    ("host graph launch + sync", "host graph + sync"),
    ("**Baton tail-launch engine**", runtime.TAIL),
    ("**Baton conditional engine**", runtime.COND),
]


def doc_path(prefix):
    return inputs.ROOT / "docs" / f"performance-{inputs.gpu_of(prefix)[0]}.md"


def _gpu(prefix):
    return inputs.gpu_of(prefix)[0].upper()


def summary_block(prefixes):
    b = inputs.Block("performance")
    runs = []
    for prefix in prefixes:
        r = {"prefix": prefix, "gpu": _gpu(prefix)}
        for part in ("suite", "decode", "launch", "queue", "prep"):
            r[part] = b.json(inputs.path_of(prefix, part))
        runs.append(r)
    dev = runs[0]["launch"]["device"]
    cuda = b.derive(dev["driver_version"] // 1000 + dev["driver_version"] % 1000 / 1000)
    docs = series(link(doc_path(r["prefix"]), short=False) for r in runs)
    suites = series(f"{r['suite']['totals']['passed']} passed, {r['suite']['totals']['failed']} failed, "
                    f"{r['suite']['totals']['skipped']} skipped on the {r['gpu']} "
                    f"({link(inputs.path_of(r['prefix'], 'suite'))})" for r in runs)
    out = [f"{series(r['launch']['device']['name'] + ' (`results/' + r['prefix'] + '-*`)' for r in runs)}, "
           f"CUDA {cuda:.1f} driver. Each GPU's full results — how each part was timed, both `decode_loop` GEMM "
           "modes, the soak, every `launch_comparison` variant, the work queue, graph preparation and "
           f"compute-sanitizer — are in {docs}; below are their key rows. GPU suite: {suites}.", ""]
    out += _decode(b, runs) + _launch(b, runs) + _rest(b, runs)
    return b, "\n".join(out).rstrip()


def _decode(b, runs):
    def cell(r, scenario, names):
        row = next((x for x in r["decode"]["rows"] if x["scenario"].strip() == scenario and x["driver"] in names),
                   None)
        if row is None:
            return "n/a"
        if "vs_host" not in row:
            return f"{row['step_us']:.1f}"
        return f"{row['step_us']:.1f} · {decode._overhead(row)} · {row['vs_host']:.2f}×"
    scenarios = decode._scenarios(runs[0]["decode"]["rows"])
    cols = [("scenario", lambda x: x[0]), ("driver", lambda x: x[1])] + [
        (f"{r['gpu']}: {link(inputs.path_of(r['prefix'], 'decode'))}", lambda x, r=r: cell(r, x[0], x[2]))
        for r in runs]
    rows = [(sc, label, names) for sc in scenarios for label, names in SUMMARY_DRIVERS]
    p = runs[0]["decode"]["params"]
    out = [f"**The decode loop** (`decode_loop --gemm={p['gemm']}`, the main sample: a synthetic decoder, "
           f"{p['requests_per_slot']} requests per KV-cache slot of {p['prompt_tokens']}-token prompts and "
           f"{p['new_tokens']} new greedy tokens, continuously batched; driven by a host loop that launches the "
           "bucket's CUDA graph and synchronizes every step, and by Baton's engines). Each cell: µs per step "
           "(device step clock) · overhead µs over the bound (graph replays of the same steps with no decision) "
           "· tokens/s against the host loop's.", "", table(cols, rows), ""]
    notes = []
    for r in runs:
        d = r["decode"]
        bad = [x for x in d["rows"] if x.get("same_tokens") is False]
        met = [k for k, v in d["params"].items() if k.startswith("target ") and v.endswith(": met")]
        targets = [k for k in d["params"] if k.startswith("target ")]
        below = [k[len("below bound "):] for k in d["params"] if k.startswith("below bound ")]
        notes.append(f"{r['gpu']}: " + ("every engine produced the host loop's tokens" if not bad else
                                        "**not every engine produced the host loop's tokens**") +
                     f"; {b.derive(len(met))} of {b.derive(len(targets))} of the sample's targets met" +
                     (f"; some engines beat the bound at {series(below)} (the JSON's \"below bound\" "
                      "params: there it is not a lower bound)" if below else "") + ".")
    return out + [" ".join(notes), ""]


def _launch(b, runs):
    ks = sorted({x["K"] for r in runs for x in r["launch"]["rows"]})
    cells = {r["gpu"]: runtime._cells(b, r["launch"]) for r in runs}
    faster = {r["gpu"]: runtime._faster_host(r["launch"], cells[r["gpu"]], ks) for r in runs}

    def cell(row, k):
        gpu, mode = row[0], row[2]
        c = cells[gpu].get((mode, k))
        if c is None:
            return "n/a"
        if mode in runtime.HOSTS:
            return f"{c['us/step']:.1f}" + (" (faster)" if faster[gpu][k] == mode else "")
        return f"{c['us/step']:.1f} ({c['vs faster host']:.1f}×)"
    cols = [("GPU", lambda x: f"{x[0]}: {link(inputs.path_of(x[3], 'launch'))}" if x[4] else x[0]),
            ("driver", lambda x: x[1])] + [(f"K = {k}", lambda x, k=k: cell(x, k)) for k in ks]
    rows = [(r["gpu"], label, mode, r["prefix"], i == 0) for r in runs for i, (label, mode) in
            enumerate(LAUNCH_DRIVERS)]
    return [f"**Driving the decode loop** (`launch_comparison`: a step is K tiny kernels and whether to run "
            "another is decided from device data after every step; the Baton engines through the public "
            "`Runtime` API). µs per step (CUDA events around each whole run), the engines' speed-up over the "
            "faster of the two host loops at that K in parentheses:", "", table(cols, rows), ""]


def _rest(b, runs):
    notes = []
    for r in runs:
        prefix, gpu = r["prefix"], inputs.gpu_of(r["prefix"])[0]
        soak = []
        for part in ("soak", "soak_conditional"):
            path = inputs.path_of(prefix, part)
            if not inputs.has(prefix, part):
                other = inputs.newest(gpu, part)
                path = inputs.path_of(other, part) if other else None
            if path is None:
                continue
            d = b.json(path)
            x = d["rows"][0]
            soak.append(f"{d['params']['soak_engine']} {x['steps']:,} steps, {x['lost']} lost, "
                        f"{x['bad_completions']} wrong" +
                        (f", {x['mismatched']} of {x['checked']:,} checked requests mismatched" if "checked" in x
                         else " (no token check: it predates it)") +
                        f" ({link(path)})")
        q = r["queue"]["params"]
        prep = r["prep"]
        total = next(x for x in prep["rows"] if x["phase"] == "total")
        check = next((x for x in prep["rows"] if x["phase"].startswith("verify")), None)
        verified = (f", every bucket verified ({check['buckets verified']}, {check['buckets differing']} differing)"
                    if check and check["buckets verified"] == prep["params"]["buckets"] else "")
        notes.append(f"{r['gpu']}: soak: {series(soak, '; ')}. Work queue: "
                     f"{q['best batched pop rate (Gpops/s, no work, full grid)']:.1f} Gpops/s "
                     f"({q['best batched pop kind']}, {link(inputs.path_of(prefix, 'queue'))}). Graph preparation: "
                     f"{prep['params']['buckets']} bucket graphs in {total['ms (median run)']:.1f} ms{verified} "
                     f"({link(inputs.path_of(prefix, 'prep'))}).")
    return ["\n\n".join(notes), ""]
