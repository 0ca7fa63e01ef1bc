"""The decode loop's part of a performance block: decode_loop (auto and GEMV
runs) and its soak. Tables are driven by the column and label specs below: a
new row in the JSON appears under its own name, a new column is one tuple."""
import re

from . import inputs
from .tables import field, link, series, span, table

# Driver names as the JSON writes them -> how the table labels them ({...}
# fields come from the row). A driver not listed keeps its own name.
DRIVER_LABELS = {
    "graph replays of the same steps, no decision (bound)":
        "bound: graph replays of the same steps, no decision (HBM floor {hbm_floor_us:.1f} µs)",
    "host graph replays, no decision (bound)":
        "full-batch graph replays, no decision (HBM floor {hbm_floor_us:.1f} µs)",
    "host graph + sync": "host loop: graph launch + sync",
}
SAME_STEPS_BOUND = "graph replays of the same steps, no decision (bound)"
BOUNDS = (SAME_STEPS_BOUND, "host graph replays, no decision (bound)")  # this run's, runs before
HOST = "host graph + sync"


def _overhead(row):
    if "overhead_us" not in row:
        return ""  # the bound row
    return "n/a" if row["overhead_us"] is None else f"{row['overhead_us']:.1f}"


def _driver(row):
    label = DRIVER_LABELS.get(row["driver"], row["driver"]).format(**row)
    return f"**{label}**" if row["driver"].startswith("Baton") else label


DECODE_COLUMNS = [
    ("scenario", field("scenario", lambda s: s.strip())),
    ("driver", _driver),
    ("µs/step (p50 / p99)", lambda r: f"{r['step_us']:.1f}" + (
        f" ({r['p50_us']:.1f} / {r['p99_us']:.1f})" if "p50_us" in r else "")),
    ("overhead µs", _overhead),
    ("tokens/s", field("tokens_per_s", ",.0f")),
    ("vs host loop", field("vs_host", lambda v: f"{v:.2f}×")),
    ("same tokens", field("same_tokens", lambda v: "yes" if v else "**NO**")),
]

# Soak rows: one per soak file of the run (a new JSON field: one more tuple).
SOAK_COLUMNS = [
    ("engine", lambda r: r["_engine"]),
    ("steps", field("steps", ",")),
    ("s", field("seconds", ".0f")),
    ("requests submitted / completed", lambda r: f"{r['submitted']:,} / {r['completed']:,}"),
    ("lost", field("lost", "d")),
    ("wrong or duplicated", field("bad_completions", "d")),
    ("tokens", field("tokens", ",")),
    ("MiB at start / end", lambda r: f"{r['mem_start_MiB']:.0f} / {r['mem_end_MiB']:.0f}"),
    ("µs/step p50 / p99, first window", lambda r: f"{r['first_p50_us']:.1f} / {r['first_p99_us']:.1f}"),
    ("last window", lambda r: f"{r['last_p50_us']:.1f} / {r['last_p99_us']:.1f}"),
    ("requests checked (stop repeats) / mismatched", lambda r: (
        f"{r['checked']:,} ({r['checked_stop_repeats']:,}) / {r['mismatched']}" if "checked" in r else "not run")),
    ("passed", lambda r: "yes" if r["_passed"] else "**NO**"),
]


def _preset_params(b, name):
    """The preset's config and its (total, read per step) parameters, from presets.h."""
    rel = "samples/decode_loop/presets.h"
    m = re.search(r'name == "%s"\) \{(.*?)\}' % name, (inputs.ROOT / rel).read_text(), re.S)
    if not m:
        raise inputs.NumberCheckError(f"{rel}: no preset '{name}'")
    b._cite(inputs.ROOT / rel)
    c = b.given({k: int(v) for k, v in re.findall(r"c\.(\w+) = (\d+);", m.group(1))})
    kv = c.get("kv_heads", c["heads"]) * c["head_dim"]
    attn = c["heads"] * c["head_dim"]
    d = c["d_model"]
    layer = 2 * d + d * (attn + 2 * kv) + attn * d + d * 2 * c["ffn"] + c["ffn"] * d
    embedding = c["vocab"] * d
    # The synthetic model is untied (src/model/model_weights.cc): a step reads
    # everything but the embedding table.
    read = c["layers"] * layer + d + embedding
    return c, read + embedding, read


