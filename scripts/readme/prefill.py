"""The prefill block: Baton's prefill sample against the PyTorch peers and the
floor, from each GPU's newest results/<gpu>-*-prefill-<model>.json (written by
scripts/peers/combine_prefill.py). README.md holds it only between its markers:
readme_performance.py renders it where they are and leaves it out otherwise, so
no prefill results are needed until the markers go in. self_test() renders it
from fake files in a temporary folder (readme_performance.py --self-test)."""
import json
import pathlib
import re
import sys
import tempfile

from . import inputs
from .models import DISPLAY, EXEMPT_NAMES
from .tables import link, series, table, wrap

# Column order; a driver a file has that is not listed comes after Baton's, under its own name.
DRIVERS = [
    ("Baton host loop", "Baton host loop"),
    ("Baton tail-launch", "Baton tail-launch"),
    ("Baton conditional", "Baton conditional"),
    ("Baton dynamic parallelism", "Baton dynamic parallelism"),
    ("gpt-fast-prefill-graph", "PyTorch: gpt-fast prefill, compiled + CUDA graph"),
    ("transformers-forward", "transformers forward (eager)"),
]
# The request table's labels where a driver's request is more than its prefill.
REQUEST_LABELS = {
    "gpt-fast-prefill-graph": "PyTorch: that prefill + the compiled decode step's graph, `.item()` per step",
    "transformers-forward": "transformers `generate` (eager)",
}
FLOOR = "floor"
BATCHES = (1, 8)
REQUEST_PROMPT = 1000  # the request table's prompt length (the targets')


def files():
    """Each GPU's newest prefill file (by its 'date', then its name)."""
    return [inputs.newest_file(g, "*-prefill-*.json") for g in inputs.gpus("*-prefill-*.json")]


def _ms(x):
    """Milliseconds at a precision that suits their size (tracked values record what they print)."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def _columns(data):
    present = {r["driver"] for _, d in data for r in d["rows"]}
    known = [d for d, _ in DRIVERS]
    extra = sorted(present - set(known) - {FLOOR}, key=lambda d: (not d.startswith("Baton"), d))
    labels = dict(DRIVERS)
    return [(d, labels.get(d, d)) for d in known + extra if d in present]


def prefill_block():
    b = inputs.Block("prefill")
    paths = inputs.require([p for p in files() if p], "prefill", "*-prefill-*.json",
                           "scripts/peers/combine_prefill.py")
    b.exempt += EXEMPT_NAMES
    data = [(path, b.json(path)) for path in paths]
    cols = _columns(data)
    by = {(d["gpu"], r["batch"], r["prompt_tokens"], r["driver"]): r for _, d in data for r in d["rows"]}

    gpus = list(dict.fromkeys(d["gpu"] for _, d in data))

    def cell(gpu, batch, prompt, driver, key):
        r = by.get((gpu, batch, prompt, driver))
        return "" if r is None or r.get(key) is None else _ms(r[key])

    def cells(batch, prompt, driver, key):
        """Every GPU's value at a shape, in `gpus` order ("–" where one has none)."""
        values = [cell(g, batch, prompt, driver, key) for g in gpus]
        return " / ".join(v or "–" for v in values) if any(values) else ""

    ttft_rows = list(dict.fromkeys((r["batch"], r["prompt_tokens"]) for _, d in data for r in d["rows"]
                                   if r["driver"] == FLOOR and r["batch"] in BATCHES))
    ttft_cols = [("batch", lambda x: f"{x[0]}"), ("prompt tokens", lambda x: f"{x[1]:,}")]
    ttft_cols += [(label, lambda x, d=drv: cells(*x, d, "ttft_ms")) for drv, label in cols]
    ttft_cols.append(("floor", lambda x: cells(*x, FLOOR, "ttft_ms")))
    with_request = [(drv, label) for drv, label in cols
                    if any(r["driver"] == drv and r.get("request_ms") is not None for _, d in data for r in d["rows"])]
    request_rows = [(d["gpu"], r["batch"], r["prompt_tokens"], r["new_tokens"]) for _, d in data for r in d["rows"]
                    if r["prompt_tokens"] == REQUEST_PROMPT and r["batch"] in BATCHES and r.get("request_ms")
                    is not None]
    request_rows = list(dict.fromkeys((x, p, n) for g, x, p, n in request_rows
                                      if n == _new_tokens(by, g, x, p, with_request)))
    request_cols = [("batch", lambda x: f"{x[0]}"),
                    ("request", lambda x: f"{x[1]:,}-token prompt + {x[2]} new tokens")]
    request_cols += [(REQUEST_LABELS.get(drv, label), lambda x, d=drv: cells(*x[:2], d, "request_ms"))
                     for drv, label in with_request]

    d0 = data[0][1]
    s = d0["peers"]["settings"]
    where = series(f"one {d['gpu_name']} ({link(path)})" for path, d in data)
    torch = series(list(dict.fromkeys(f"torch {d['peers']['torch']}, transformers {d['peers']['transformers']}"
                                      for _, d in data)))
    out = [f"{DISPLAY.get(d0['model'], d0['model'])}'s shape, random {s['dtype']} weights, greedy: Baton's "
           f"`prefill` sample and the PyTorch peers (`scripts/peers/prefill_peers.py`, {torch}) in one call per "
           f"GPU, on {where}. Time to first token in ms, from the prompt's ids on the host to its first token on "
           "the host; at a batch of several prompts, the last of their first tokens. The floor is the larger of "
           "the weights read once at the measured bandwidth and the prefill's FLOPs at the measured bf16 matmul "
           "rate (each file's `floor_inputs`); how each driver was timed is in each file (`baton.params`, "
           "`peers.settings`, `definitions`)."
           + (f" Each cell: {' / '.join(gpus)}." if len(gpus) > 1 else ""), "", table(ttft_cols, ttft_rows), ""]
    if request_rows:
        out += ["Whole requests in ms, prompt to the last new token on the host:", "",
                table(request_cols, request_rows), ""]
    out += [" ".join(_notes(b, d, by) for _, d in data), ""]
    return b, "\n".join(out).rstrip()


