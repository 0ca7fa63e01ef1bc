"""The README's headline: a few numbers a newcomer asks for first, each sentence naming the current results files
it read (where Baton is ahead and where it is not). The tables they come from are the blocks of
docs/performance.md; README.md holds this block only between its markers, like the prefill block."""
import textwrap

from . import inputs, long_context, prefill, runtime, serve, serve_http
from .models import DISPLAY, ENGINES, EXEMPT_NAMES, PEER_BASE
from .tables import link

MODEL = "llama-3.2-1b"  # the model of the peers files the headline reads
HOST = "Baton host graph + sync"
FLOOR = "HBM floor (weights once per step)"
PREFILL_ENGINE, PREFILL_PEER = "Baton tail-launch", "gpt-fast-prefill-graph"
CONTEXT_ENGINE, CONTEXT_PEER = "Baton tail", "PyTorch compiled, SDPA GQA, CUDA graph"


WIDTH = 115  # tables.wrap()'s width; it leaves list items alone, so they are wrapped here


def headline_block(prefixes):
    """A list: each item a title and, per GPU, a sentence naming its file."""
    b = inputs.Block("headline")
    b.exempt += EXEMPT_NAMES
    out = []
    for title, notes in (_decode(b), _launch(b, prefixes), _serve(b), serve_http.headline(b), _prefill(b),
                         _long_context(b)):
        if not notes:
            continue
        if len(notes) == 1:
            out.append(_item(f"{title} {notes[0]}.", ""))
            continue
        out.append(_item(title, ""))
        out += [_item(f"{n}.", "  ") for n in notes]
    return b, "\n".join(out)


