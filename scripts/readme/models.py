"""The checkpoint blocks: parity with transformers (results/<gpu>-*-parity.json)
and Llama-3.2-1B against PyTorch (results/<gpu>-*-peers-*.json). Row specs
below; the shapes come from scripts/checkpoints/make_checkpoint.py's presets."""
import re
import sys

from . import inputs
from .tables import link, series, span, table

sys.path.insert(0, str(inputs.ROOT / "scripts" / "checkpoints"))
import make_checkpoint  # noqa: E402  (stdlib only at import)

# (label, presets, batches, shape features shown): one table row each.
PARITY_ROWS = [
    ("Llama-3.2-1B", ["llama-3.2-1b"], (1, 8), ("layers", "gqa", "rope", "tied")),
    ("Llama-3.2-1B, batch 32, cuBLASLt", ["llama-3.2-1b"], (32,), ()),
    ("TinyLlama-1.1B", ["tinyllama-1.1b"], (1, 8), ("layers", "gqa", "tied")),
    ("Qwen2.5-0.5B", ["qwen2.5-0.5b"], (1, 8), ("layers", "qkv bias", "gqa")),
    ("SmolLM2-135M", ["smollm2-135m"], (1, 8), ("layers", "gqa")),
    ("Llama 3 / Qwen2 / Mistral test shapes", ["tiny-llama3", "tiny-qwen2", "tiny-mistral"], (1, 8),
     ("layers", "head_dim")),
    ("Llama test shape, linear RoPE", ["tiny-linear-rope"], (1, 8), ("layers", "rope", "tied")),
]
DISPLAY = {"llama-3.2-1b": "Llama-3.2-1B", "llama-3.1-8b": "Llama-3.1-8B"}
EXEMPT_NAMES = ["Llama-3.2-1B", "Llama-3.1-8B", "TinyLlama-1.1B", "Qwen2.5-0.5B", "SmolLM2-135M", "Llama 3", "Qwen2"]


def _feature(b, presets, feature):
    cfgs = [b.given(make_checkpoint.PRESETS[p].config) for p in presets]
    vals = []
    for c in cfgs:
        if feature == "layers":
            vals.append(f"{c['num_hidden_layers']} layers")
        elif feature == "gqa":
            vals.append(f"GQA {c['num_attention_heads']}/{c.get('num_key_value_heads', c['num_attention_heads'])}")
        elif feature == "head_dim":
            hd = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
            vals.append(f"head_dim {b.derive(hd):.0f}")
        elif feature == "rope":
            rs = c.get("rope_scaling") or {}
            kind = rs.get("rope_type", "default")
            vals.append(f"{kind} RoPE" + (f" ×{rs['factor']:g}" if kind == "linear" else ""))
        elif feature == "tied":
            vals.append("tied" if c.get("tie_word_embeddings") else "untied")
        elif feature == "qkv bias":
            vals.append("q/k/v bias")
    return " / ".join(dict.fromkeys(vals))