# The drivers the targets and the summary compare: Baton's engines.
ENGINES = ("Baton tail-launch", "Baton conditional")


def _new_tokens(by, gpu, batch, prompt, drivers):
    """The new_tokens of Baton's request row at a shape (else the first driver's), so one row per shape."""
    for drv, _ in drivers:
        r = by.get((gpu, batch, prompt, drv))
        if r is not None and r.get("request_ms") is not None:
            return r["new_tokens"]
    return None


def _notes(b, d, by):
    gpu = d["gpu"]
    notes = []
    base = by.get((gpu, 1, REQUEST_PROMPT, "gpt-fast-prefill-graph"))
    # Baton's engines (the GPU deciding every step), as the targets count them.
    baton = [r for (g, x, p, drv), r in by.items() if g == gpu and x == 1 and p == REQUEST_PROMPT
             and drv in ENGINES and r.get("ttft_ms") is not None]
    if base and base.get("ttft_ms") and baton:
        best = min(baton, key=lambda r: r["ttft_ms"])
        floor = by.get((gpu, 1, REQUEST_PROMPT, FLOOR))
        ratio = b.derive(best["ttft_ms"] / base["ttft_ms"])
        notes.append(f"{gpu}: at batch {best['batch']} and {best['prompt_tokens']:,} prompt tokens, "
                     f"{best['driver']}'s first token takes {ratio:.2f}× the compiled PyTorch prefill's time"
                     + (f", {b.derive(best['ttft_ms'] / floor['ttft_ms']):.2f}× the floor." if floor else "."))
    m = d.get("mixed")
    if m:
        parts = [f"{gpu} mixed run ({m.get('driver', 'Baton')}): {m['decoders']} requests decoding while a "
                 f"{m['prompt_tokens']:,}-token prompt is prefilled"]
        if m.get("steady_step_ms") is not None and m.get("itl_p99_ms") is not None:
            parts.append(f"steady decode step {m['steady_step_ms']:.2f} ms, inter-token latency "
                         + (f"p50 {m['itl_p50_ms']:.2f} ms and " if m.get("itl_p50_ms") is not None else "")
                         + f"p99 {m['itl_p99_ms']:.2f} ms "
                         f"({b.derive(m['itl_p99_ms'] / m['steady_step_ms']):.2f}× the steady step)")
        if m.get("prompt_ttft_ms") is not None:
            parts.append(f"the prompt's first token after {m['prompt_ttft_ms']:.1f} ms")
        notes.append("; ".join(parts) + ".")
    for t in d.get("targets", []):
        value = t.get("measured_ms", t.get("measured_ratio"))
        unit = " ms" if "measured_ms" in t else "×"
        measured = ("not measured" if value is None else f"{value:.2f}{unit}"
                    + (f" ({t['driver']})" if t.get("driver") else ""))
        # A GPU without targets: its figures are in the tables.
        if t.get("gpu_has_target"):
            notes.append(f"Target \"{t['target']}\": {measured}, "
                         f"{'not measured' if value is None else 'met' if t['met'] else 'missed'}.")
    return " ".join(notes)


# --------------------------------------------------------------------------- self-test