def _check_floor(data, name, read_params):
    """The preset's parameters must be what the run's HBM floor read (2 bytes each)."""
    p = data["params"]
    bw = max(p["copy_bandwidth_GBps"], p.get("read_bandwidth_GBps", 0)) * 1e9
    for r in data["rows"]:
        if r["scenario"].strip().startswith(name + " ") and "hbm_floor_us" in r:
            got = r["hbm_floor_us"] * 1e-6 * bw / 2
            if abs(got / read_params - 1) > 0.005:
                raise inputs.NumberCheckError(
                    f"{name}: presets.h gives {read_params} parameters per step, the run's HBM floor "
                    f"{got:.0f}: the preset changed since the run")
            return


def _scenarios(rows):
    out = []
    for r in rows:
        if r["scenario"].strip() not in out:
            out.append(r["scenario"].strip())
    return out


def _rows(data, scenario, engines_only=False):
    rows = [r for r in data["rows"] if r["scenario"].strip() == scenario]
    return [r for r in rows if r["driver"].startswith("Baton")] if engines_only else rows


def _graph_engines(data, scenario):
    return [r for r in _rows(data, scenario, True) if "dynamic" not in r["driver"]]


def _same_tokens(data, where):
    bad = [f"{r['scenario'].strip()} {r['driver']}" for r in data["rows"]
           if r.get("same_tokens") is False]
    if bad:
        return (f"**Not every engine produced the host loop's tokens** in {where}: "
                f"{series(bad)} differed.")
    return (f"Every engine produced the host loop's tokens for every request in {where} "
            "(the sample compares each engine's last timed run with the host loop's).")


def decode_part(b, prefix):
    gpu, date = inputs.gpu_of(prefix)
    path = inputs.path_of(prefix, "decode")
    d = b.json(path)
    p = d["params"]
    gemv_max = b.code("include/baton/decoder_model.h", r"auto_gemv_max_bucket = (\d+);")
    presets = []
    for name in ("tiny", "small"):
        c, total, read = _preset_params(b, name)
        _check_floor(d, name, read)
        total, read = b.derive(total / 1e6), b.derive(read / 1e6)
        presets.append(f"{name}: {c['layers']} layers, d_model {c['d_model']}, vocabulary "
                       f"{c['vocab']:,} ({total:.1f}M parameters, {read:.1f}M without the embedding table)")
    out = [f"### The decode loop (`decode_loop`, the main sample){b.heading}", "",
           f"{link(path)} ({d['device']['name']}, {d['date'][:10]}): a decoder-only transformer ({p['dtype']} "
           f"weights from a seed, fp32 accumulation; `--gemm={p['gemm']}`: Baton's GEMV up to bucket "
           f"{gemv_max}, cuBLASLt above) serves {p['requests_per_slot']} requests per KV-cache slot "
           f"({p['prompt_tokens']}-token prompts, {p['new_tokens']} new tokens, greedy), continuously batched, "
           "driven by a host loop (schedule, copy the step's arguments, launch the bucket's CUDA graph, "
           "synchronize: every step, as PyTorch/vLLM-style loops do) and by each Baton engine; the kernel-level "
           "choices are in `docs/DESIGN.md` and the CUDA facts they rest on in `docs/cuda-facts.md`. Models "
           f"(`samples/decode_loop/presets.h`): {series(presets, '; ')}. **Timing:** the device's step clock "
           "(the global timer at every step end: each run's mean step and p50/p99), medians of "
           f"{p['repeats']} runs after a warm-up run; tokens/s from the host wall clock; " + _bound_timing(d) +
           " The HBM floor: the weights a step reads (all but the embedding table) at " +
           (f"the better of the measured copy ({p['copy_bandwidth_GBps']:.0f} GB/s) and read "
            f"({p['read_bandwidth_GBps']:.0f} GB/s) bandwidths." if "read_bandwidth_GBps" in p else
            f"the measured copy bandwidth ({p['copy_bandwidth_GBps']:.0f} GB/s)."), "",
           table(DECODE_COLUMNS, d["rows"]), ""]
    notes = [_same_tokens(d, "every scenario")] + _bound_notes(b, d)
    first = _scenarios(d["rows"])[0]
    eng = [r for r in _graph_engines(d, first) if r.get("overhead_us") is not None]
    host = next((r for r in _rows(d, first) if r["driver"] == HOST), None)
    if eng and host and host.get("overhead_us") is not None:
        notes.append(f"At {first} the graph engines' overhead is "
                     f"{span([r['overhead_us'] for r in eng], '.1f')} µs per step against the host "
                     f"loop's {host['overhead_us']:.1f}.")
    notes.append(_same_day(b, gpu, date, first, prefix))
    for sc in _scenarios(d["rows"]):
        bound = next((r for r in _rows(d, sc) if r["driver"] in BOUNDS), None)
        if sc.startswith("small") and bound:
            ratio = b.derive(bound["step_us"] / bound["hbm_floor_us"])
            notes.append(f"The {sc} bound step is {ratio:.1f}× its HBM floor "
                         f"({bound['step_us']:.1f} against {bound['hbm_floor_us']:.1f} µs).")
            break
    notes.append(_targets(d))
    out += [" ".join(n for n in notes if n), ""]
    if inputs.has(prefix, "gemv"):
        out += gemv_part(b, inputs.path_of(prefix, "gemv"))
    out += soak_part(b, prefix)
    return out


