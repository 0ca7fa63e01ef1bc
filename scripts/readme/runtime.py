"""The runtime's part of a performance block: launch_comparison,
queue_contention and graph_prep. Row specs below; a mode the JSON has and
LAUNCH_ROWS does not list is appended under its own name."""
import re

from . import inputs
from .tables import link, series, span, table

HOSTS = ("host launches + sync", "host graph + sync")
TAIL, COND = "Baton tail-launch engine", "Baton conditional engine"
# (label, JSON mode, show speed-ups)
LAUNCH_ROWS = [
    ("host kernel launches + sync per step", "host launches + sync", False),
    ("host graph launch + sync per step (what host-driven loops do)", "host graph + sync", False),
    ("host graph launches pipelined, no decision", "host graph pipelined, no decision", False),
    ("**Baton tail-launch engine** (`Engine::kTailLaunch`, default settings)", TAIL, True),
    ("**Baton tail-launch**, 1 step per launch (`tail_steps_per_launch`)",
     "Baton tail-launch engine, 1 step per launch", True),
    ("**Baton tail-launch**, 2 steps per launch", "Baton tail-launch engine, 2 steps per launch", True),
    ("**Baton tail-launch**, 8 steps per launch", "Baton tail-launch engine, 8 steps per launch", True),
    ("**Baton conditional engine** (`Engine::kConditional`, default settings)", COND, True),
    ("**Baton conditional**, 1 step per iteration (`conditional_steps_per_iteration`)",
     "Baton conditional engine, 1 step per iteration", True),
    ("**Baton conditional**, 2 steps per iteration", "Baton conditional engine, 2 steps per iteration", True),
    ("**Baton conditional**, 8 steps per iteration", "Baton conditional engine, 8 steps per iteration", True),
    ("**Baton conditional**, a program with 2 buckets", "Baton conditional engine, 2 buckets", True),
    ("**Baton tail-launch**, synthetic step program", "Baton tail-launch engine, synthetic step", True),
    ("**Baton dynamic-parallelism engine**, synthetic step program", "Baton DP engine, synthetic step", True),
    ("raw: scheduler graph tail-launches the step graph, then itself", "device: scheduler graph + step graph", True),
    ("raw: scheduler fused into the step graph (the engine's shape)", "device: scheduler fused into step graph", True),
    ("raw: fused, every node with programmatic dependent launch (PDL)",
     "device: fused + programmatic launch (PDL)", True),
    ("raw: dynamic parallelism (device kernel launches)", "dynamic parallelism", False),
    ("persistent kernel, grid barriers (floor)", "persistent kernel (floor)", False),
]
STATEMENT_K = 3  # the K the prose compares variants at
# Modes the prose states (at STATEMENT_K) instead of the table; every other mode is a row.
PROSE_ONLY = {TAIL + ", trace on", COND + ", trace on", TAIL + ", watchdog off", COND + ", watchdog off"}


def _cells(b, data):
    cells = {(r["mode"], r["K"]): dict(r) for r in data["rows"]}
    for (mode, k), r in cells.items():
        if "vs faster host" not in r:  # runs before the JSON had the column
            faster = min(cells[(h, k)]["us/step"] for h in HOSTS if (h, k) in cells)
            r["vs faster host"] = b.derive(faster / r["us/step"])
    return cells


def _faster_host(data, cells, ks):
    """{K: the faster host loop's mode}: the JSON's "K=<k> faster host loop" params, else the smaller step."""
    p = data["params"]
    return {k: p.get(f"K={k} faster host loop") or min(HOSTS, key=lambda h: cells[(h, k)]["us/step"])
            for k in ks}