def _fake_files(folder):
    """Two GPUs' prefill files made by combine_prefill.combine from fake inputs of the samples' shapes."""
    sys.path.insert(0, str(inputs.ROOT / "scripts" / "peers"))
    import combine_prefill  # noqa: E402  (stdlib only)

    floor_inputs = {"non_embedding_parameters": 973_146_112, "lm_head_parameters": 262_668_288, "layers": 16,
                    "heads": 32, "head_dim": 64, "weight_bytes": 2_471_628_800, "bandwidth_GBps": 3035.1,
                    "matmul_tflops": 761.3}
    for gpu, name, scale in (("h100", "NVIDIA H100 80GB HBM3", 1.0), ("h200", "NVIDIA H200", 0.8)):
        baton, peers = [], []
        for batch in (1, 8):
            for prompt in (128, 1000, 4000):
                t = scale * (0.9 + batch * prompt * 0.0031)
                for i, drv in enumerate(("Baton host loop", "Baton tail-launch", "Baton conditional")):
                    baton.append({"model": "llama-3.2-1b", "batch": batch, "prompt_tokens": prompt, "new_tokens": 128,
                                  "driver": drv, "ttft_ms": round(t * (1.05 - 0.02 * i), 3),
                                  "request_ms": round(130 * scale + t, 2) if prompt == 1000 else None, "steps": 130})
                for drv, f in (("gpt-fast-prefill-graph", 1.4), ("transformers-forward", 3.1)):
                    peers.append({"model": "llama-3.2-1b", "batch": batch, "prompt_tokens": prompt, "new_tokens": 128,
                                  "driver": drv, "ttft_ms": round(t * f, 3), "floor_ms": 1.0,
                                  "request_ms": round(200 * f * scale, 2) if prompt == 1000 else None})
        b = {"sample": "prefill", "gpu": name, "date": "2026-11-24", "model": "llama-3.2-1b",
             "params": {"repeats": 5}, "rows": baton, "passed": True,
             "mixed": {"decoders": 16, "prompt_tokens": 2000, "driver": "Baton tail-launch", "steady_step_ms": 1.2,
                       "itl_p50_ms": 1.3, "itl_p99_ms": 3.0 * scale, "prompt_ttft_ms": 9.0}}
        p = {"gpu": name, "date": "2026-11-24", "torch": "2.11.0+cu130", "transformers": "5.17.0",
             "model": "llama-3.2-1b", "settings": {"dtype": "bfloat16"}, "floor_inputs": floor_inputs, "rows": peers}
        (folder / f"{gpu}-2026-11-24-prefill-llama-3.2-1b.json").write_text(
            json.dumps(combine_prefill.combine(b, p)))


def self_test(markers, place):
    """Renders the block from fake files; checks its numbers, its content and where it goes (with
    readme_performance.py's markers() and place()). 0 if all hold."""
    failures = []
    saved = inputs.RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        inputs.RESULTS = pathlib.Path(tmp)
        try:
            _fake_files(inputs.RESULTS)
            inputs.results_index.write(inputs.RESULTS)  # the index the block reads its files from
            b, body = prefill_block()
            body = wrap(body)
            problems = b.check(body)
            if problems:
                failures.append(f"untraced numbers: {problems}")
            for want in ("| 1 | 1,000 |", "| 8 | 4,000 |", "Each cell: H100 / H200.", "Target \"b1 1000-token prompt",
                         ", met.", "H200 mixed run", "mixed run (Baton tail-launch)", "× the floor",
                         "1,000-token prompt + 128 new tokens"):
                if want not in body:
                    failures.append(f"the block lacks {want!r}")
            if not b.check(body + "\nA typed-in 123.456 ms.\n"):
                failures.append("a number no input holds passed the check")
            begin, end = markers("prefill")
            readme = f"# x\n\n{begin}\nstale\n{end}\n\nrest\n"
            placed = place(readme, "prefill", body)
            if "stale" in placed or not placed.endswith(f"{end}\n\nrest\n") or body not in placed:
                failures.append("place() did not replace the block between its markers")
            # A file the index does not list: the block must refuse to read a stale index.
            stray = inputs.RESULTS / "h100-2026-11-30-prefill-llama-3.2-1b.json"
            stray.write_text((inputs.RESULTS / "h100-2026-11-24-prefill-llama-3.2-1b.json").read_text())
            try:
                prefill_block()
                failures.append("a file missing from results/README.md, yet the block rendered")
            except SystemExit as e:
                if "out of date" not in str(e):
                    failures.append(f"a stale index stopped the block with another message: {e}")
            for path in list(inputs.RESULTS.glob("*.json")):
                path.unlink()
            inputs.results_index.write(inputs.RESULTS)
            try:
                prefill_block()
                failures.append("no prefill file, yet the block rendered")
            except SystemExit:
                pass
        finally:
            inputs.RESULTS = saved
    text = (inputs.ROOT / "README.md").read_text()
    if markers("prefill")[0] not in text and re.search(r"prefill (begin|end)", text):
        failures.append("README.md has a half-written prefill marker")
    for f in failures:
        print(f"prefill self-test: {f}", file=sys.stderr)
    print("prefill block self-test " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0