def _bound_timing(data):
    """How the bound row was timed (the same-steps bound, or the full-batch replays of runs before it)."""
    bounds = [r for r in data["rows"] if r["driver"] == SAME_STEPS_BOUND]
    if not bounds:
        return ("the replay row from CUDA events around back-to-back replays of the full-batch graph, which "
                "overhead is measured against.")
    return ("the bound row from CUDA events around graph replays of the same steps the drivers ran (the same "
            f"batch-size schedule, {span([r['steps'] for r in bounds], 'd')} steps, "
            f"{span([r['steps_per_graph'] for r in bounds], 'd')} steps per graph) with no "
            "decision between them, median of the runs; overhead is a driver's step minus the bound's, "
            "n/a where a driver ran another number of steps.")


def _bound_notes(b, data):
    """The sample's "below bound <scenario>" and "off schedule <scenario>, <driver>" params, stated."""
    notes = []
    below = {k[len("below bound "):]: v for k, v in data["params"].items() if k.startswith("below bound ")}
    if below:
        parts = []
        for sc, v in below.items():
            rows = [r for r in _rows(data, sc, True) if (r.get("overhead_us") or 0) < 0]
            parts.append(f"{series(r['driver'] for r in rows)} at {sc} "
                         f"({series([format(r['overhead_us'], '.1f') for r in rows])} µs)")
        notes.append("Faster than the bound (the JSON's \"below bound\" params: timing noise, or the bound is "
                     f"not one there, so their overhead is not meaningful): {series(parts, '; ')}.")
    off = [k[len("off schedule "):] for k in data["params"] if k.startswith("off schedule ")]
    if off:
        notes.append(f"Off the bound's schedule, so no overhead (the JSON's \"off schedule\" params): {series(off, '; ')}.")
    if not below and not off:
        negative = [r for r in data["rows"] if (r.get("overhead_us") or 0) < 0]
        if negative and not any(r["driver"] == SAME_STEPS_BOUND for r in data["rows"]):
            where = series(list(dict.fromkeys(r["scenario"].strip() for r in negative)))
            notes.append("The replay row is not a bound for the same work: it replays the full-batch graph while "
                         f"the engines move to smaller buckets as requests finish, so {b.derive(len(negative))} "
                         f"engine rows (at {where}) show a negative overhead.")
    return notes


def _targets(data):
    """The sample's verdicts ('target tiny b1': '... (target >= 1.25x): met'), briefly."""
    out = []
    for k, v in data["params"].items():
        if k.startswith("target "):
            m = re.match(r"(\w+ engine)( removes)?.*\(target ([^)]*)\): (\w+)$", v)
            what = f"{m.group(1)}{m.group(2) or ''} {m.group(3)}" + (" of the overhead" if m.group(2) else "") \
                if m else ""
            out.append(f"{k[len('target '):]} {m.group(4)} ({what})" if m else f"{k[len('target '):]}: {v}")
    return f"The sample's targets: {series(out, ', ')}." if out else ""


def _same_day(b, gpu, date, scenario, prefix):
    """The best graph engine's ratio and the host loop's overhead in each decode_loop run of that GPU and day
    (archived runs included: the day's other runs are superseded by the newest)."""
    runs = []
    for other in sorted(inputs.prefixes("decode", with_archived=True)):
        if inputs.gpu_of(other) != (gpu, date):
            continue
        data = b.json(inputs.path_of(other, "decode"))
        eng = _graph_engines(data, scenario)
        host = next((r for r in _rows(data, scenario) if r["driver"] == HOST), None)
        if eng and host:
            runs.append((other, max(r["vs_host"] for r in eng), host["overhead_us"]))
    if len(runs) < 2:
        return ""
    ratios = series(f"{v:.2f}× ({'this run' if o == prefix else link(inputs.path_of(o, 'decode'))})"
                    for o, v, _ in runs)
    return (f"Across the {gpu.upper()} runs of {date}, the best graph engine's {scenario} tokens/s was "
            f"{ratios} the host loop's, whose overhead was {span([h for _, _, h in runs], '.1f')} µs "
            "(it varies by instance).")