def launch_part(b, prefix):
    path = inputs.path_of(prefix, "launch")
    d = b.json(path)
    cells = _cells(b, d)
    ks = sorted({k for _, k in cells})
    listed = {mode for _, mode, _ in LAUNCH_ROWS} | PROSE_ONLY
    rows = LAUNCH_ROWS + [(m, m, m.startswith("Baton")) for m in dict.fromkeys(r["mode"] for r in d["rows"])
                          if m not in listed]

    def cell(mode, k, ratios):
        r = cells.get((mode, k))
        if r is None:
            return "n/a"
        if not ratios:
            return f"{r['us/step']:.1f}"
        if "vs host launches+sync" not in r:  # runs before the JSON had the column
            return f"{r['us/step']:.1f} ({r['vs host graph+sync']:.1f}× · {r['vs faster host']:.1f}×)"
        return f"{r['us/step']:.1f} ({r['vs host launches+sync']:.1f}× · {r['vs host graph+sync']:.1f}×)"

    faster = _faster_host(d, cells, ks)
    both = all("vs host launches+sync" in r for r in cells.values())
    short = {"host launches + sync": "launches", "host graph + sync": "graph"}
    columns = [("µs per step (speed-up over host launches + sync · over host graph + sync)" if both else
                "µs per step (speed-up over host graph + sync · over the faster host loop)",
                lambda row: row[0])] + [
        (f"K = {k}" + (f" (faster host: {short.get(faster[k], faster[k])})" if both else ""),
         lambda row, k=k: cell(row[1], k, row[2])) for k in ks]
    present = [row for row in rows if any((row[1], k) in cells for k in ks)]
    steps = b.code("include/baton/runtime.h", r"tail_steps_per_launch = (\d+);")
    if steps != b.code("include/baton/runtime.h", r"conditional_steps_per_iteration = (\d+);"):
        raise inputs.NumberCheckError("the engines' default steps per launch / iteration differ: say both")
    out = [f"### Driving the decode loop (`launch_comparison`){b.heading}", "",
           f"{link(path)} ({d['device']['name']}, {d['date'][:10]}): a step is K tiny kernels, and "
           "whether to run another step is decided from device data after every step. The Baton rows "
           "go through the public `Runtime` API (queue, scheduler, completion mailbox): each timed "
           f"run submits one item that asks for {d['params']['steps']} steps. **Timing:** CUDA events "
           "on the stream around each whole run (the host loops' synchronizations inside it), "
           f"median of {d['params']['repeats']} runs after warm-up, per step; every run is verified. The "
           f"default engines capture {steps} steps per bucket graph / loop body (`include/baton/runtime.h`).",
           "", table(columns, present), ""]
    out += [" ".join(_launch_notes(b, cells, ks, _faster_host(d, cells, ks))), ""]
    return out


def _launch_notes(b, cells, ks, faster):
    notes = []
    notes.append("The faster host loop (the JSON's \"K=… faster host loop\" params) is " + series(
        f"`{h}` at K = {series([str(k) for k in ks if faster[k] == h], ', ')}"
        for h in HOSTS if h in faster.values()) + ".")
    spans, slower = [], []
    for eng in (TAIL, COND):
        vs = {k: cells[(eng, k)]["vs faster host"] for k in ks if (eng, k) in cells}
        spans.append(f"{eng[len('Baton '):-len(' engine')]} {span(list(vs.values()), '.1f')}×")
        slower += [f"the {eng[len('Baton '):]} at K = {k}" for k, v in vs.items() if v <= 1]
    notes.append(f"Against it the default engines run {series(spans)} faster over K = "
                 f"{series([str(k) for k in ks], ', ')}" +
                 (f", except {series(slower)}." if slower else "."))
    pipe = "host graph pipelined, no decision"
    beat = [k for k in ks if all((e, k) in cells and cells[(e, k)]["us/step"] < cells[(pipe, k)]["us/step"]
                                 for e in (TAIL, COND))]
    notes.append(f"Both beat pipelined host graphs that decide nothing at K = {series([str(k) for k in beat], ', ')}."
                 if beat else "Neither beats pipelined host graphs that decide nothing.")
    k = next((x for x in ks if x == STATEMENT_K), None)  # the JSON's K, so printing it is checked
    if (COND, k) in cells:
        variants = [(v, cells.get((COND + ", " + v, k))) for v in ("2 buckets", "watchdog off")]
        have = [f"{r['us/step']:.2f} µs with {v}" for v, r in variants if r]
        notes.append(f"At K = {k} the default conditional engine measured {cells[(COND, k)]['us/step']:.2f} µs"
                     + (f" ({series(have)})." if have else "."))
        costs = []
        for eng in (TAIL, COND):
            on, off = cells.get((eng + ", trace on", k)), cells.get((eng + ", watchdog off", k))
            base = cells[(eng, k)]["us/step"]
            if on and off:
                costs.append(f"{b.derive(on['us/step'] - base):+.2f} and {b.derive(base - off['us/step']):+.2f} "
                             f"µs on the {eng[len('Baton '):-len(' engine')]} engine")
        if costs:
            notes.append(f"The device trace and the watchdog cost {series(costs, '; ')} (the JSON's \"trace on\" "
                         "and \"watchdog off\" rows).")
    dp, raw = cells.get(("Baton DP engine, synthetic step", k)), cells.get(("dynamic parallelism", k))
    if dp and raw:
        notes.append(f"The dynamic-parallelism engine ({dp['us/step']:.1f} µs at K = {k}) pays what device kernel "
                     f"launches cost (raw: {raw['us/step']:.1f} µs); it is the fallback for batches outside every "
                     "bucket.")
    return notes