def parity_block(b, path):
    d = b.json(path)
    b.exempt += EXEMPT_NAMES
    b._cite(inputs.ROOT / "scripts/checkpoints/make_checkpoint.py")
    rows = d["rows"]
    outcomes = {}  # (preset, batch) -> the distinct outcomes of its drivers
    for r in rows:
        key = (r["preset"], r["batch"])
        outcomes.setdefault(key, set()).add((r["tokens_compared"], r["tokens_mismatched"],
                                               r["near_ties"], r["max_rel_logit_error"]))
    table_rows = []
    for label, presets, batches, features in PARITY_ROWS:
        sel = [r for r in rows if r["preset"] in presets and r["batch"] in batches]
        if not sel:
            continue
        per = [[r for r in sel if r["preset"] == p] for p in presets]
        shape = "; ".join(_feature(b, presets, f) for f in features)
        errs = [max(r["max_rel_logit_error"] for r in rs) for rs in per]
        refs = [max(r["reference_bf16_rel_error"] for r in rs) for rs in per]
        toks = [b.derive(sum(r["tokens_compared"] for r in rs)) for rs in per]
        ties = [b.derive(sum(r["near_ties"] for r in rs)) for rs in per]
        table_rows.append({
            "shape": f"{label} ({shape})" if shape else label,
            "dtype": "/".join(sorted({r["dtype"] for r in sel})),
            "err": span(errs, ".2e"), "ref": span(refs, ".2e"),
            "tokens": (f"{b.derive(len(per))} × {toks[0]:,}" if len(set(toks)) == 1 and len(per) > 1
                       else span(toks, ",")),
            "ties": span(ties, ",")})
    cols = [("checkpoint shape", lambda r: r["shape"]), ("dtype", lambda r: r["dtype"]),
            ("Baton's max logit error", lambda r: r["err"]),
            ("transformers-in-dtype's", lambda r: r["ref"]), ("tokens", lambda r: r["tokens"]),
            ("not the reference's argmax (all near-ties)", lambda r: r["ties"])]
    drivers = list(dict.fromkeys(r["driver"] for r in rows))
    same = all(len(v) == 1 for v in outcomes.values())
    passed = all(r["passed"] and r["tokens_mismatched"] == 0 for r in rows)
    bounds = d["bounds"]
    prompt = re.search(r"(\d+) random prompt tokens", d.get("runs_note", ""))
    gen = {b.derive(r["tokens_compared"] // r["batch"]) for r in rows}
    intro = (f"Parity with transformers is checked on random checkpoints of the real models' shapes "
             "(`scripts/checkpoints/`; the GPU machines have no internet): Baton's greedy tokens and last-step "
             f"logits against {d['reference']}, teacher-forced, on every driver ({', '.join(drivers)}); "
             f"{link(path)}"
             + (f", {prompt.group(1)} random prompt tokens" if prompt else "")
             + f" and {'/'.join(str(g) for g in sorted(gen))} generated tokens per sequence, "
             f"batches {series(str(x) for x in sorted({r['batch'] for r in rows}))}:")
    verdict = (f"{'All' if passed else '**Not all**'} {b.derive(len(rows))} rows (preset × batch × driver) "
               f"passed; {'every' if same else '**not every**'} driver of a preset and batch had the same "
               "error, mismatches and near-ties.")
    rule = (f"The logit error is max|Baton − reference| / max|reference| at each sequence's last step, "
            f"bound {bounds['logit_bound']['bf16']:.5f} (bf16) or {bounds['logit_bound']['fp16']:.8f} "
            f"(fp16) or {bounds['dtype_reference_factor']:.0f}× transformers' own error in that dtype; a "
            "token other than the reference's argmax passes only as a near-tie "
            "(`scripts/checkpoints/README.md` has the metric and why).")
    return [intro, "", table(cols, table_rows), "", rule + " " + verdict]


def _compiled(suffix):
    """Every compiled PyTorch peer with this ending (pytorch_peers.py: K/V copied per query head or SDPA's native
    GQA, any compile mode)."""
    return lambda driver: driver.startswith("gpt-fast") and driver.endswith(suffix)


# (label, drivers, or a predicate on a file's drivers: the row shown is the fastest of them per batch)
PEER_ROWS = [
    ("Baton, the engine with the shorter step (tail-launch / conditional)",
     ["Baton tail-launch", "Baton conditional"]),
    ("Baton host loop (graph launch + sync per step)", ["Baton host graph + sync"]),
    ("Baton bound: graph replays of the same steps, no decision", ["Baton graph replays of the same steps, no decision (bound)"]),
    ("PyTorch: gpt-fast-style step, torch.compile + CUDA graph, `.item()` per step (its fastest variant)",
     _compiled("+sync")),
    ("PyTorch: the same, no per-step sync (its lower bound)", _compiled("-nosync")),
    ("transformers `generate` (eager)", ["transformers-generate"]),
    ("HBM floor: the weights read once per step at the measured bandwidth", ["HBM floor (weights once per step)"]),
]
# A second model's table: Baton's best engine, its bound, the fastest compiled PyTorch loop and the floor.
COMPACT_ROWS = [PEER_ROWS[0], PEER_ROWS[2], PEER_ROWS[3], PEER_ROWS[-1]]
PEER_BASE = _compiled("+sync")  # the PyTorch loop the ratios compare with: its fastest variant per batch
ENGINES = PEER_ROWS[0][1]
# ncu of the batch-1 step: (role, kernel, grid)
NCU_KERNELS = [
    ("the gate|up GEMV", "GEMV bf16 (plain in, store)", "1024"),
    # (SiLU·up its output since 2026-11-25, from the same grid)
    ("the gate|up GEMV with SiLU·up out", "GEMV bf16 (plain in, SiLU(gate)*up out)", "1024"),
    ("the LM head", "GEMV bf16 (plain in, store)", "8016"),
    ("the FFN down GEMV (SiLU·up recomputed per row block)", "GEMV bf16 (SiLU(gate)*up in, residual add)", "256"),
    ("the QKV GEMV", "GEMV bf16 (RMSNorm in, store)", "192"),
    # (SiLU·up its own kernel since 2026-11-23: the FFN down GEMV then reads it plain, on the same grid)
    ("the residual-add GEMVs (attention output, and FFN down where SiLU·up is its own kernel)",
     "GEMV bf16 (plain in, residual add)", "256"),
]


def _gpu(d):
    return d.get("gpu") or d["device"]["name"]


def peers_block(b, paths, split_path=None, ncu_path=None, ncu_peers_path=None, compact=False):
    """One table for the peers files of every GPU (one file per GPU), then each GPU's notes; `compact` (a second
    model): the key rows only, after a sentence that refers to the first model's settings."""
    b.exempt += EXEMPT_NAMES
    files = [(path, b.json(path)) for path in paths]
    d0 = files[0][1]
    # A GPU's file may hold Baton's rows only (combine_results.py without --peers).
    with_peers = [d for _, d in files if d["peers"].get("settings")]
    if not with_peers:
        raise ValueError(f"peers block: no file of {d0['model']} has PyTorch rows ({', '.join(map(str, paths))})")
    s = with_peers[0]["peers"]["settings"]
    batches = sorted({r["batch"] for _, d in files for r in d["rows"]})
    by = {(_gpu(d), r["batch"], r["driver"]): r for _, d in files for r in d["rows"]}
    names = sorted({r["driver"] for _, d in files for r in d["rows"]})

    def pick(gpu, drivers, batch):
        drivers = drivers if isinstance(drivers, list) else [x for x in names if drivers(x)]
        rs = [by[(gpu, batch, x)] for x in drivers if (gpu, batch, x) in by]
        return min(rs, key=lambda r: r["us_per_step"]) if rs else None

    def cell(gpu, drivers, batch):
        r = pick(gpu, drivers, batch)
        if r is None:
            return "n/a"
        over = r.get("overhead_us")
        return (f"{r['us_per_step']:,.0f} µs · {r['tokens_per_s']:,.0f} tok/s" +
                ("" if over is None else f" · {over:+.1f}"))
    cols = [("GPU", lambda row: row[0]), ("driver", lambda row: row[1])] + [
        (f"batch {x}: µs/step · tokens/s · overhead µs", lambda row, x=x: cell(row[0], row[2], x)) for x in batches]
    rows = [(_gpu(d), label, drivers) for _, d in files for label, drivers in (COMPACT_ROWS if compact else PEER_ROWS)
            if any(pick(_gpu(d), drivers, x) for x in batches)]
    def gemms_of(d):
        gemm = {}
        for x in batches:
            for g in sorted({r["gemm"] for r in d["rows"] if r["batch"] == x and r.get("gemm")}):
                gemm.setdefault(g, []).append(x)
        return series(f"`{g}` at batch {series([str(x) for x in xs])}" for g, xs in gemm.items())
    per_gpu = [(_gpu(d), gemms_of(d)) for _, d in files]
    gemms = (per_gpu[0][1] if len({g for _, g in per_gpu}) == 1 else
             "; ".join(f"{g} on the {gpu}" for gpu, g in per_gpu))
    torch = series(list(dict.fromkeys(d["peers"]["torch"] for d in with_peers)))
    where = series(f"one {d['device']['name']} ({link(path)})" for path, d in files)
    alone = [_gpu(d) for _, d in files if not d["peers"].get("settings")]
    if alone:
        where += f" (no PyTorch peer ran on the {series(alone)}: Baton and the floor only)"
    if compact:
        out = [f"{DISPLAY.get(d0['model'], d0['model'])}'s shape ({s['dtype']}, {s['prompt_tokens']} prompt + "
               f"{s['new_tokens']} new tokens, `--gemm` {gemms}), on {where}: Baton's faster engine, its bound, the "
               "fastest compiled PyTorch row and the floor.", "", table(cols, rows), ""]
        for path, d in files:
            out += [_peer_notes(b, d, pick, batches), ""]
        return out
    out = [f"{DISPLAY.get(d0['model'], d0['model'])}'s shape, random {s['dtype']} weights, greedy, "
           f"{s['prompt_tokens']} prompt + {s['new_tokens']} new tokens; Baton (`--gemm` {gemms}) and the "
           f"PyTorch peers (`scripts/peers/pytorch_peers.py`, torch {torch}) in one call per GPU, on {where}. "
           "Baton's step is its mean device step (the step clock), the peers' timing is the files' "
           "`peers.settings`; Baton's overhead is its step minus the bound row's, graph replays of the same "
           "steps with no decision; tokens/s of Baton's drivers count the tokens their requests produced, "
           "of the bound, the floor and the peers batch / step time (the files' `definitions`).",
           "", table(cols, rows), ""]
    for path, d in files:
        out += [_peer_notes(b, d, pick, batches), ""]
    if split_path:
        out += [_split_sentence(b, split_path)]
    if ncu_path and ncu_peers_path:
        out += [_ncu_sentence(b, ncu_peers_path, ncu_path)]
    return out


def _peer_notes(b, d, pick, batches):
    gpu = _gpu(d)
    lo, hi = batches[0], batches[-1]
    base_lo, base_hi = pick(gpu, PEER_BASE, lo), pick(gpu, PEER_BASE, hi)
    floor = pick(gpu, PEER_ROWS[-1][1], lo)
    notes, parts = [], []
    if base_lo and base_hi and pick(gpu, ENGINES, lo) and pick(gpu, ENGINES, hi):
        step = b.derive(base_lo["us_per_step"] / pick(gpu, ENGINES, lo)["us_per_step"])
        tps = b.derive(pick(gpu, ENGINES, hi)["tokens_per_s"] / base_hi["tokens_per_s"])
        parts.append(f"Baton's batch-{lo} step is {step:.2f}× faster than the compiled PyTorch loop's and "
                     f"its batch-{hi} tokens/s {tps:.2f}× that loop's")
    if floor and pick(gpu, ENGINES, lo):
        ratio = b.derive(pick(gpu, ENGINES, lo)["us_per_step"] / floor["us_per_step"])
        whose = "its" if parts else "Baton's"
        parts.append(f"{whose} batch-{lo} step is {ratio:.2f}× the HBM floor")
    if parts:
        notes.append(f"{gpu}: " + ", but ".join(parts) + ".")
    variants = sorted({r["driver"] for r in d["rows"] if PEER_BASE(r["driver"])})
    if len(variants) > 1:
        fastest = [(x, pick(gpu, PEER_BASE, x)["driver"]) for x in batches if pick(gpu, PEER_BASE, x)]
        which = (f"`{fastest[0][1]}` at every batch" if len({v for _, v in fastest}) == 1 else
                 "at each batch: " + series(f"batch {x} `{v}`" for x, v in fastest))
        notes.append("The compiled PyTorch row is the fastest of " + series(f"`{v}`" for v in variants) +
                     f" ({which}).")
    below = [r for r in d["rows"] if (r.get("overhead_us") or 0) < 0]
    if below:
        notes.append(series(f"{r['driver']} at batch {r['batch']} (`--gemm` `{r['gemm']}`)" for r in below) +
                     " ran faster than the bound (" + series(f"{r['overhead_us']:.1f} µs" for r in below) +
                     "), which is therefore not a lower bound there.")
    same = all(r.get("same_tokens", True) for r in d["rows"])
    notes.append("Baton's drivers produced the same tokens at every batch." if same else
                 "**Baton's drivers did not all produce the same tokens.**")
    units = {"_ms": " ms", "_ratio": "×", "_us": " µs"}
    for t in d.get("targets", []):
        measured = next((f"{v:g}" + next((u for s_, u in units.items() if k.endswith(s_)), "")
                         for k, v in t.items() if k.startswith("measured")), "?")
        notes.append(f"Target \"{t['target']}\": {measured}, {'met' if t['met'] else 'missed'}.")
    return " ".join(notes)


def _split_sentence(b, path):
    v = {x["variant"]: x for x in b.json(path)["variants"]}
    key = "b1 host graph replays, no decision (bound)"
    before, after = v["A"]["step_us"][key], v["B"]["step_us"][key]
    return (f"Pairing the blocks of the unsplit FFN-down and attention-output GEMVs in clusters of 2 took "
            f"the batch-1 replay step from {before:.0f} to {after:.0f} µs ({link(path)}, with variants "
            "that did not help).")


def _ncu_sentence(b, peers_path, path):
    b.text(path)
    ks = b.json(peers_path)["b1_kernels_ncu"]["kernels"]
    found = []
    for role, name, grid in NCU_KERNELS:
        k = next((k for k in ks if k["kernel"] == name and str(k["grid"]) == grid), None)
        if k:
            found.append(f"{role} {b.derive(100 * k['fraction_of_read_bandwidth']):.0f}%")
    gpu = _gpu(b.json(peers_path))
    return (f"Under ncu (each kernel alone, {link(path)}; the `b1_kernels_ncu` of {link(peers_path)}, an "
            f"{gpu} peers run) the kernels reach this fraction of the read bandwidth: "
            f"{series(found)}; the GEMVs under one wave are latency-bound, and attention takes the rest:")