def gemv_part(b, path):
    d = b.json(path)
    out = [f"With Baton's batch-invariant GEMV for every projection (`--gemm={d['params']['gemm']}`, "
           f"{link(path)}) the dynamic-parallelism engine joins: its device step launches the same "
           "kernel bodies from the device.", "", table(DECODE_COLUMNS, d["rows"]), ""]
    notes = [_same_tokens(d, "this run").split(" (the sample")[0].rstrip(".") + "."]
    dp = [r for r in d["rows"] if "dynamic" in r["driver"]]
    notes += _bound_notes(b, d)
    dp = [r for r in dp if r.get("overhead_us") is not None]
    if dp:
        notes.append("The dynamic-parallelism engine's overhead, " +
                     series(f"{r['overhead_us']:.1f} µs at {r['scenario'].strip()}" for r in dp) +
                     ", is what launching every kernel from the device costs: it is the fallback for "
                     "batches outside every bucket, not a peer.")
    notes.append(_targets(d))
    return out + [" ".join(n for n in notes if n), ""]


# A soak row with one of these fields compared token contents (add the field
# as a SOAK_COLUMNS tuple too).
SOAK_TOKEN_CHECK_FIELDS = ("checked",)


def _soak_checks(b, rows):
    base = ("The soak checks each completion's token count and step arithmetic and that an early end "
            "is a stop token")
    checked = [r for r in rows if any(k in r for k in SOAK_TOKEN_CHECK_FIELDS)]
    if not checked:
        return base + "; it does not compare token contents (it predates the soak's token check)."
    sp = checked[0]["_params"]
    out = (f"{base}, and the tokens of every {sp['soak_check_every']}th request (`samples/decode_loop/soak_check.h`): every other "
           "checked request repeats an earlier one with one of its tokens as the only stop token and must end "
           "at its first occurrence, and after the soak a host-driven loop replays every checked request "
           "and must produce the same tokens (" +
           series(f"{r['checked_tokens']:,} tokens, {r['_params']['soak_check_replay_s']:.2f} s on the "
                  f"{r['_engine']} run" for r in checked) + ").")
    if len(checked) < len(rows):
        out += " A soak without the columns predates the check."
    return out


def soak_part(b, prefix):
    gpu, _ = inputs.gpu_of(prefix)
    rows, files = [], []
    for part in ("soak", "soak_conditional"):
        path = inputs.path_of(prefix, part)
        if not inputs.has(prefix, part):
            other = inputs.newest(gpu, part)
            if other is None:
                continue
            path = inputs.path_of(other, part)
        d = b.json(path)
        files.append(path)
        for r in d["rows"]:
            rows.append(dict(r, _engine=d["params"]["soak_engine"], _passed=d["passed"], _params=d["params"]))
    if not rows:
        return []
    sp = next((r["_params"] for r in rows if "soak_gemm" in r["_params"]), rows[0]["_params"])
    max_prompt = b.code("samples/decode_loop/soak.h", r"max_prompt = (\d+);")
    max_new = b.code("samples/decode_loop/soak.h", r"max_new = (\d+);")
    older = [f for f in files if not f.name.startswith(prefix + "-")]
    note = "; the run has none: the newest earlier" if older else ""
    gemm = f" (`--gemm={sp['soak_gemm']}`)" if "soak_gemm" in sp else ""
    return [f"**Soak** ({series(link(f) for f in files)}{note}): the {sp['soak_model']} model{gemm} at "
            f"batch {sp['soak_batch']}, temperature {sp['temperature']}, random prompts of up to "
            f"{max_prompt} tokens asking for up to {max_new} new tokens with up to three stop tokens "
            "(`samples/decode_loop/soak.h`), request-table entries reused, a "
            f"{sp['soak_watchdog_timeout_ms']} ms watchdog (an alarm fails the run); step-time percentiles "
            "from the step clock's first and last windows, memory from `cudaMemGetInfo`. " + _soak_checks(b, rows),
            "",
            table(SOAK_COLUMNS, rows), ""]