# Queue pops at full contention: (label, pop kinds); each cell joins its kinds' values.
QUEUE_ROWS = [
    ("per-thread", ["per-thread pop"]),
    ("warp-batched ×32 / ×128 / ×256", ["warp pop x32", "warp pop x128", "warp pop x256"]),
    ("block-batched ×1024 / ×2048 / ×4096", ["block pop x1024", "block pop x2048", "block pop x4096"]),
]
QUEUE_GRID, QUEUE_COST = "8x256/SM", "none"


def queue_part(b, prefix):
    path = inputs.path_of(prefix, "queue")
    d = b.json(path)
    p = d["params"]
    pops = {r["pop"]: r for r in d["rows"]
            if r.get("part") == "pop" and r["grid"] == QUEUE_GRID and r["cost"] == QUEUE_COST}
    best = p.get("best batched pop kind")

    def join(kinds, key, fmt):
        return " / ".join((f"**{pops[k][key]:{fmt}}**" if k == best and key == "Gpops/s" else
                           f"{pops[k][key]:{fmt}}") for k in kinds if k in pops)
    columns = [("pop", lambda r: r[0]),
               ("Gpops/s", lambda r: join(r[1], "Gpops/s", ".2f" if len(r[1]) == 1 else ".1f")),
               ("atomics per item", lambda r: join(r[1], "atomics/item", ".3g"))]
    out = [f"### Work queue (`queue_contention`){b.heading}", "",
           f"{link(path)} ({d['device']['name']}, {d['date'][:10]}): pops of 1-item tasks at full "
           f"contention (8 blocks × 256 threads per SM), {p['items']:,} items per batched run "
           f"({p['single_items']:,} per-thread), exactly once on every run. **Timing:** CUDA events around "
           f"the consuming kernel, median of {p['repeats']} runs after warm-up.", "",
           table(columns, [r for r in QUEUE_ROWS if any(k in pops for k in r[1])]), ""]
    notes = []
    key = next((k for k in p if k.startswith("target ") and k.endswith(" pops/s met")), None)
    if key:
        target = b.derive(float(re.search(r"target ([\d.e+]+) pops/s", key).group(1)) / 1e9)
        notes.append(f"The target was {target:.0f} Gpops/s: {'met' if p[key] else '**missed**'} "
                     f"({p['best batched pop rate (Gpops/s, no work, full grid)']:.1f}, {best}).")
    floor = b.derive(p["pop floor from copy bandwidth (pops/s)"] / 1e9)
    notes.append(f"The bandwidth floor at {p['bytes per pop (descriptor+seq read+seq write+mark)']:.0f} "
                 f"bytes per pop is {floor:.0f} Gpops/s ({p['D2D copy GB/s (read+write)']:.0f} GB/s "
                 "measured copy bandwidth).")
    notes.append(_uneven(b, d["rows"]))
    return out + [" ".join(n for n in notes if n), ""]


