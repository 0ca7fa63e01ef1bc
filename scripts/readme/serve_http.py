"""The serve-http block: serving through HTTP (scripts/peers/serve_http.py: Baton's OpenAI-compatible server,
`transformers serve` with continuous batching and CUDA graphs, and Baton's in-process LLM, one trace per rate,
one call per file) from every current results/<gpu>-*-serve-http-<model>.json, a table per file (each file is
one call: compare within a table). docs/performance.md holds it between its markers; the headline cites the
newest file."""
from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .serve import _ms
from .tables import link, table

LABELS = {
    "baton-http": "Baton's server (`python -m baton serve`), through HTTP",
    "baton-llm": "Baton's `LLM` in process (no HTTP)",
    "transformers-cb": "`transformers serve --continuous-batching --cb-use-cuda-graph`, through HTTP",
}


def files():
    return [p for p in inputs.current("*-serve-http-*.json") if inputs._PREFIX.match(p.name)]


def serve_http_block():
    b = inputs.Block("serve-http")
    b.exempt += EXEMPT_NAMES
    found = files()
    if not found:
        raise SystemExit("docs/performance.md has the serve-http block's markers but results/ holds no "
                         "*-serve-http-*.json: commit one (scripts/peers/serve_http.py) or remove the markers")
    out = []
    for path in sorted(found, key=inputs.order):
        data = b.json(path)
        rates = list(dict.fromkeys(r["rate"] for r in data["rows"]))
        by = {(r["driver"], r["rate"]): r for r in data["rows"]}

        def cell(driver, rate):
            r = by.get((driver, rate))
            return "" if r is None else (f"{_ms(r['ttft_p50_ms'])} / {_ms(r['ttft_p99_ms'])} · "
                                         f"{r['tpot_p50_ms']:.2f} / {r['tpot_p99_ms']:.2f} · "
                                         f"{r['output_tokens_per_s']:,.0f}")

        out += [f"{DISPLAY.get(data['model'], data['model'])}'s shape on one {data['gpu']} ({link(path)}), "
                f"{data['requests']} requests per rate, {data['lengths']} lengths, max batch {data['max_batch']}, "
                f"transformers {data['transformers']}; each cell: TTFT p50 / p99 (ms) · TPOT p50 / p99 (ms) · "
                "output tokens/s:", ""]
        cols = [("driver", lambda d: LABELS.get(d, d))]
        cols += [(f"{rate:g} requests/s", lambda d, rate=rate: cell(d, rate)) for rate in rates]
        out += [table(cols, list(dict.fromkeys(r["driver"] for r in data["rows"]))), ""]
    return b, "\n".join(out).rstrip()


def headline(b):
    """The README's sentence on the newest file: Baton's server beside transformers' at the highest rate both
    ran, and the HTTP path's cost beside the in-process LLM at the highest rate both ran (that file's or the
    newest file that has it)."""
    found = sorted(files(), key=inputs.order)
    if not found:
        return "", []
    def pair(path, peer):
        """The file, and Baton's server's and `peer`'s rows at the highest rate both ran (None: none)."""
        d = b.json(path)
        by = {(r["driver"], r["rate"]): r for r in d["rows"]}
        both = [r for (drv, r) in by if drv == "baton-http" and (peer, r) in by]
        return (d, None, None, None) if not both else (d, max(both), by[("baton-http", max(both))],
                                                       by[(peer, max(both))])

    notes = []
    path = found[-1]
    d, rate, ours, peer = pair(path, "transformers-cb")
    if rate is not None:
        notes.append(f"at {rate:g} requests/s, time to first token p99 {ours['ttft_p99_ms']:.1f} ms against "
                     f"{peer['ttft_p99_ms']:,.0f} ms for `transformers serve` (continuous batching, CUDA graphs), "
                     f"time per output token p50 {ours['tpot_p50_ms']:.2f} against {peer['tpot_p50_ms']:.2f} ms "
                     f"({link(path)})")
    for p in reversed(found):
        _, rate, http, local = pair(p, "baton-llm")
        if rate is not None:
            notes.append(f"through HTTP at {rate:g} requests/s the time per output token is "
                         f"{http['tpot_p50_ms']:.2f} ms against {local['tpot_p50_ms']:.2f} ms in process, the first "
                         f"token {http['ttft_p50_ms']:.1f} against {local['ttft_p50_ms']:.1f} ms ({link(p)})")
            break
    return f"**Serving over HTTP** (`python -m baton serve`, {d['gpu']}, one trace per rate):", notes
