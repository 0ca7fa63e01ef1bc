"""The serve block: the serving benchmark (python -m baton bench beside scripts/peers/serve_peers.py, one trace,
one call) from each GPU's newest results/<gpu>-*-serve-<model>[-<lengths>].json (written by
scripts/peers/combine_serve.py), one table per lengths distribution, and what the Python path costs from the
newest results/<gpu>-*-python-overhead-<model>.json (scripts/peers/python_overhead.py). README.md holds it
only between its markers, like the prefill block."""
from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .tables import link, table

LABELS = {
    "baton-conditional": "Baton (conditional engine)",
    "baton-tail-launch": "Baton (tail-launch engine)",
    "gpt-fast-static": "PyTorch: gpt-fast-style, compiled + CUDA graph, static padded batches",
    "transformers-generate": "transformers `generate`, static batches",
}


def _newest(glob):
    return [inputs.newest_file(g, glob) for g in inputs.gpus(glob)]


def _ms(x):
    return f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def files():
    """The serving benchmark's current files (not the HTTP ones, scripts/readme/serve_http.py's)."""
    return [p for p in inputs.current("*-serve-*.json")
            if inputs._PREFIX.match(p.name) and "-serve-http-" not in p.name]


def serve_block():
    b = inputs.Block("serve")
    b.exempt += EXEMPT_NAMES
    files_ = inputs.require(files(), "serve", "*-serve-*.json", "scripts/peers/combine_serve.py")
    newest = {}
    for path in files_:  # each (GPU, lengths) its newest file
        data = b.json(path)
        key = (inputs.gpu_of(path.name)[0], str(data["lengths"]))
        if key not in newest or (str(data.get("date", path.name)), path.name) > newest[key][0]:
            newest[key] = ((str(data.get("date", path.name)), path.name), path, data)
    out, cited = [], []
    for (gpu, lengths), (_, path, data) in sorted(newest.items()):
        rates = list(dict.fromkeys(r["rate"] for r in data["rows"]))
        by = {(r["driver"], r["rate"]): r for r in data["rows"]}

        def cell(driver, rate):
            r = by.get((driver, rate))
            return "" if r is None else (f"{_ms(r['ttft_p50_ms'])} / {_ms(r['ttft_p99_ms'])} · "
                                         f"{r['tpot_p50_ms']:.2f} · {r['output_tokens_per_s']:,.0f}")

        cols = [(f"{lengths} lengths", lambda d: LABELS.get(d, d))]
        cols += [("all at once" if rate == "inf" else f"{rate:g} requests/s", lambda d, rate=rate: cell(d, rate))
                 for rate in rates]
        drivers = list(dict.fromkeys(r["driver"] for r in data["rows"]))
        if not out:
            out += [f"{DISPLAY.get(data['model'], data['model'])}'s shape on one {data['gpu']}, "
                    f"{data['rows'][0]['requests']} requests per rate, max batch {data['max_batch']}; each cell: "
                    "TTFT p50 / p99 (ms) · TPOT p50 (ms) · output tokens/s:", ""]
        out += [table(cols, drivers), ""]
        cited.append(link(path))
    out += [f"From {', '.join(cited)} (plots beside them, `.png`).", ""]
    for path in (p for p in _newest("*-python-overhead-*.json") if p):
        d = b.json(path)
        parts = [f"batch {r['batch']}: {r['python_tokens_per_s']:,.0f} against {r['cpp_tokens_per_s']:,.0f} tokens/s "
                 f"({r['python_vs_cpp']:.3f}×)" for r in d["rows"]]
        out += [f"The Python path costs nothing per token: `LLM.generate` beside the C++ `decode_loop` sample on "
                f"the same requests ({d['prompt_tokens']}-token prompts, {d['new_tokens']} new tokens, "
                f"{d['engine']} engine), {'; '.join(parts)} ({link(path)}).", ""]
    return b, "\n".join(out).rstrip()