def _item(text, indent):
    return textwrap.fill(text, WIDTH, initial_indent=indent + "- ", subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def _fastest(rows, batch, drivers):
    rs = [r for r in rows if r["batch"] == batch and (r["driver"] in drivers if isinstance(drivers, (list, tuple, set))
                                                      else drivers(r["driver"]))]
    return min(rs, key=lambda r: r["us_per_step"], default=None)


def _decode(b):
    glob = f"*-peers-{MODEL}.json"
    files = [p for p in (inputs.newest_file(g, glob) for g in inputs.gpus(glob)) if p]
    notes = []
    for path in files:
        d = b.json(path)
        rows = d["rows"]
        lo, hi = min(r["batch"] for r in rows), max(r["batch"] for r in rows)
        eng, host, floor = _fastest(rows, lo, ENGINES), _fastest(rows, lo, [HOST]), _fastest(rows, lo, [FLOOR])
        if eng is None:
            continue
        gpu = d.get("gpu") or d["device"]["name"]
        s = f"{gpu}: {eng['us_per_step']:,.0f} µs per step at batch {lo} ({eng['tokens_per_s']:,.0f} tokens/s)"
        if eng.get("overhead_us") is not None and host and host.get("overhead_us") is not None:
            s += (f", {eng['overhead_us']:.1f} µs of it the engine's decision and launch, where a host loop that "
                  f"launches the step's graph and synchronizes spends {host['overhead_us']:.1f} µs")
        if floor:
            s += f"; {b.derive(eng['us_per_step'] / floor['us_per_step']):.2f}× the HBM floor"
        torch_lo, torch_hi = _fastest(rows, lo, PEER_BASE), _fastest(rows, hi, PEER_BASE)
        if torch_lo:
            s += f"; the compiled PyTorch loop takes {torch_lo['us_per_step']:,.0f} µs"
        eng_hi = _fastest(rows, hi, ENGINES)
        if torch_hi and eng_hi and hi != lo:
            ratio = b.derive(eng_hi["tokens_per_s"] / torch_hi["tokens_per_s"])
            s += f"; at batch {hi}, {ratio:.2f}× {'that' if torch_lo else 'the compiled PyTorch'} loop's tokens/s"
        notes.append(f"{s} ({link(path)})")
    return (f"**Decode**, {DISPLAY.get(MODEL, MODEL)}'s shape (random weights, greedy; the compiled PyTorch loop: "
            "torch.compile, a CUDA graph, a sync per step):", notes)


def _launch(b, prefixes):
    notes, ks = [], []
    for prefix in prefixes:
        path = inputs.path_of(prefix, "launch")
        d = b.json(path)
        cells = runtime._cells(b, d)
        k = min(k for _, k in cells)
        faster = runtime._faster_host(d, cells, [k])[k]
        cond, host = cells.get((runtime.COND, k)), cells.get((faster, k))
        if cond and host:
            ks.append(k)
            notes.append(f"{inputs.gpu_of(prefix)[0].upper()}: {cond['us/step']:.1f} µs per step against "
                         f"{host['us/step']:.1f} µs for the faster host loop ({cond['vs faster host']:.1f}×) "
                         f"({link(path)})")
    k = ks[0] if ks else ""
    return (f"**Driving the loop** (`launch_comparison`: a step of K tiny kernels, whether to run another decided "
            f"from device data), the conditional engine at K = {k}:", notes)


def _serve(b):
    data = [(p, b.json(p)) for p in serve.files()]
    fixed = [(p, d) for p, d in data if d.get("lengths") == "fixed"] or data
    if not fixed:
        return "", []
    path, d = fixed[0]
    rates = [r["rate"] for r in d["rows"] if r["rate"] != "inf" and r["rate"] != float("inf")]
    if not rates:
        return "", []
    rate = max(rates)
    by = {r["driver"]: r for r in d["rows"] if r["rate"] == rate}
    baton = next((r for k, r in by.items() if k.startswith("baton")), None)
    peer = by.get("gpt-fast-static")
    if not (baton and peer):
        return "", []
    return ("**Serving**", [f"(`python -m baton bench`, {baton['requests']} requests at {rate:g} requests/s, "
                            f"{d['lengths']} lengths, on one {d['gpu']}): time to first token p50 "
                            f"{baton['ttft_p50_ms']:.1f} ms against {peer['ttft_p50_ms']:,.0f} ms for static "
                            f"batches of the compiled PyTorch loop, {baton['output_tokens_per_s']:,.0f} against "
                            f"{peer['output_tokens_per_s']:,.0f} output tokens/s ({link(path)})"])


def _prefill(b):
    notes, shape = [], None
    for path in (p for p in prefill.files() if p):
        d = b.json(path)
        rows = {(r["batch"], r["prompt_tokens"], r["driver"]): r for r in d["rows"]}
        batch = min(r["batch"] for r in d["rows"])
        prompts = sorted({r["prompt_tokens"] for r in d["rows"] if r["batch"] == batch})
        prompt = next((p for p in prompts if p == prefill.REQUEST_PROMPT), prompts[-1])
        ours, theirs = rows.get((batch, prompt, PREFILL_ENGINE)), rows.get((batch, prompt, PREFILL_PEER))
        if ours and theirs:
            shape = shape or (batch, prompt)
            ratio = b.derive(ours["ttft_ms"] / theirs["ttft_ms"])
            notes.append(f"{d['gpu']}: {ours['ttft_ms']:.2f} ms against {theirs['ttft_ms']:.2f} ms ({ratio:.2f}×) "
                         f"({link(path)})")
    if not notes:
        return "", []
    batch, prompt = shape
    return (f"**Prefill**, the first token of a {prompt:,}-token prompt at batch {batch}, the tail-launch engine "
            "against a compiled PyTorch prefill (torch.compile, a CUDA graph):", notes)


def _long_context(b):
    notes = []
    for path in (p for p in long_context.files() if p):
        d = b.json(path)
        by = {(r["batch"], r["context"], r["driver"]): r for r in d["rows"]}
        batch = min(r["batch"] for r in d["rows"])
        both = sorted(c for (x, c, drv) in by if x == batch and drv == CONTEXT_ENGINE
                      and (x, c, CONTEXT_PEER) in by)
        if not both:
            continue
        ours, theirs = by[(batch, both[-1], CONTEXT_ENGINE)], by[(batch, both[-1], CONTEXT_PEER)]
        notes.append(f"on the {d['gpu']}, at batch {batch} and {both[-1]:,} tokens of context a decode step takes "
                     f"{ours['us_per_step']:.1f} µs with the tail-launch engine ({ours['over_floor']:.2f}× the floor) "
                     f"against {theirs['us_per_step']:.1f} µs for the compiled PyTorch peer "
                     f"({theirs['over_floor']:.2f}×) ({link(path)})")
    return "**Long contexts**:", notes
