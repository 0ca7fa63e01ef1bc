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
    found = inputs.require(files(), "serve-http", "*-serve-http-*.json", "scripts/peers/serve_http.py",
                           doc="docs/performance.md")
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
    """The README's sentence: Baton's server beside transformers' at the issue's yardstick, the lowest rate where
    transformers' p99 time to first token passes 1 s (from the newest file that reaches it; else the newest
    file's highest rate both ran), and the HTTP path's cost beside the in-process LLM at the highest rate both
    ran (the newest file that has it)."""
    found = sorted(files(), key=inputs.order)
    if not found:
        return "", []
    def pair(path, peer, rates=None):
        """The file, and Baton's server's and `peer`'s rows at the highest of `rates` (default: every rate)
        both ran (None: none)."""
        d = b.json(path)
        by = {(r["driver"], r["rate"]): r for r in d["rows"]}
        both = [r for (drv, r) in by if drv == "baton-http" and (peer, r) in by and (rates is None or r in rates)]
        return (d, None, None, None) if not both else (d, max(both), by[("baton-http", max(both))],
                                                       by[(peer, max(both))])

    def past_one_second(path):
        """The lowest rate at which transformers' p99 first token took 1 s or more (None: none)."""
        d = b.json(path)
        slow = [r["rate"] for r in d["rows"] if r["driver"] == "transformers-cb" and r["ttft_p99_ms"] >= 1000]
        return min(slow) if slow else None

    notes = []
    reached = [p for p in found if past_one_second(p) is not None]
    path = (sorted(reached, key=lambda p: b.json(p)["date"]) or found)[-1]
    one_second = past_one_second(path)
    d, rate, ours, peer = pair(path, "transformers-cb", None if one_second is None else [one_second])
    if rate is not None:
        where = (f"at {rate:g} requests/s, the lowest rate at which `transformers serve` (continuous batching, "
                 f"CUDA graphs) took 1 s or more for its p99 first token"
                 if one_second is not None else
                 f"at {rate:g} requests/s, beside `transformers serve` (continuous batching, CUDA graphs)")
        notes.append(f"{where} ({d['gpu']}, {d['requests']} requests per rate): time to first token p99 "
                     f"{ours['ttft_p99_ms']:.1f} ms against {peer['ttft_p99_ms']:,.0f} ms, time per output token "
                     f"p50 {ours['tpot_p50_ms']:.2f} against {peer['tpot_p50_ms']:.2f} ms ({link(path)})")
    for p in reversed(found):
        dd, rate, http, local = pair(p, "baton-llm")
        if rate is not None:
            notes.append(f"through HTTP at {rate:g} requests/s ({dd['gpu']}) the time per output token is "
                         f"{http['tpot_p50_ms']:.2f} ms against {local['tpot_p50_ms']:.2f} ms in process, the first "
                         f"token {http['ttft_p50_ms']:.1f} against {local['ttft_p50_ms']:.1f} ms ({link(p)})")
            break
    return "**Serving over HTTP** (`python -m baton serve`, one trace per rate):", notes