def _uneven(b, rows):
    """Static vs queue scheduling of uneven work, from the JSON's 'static vs dynamic' rows."""
    groups = {}
    for r in rows:
        if r.get("part") == "static vs dynamic":
            groups.setdefault((r["cost"], r["items"]), []).append(r)
    if not groups:
        return ""
    queue_best, wins = 0, []
    for (cost, items), rs in groups.items():
        q = max(r["vs 1 thread/item"] for r in rs if r["pop"].startswith("queue"))
        s = max(r["vs 1 thread/item"] for r in rs if r["pop"].startswith("static: chunk"))
        queue_best = max(queue_best, q)
        if q > s:
            wins.append(f"{cost}, {items:,} items")
    never = "never beats" if queue_best < 1 else "sometimes beats"
    return (f"For uneven work the queue beats static chunks per warp in {b.derive(len(wins))} of "
            f"{b.derive(len(groups))} "
            f"cases ({series(wins)}) and {never} one thread per item, which the hardware block "
            f"scheduler balances (at best {queue_best:.2f}× its speed; the JSON's \"static vs dynamic\" rows).")


def prep_part(b, prefix):
    path = inputs.path_of(prefix, "prep")
    d = b.json(path)
    p = d["params"]
    total = next(r for r in d["rows"] if r["phase"] == "total")
    target = b.code("samples/graph_prep/main.cc", r"ABSL_FLAG\(double, target_ms, (\d+)")
    check = next((r for r in d["rows"] if r["phase"].startswith("verify")), None)
    if check is not None:  # every bucket (or a count) checked bit for bit
        differ = check["buckets differing"]
        verified = (("Every bucket graph" if check["buckets verified"] == p["buckets"] else
                     f"Of the {p['buckets']} bucket graphs, {check['buckets verified']}")
                    + f" ({check['buckets verified']}, {p['verify_ms']:.0f} ms; "
                    + (f"{differ} differing" if differ == 0 else f"**{differ} differing**") + ") was")
    elif "verified_buckets" in p:
        verified = f"Of the {p['buckets']} bucket graphs, {p['verified_buckets']} were"
    else:
        verified = f"One bucket's graph (the {p['verified_bucket_tokens']}-token bucket) was"
    timed = p.get("timed_bucket_tokens")
    first, worst = f"{total['ms (first run)']:.0f}", f"{p['total_ms_worst_run']:.0f}"
    return [f"### Preparing bucket graphs (`graph_prep`){b.heading}", "",
            f"{link(path)} ({d['device']['name']}, {d['date'][:10]}): {p['buckets']} bucket graphs "
            f"(buckets {p['bucket_sizes']} tokens) of a {p['layers']}-layer decode step (hidden "
            f"{p['hidden']}, FFN {p['ffn']}, vocabulary {p['vocab']}, at least "
            f"{p['kernel_nodes_per_graph_min']} kernel nodes each, cuBLASLt GEMMs with an explicit "
            "workspace): plans, capture, validate, instantiate for device launch, upload and mirror the "
            f"table in **{total['ms (median run)']:.1f} ms** (median of {p['repeats']} runs; {first} ms on the "
            "first, cold run, mostly lazy module loading" + ("" if worst == first else f"; worst {worst} ms") +
            f"; the sample's limit: {b.derive(target / 1000):.0f} s; phases in the JSON). {verified} checked "
            "bit for bit against direct launches, from the host and tail-launched by a device scheduler. "
            "**Timing:** the host wall clock (`std::chrono::steady_clock`: host-side API costs); the prepared "
            "step" + (f" (the {timed}-token bucket)" if timed is not None else "") +
            f", CUDA events: {p['step_us_graph_host_launch_median']:.1f} µs as a graph launch, "
            f"{p['step_us_direct_stream_launches_median']:.1f} µs as direct stream launches.", ""]
