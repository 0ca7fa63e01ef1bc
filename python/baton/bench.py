"""The serving benchmark: an open-loop trace of requests through Baton, timed as a client sees it.

Requests arrive by a Poisson process at a given rate (requests/s), or all at once (rate inf); each has a prompt
length and an output length drawn from a stated distribution:

    fixed      prompt lengths uniformly from FIXED_PROMPTS, output lengths from FIXED_OUTPUTS
    longtail   log-normal lengths (prompt median 256, output median 128, sigma 1.0 and 0.8), clipped to
               [16, 4000] and [8, 1024]: most requests short, a few long ones, as chat traffic is

Prompts are random token ids (the timing does not depend on them) and every request generates exactly its
output length (ignore_eos). Per request: time to first token (arrival to the first token seen on the host),
time per output token (the rest of the tokens' span over their count), latency (arrival to the last token).
A rate's row reports their p50/p99 and output tokens/s over the run. The same trace (make_trace, by seed) runs
through the PyTorch peers in scripts/peers/serve_peers.py, which share summarize().

With --url, the same trace goes through an OpenAI-compatible server's /completions endpoint instead (Baton's
`python -m baton serve`, `transformers serve`, vLLM), streamed, each request on its own connection as a client
would send it: a token is "seen" when its server-sent event arrives, and the tokens are the server's usage
count. The prompts are text: the checkpoint's tokenizer decodes the trace's ids (with the word tokenizer of
scripts/checkpoints/tiny_tokenizer.py, a prompt of N ids is N tokens on every server).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from baton.progress import Progress

FIXED_PROMPTS = (128, 512, 1024)
FIXED_OUTPUTS = (64, 128, 256)
ROW_KEYS = ("driver", "rate", "requests", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
            "latency_p50_ms", "latency_p99_ms", "output_tokens_per_s")


@dataclasses.dataclass
class TraceRequest:
    arrival_s: float
    prompt: List[int]
    output_tokens: int


@dataclasses.dataclass
class Timing:
    """When a request arrived and when each of its tokens was seen (perf_counter seconds)."""

    arrival_s: float
    first_s: Optional[float] = None
    end_s: Optional[float] = None
    tokens: int = 0


def make_trace(requests: int, rate: float, lengths: str, vocab: int, seed: int,
               max_context: Optional[int] = None) -> List[TraceRequest]:
    """The benchmark's requests: arrival times (Poisson at `rate`/s; all at 0 for inf) and lengths."""
    rng = random.Random(seed)
    trace = []
    clock = 0.0
    for _ in range(requests):
        if lengths == "fixed":
            prompt, output = rng.choice(FIXED_PROMPTS), rng.choice(FIXED_OUTPUTS)
        elif lengths == "longtail":
            prompt = int(min(max(rng.lognormvariate(math.log(256), 1.0), 16), 4000))
            output = int(min(max(rng.lognormvariate(math.log(128), 0.8), 8), 1024))
        else:
            raise ValueError(f"lengths {lengths!r} is not 'fixed' or 'longtail'")
        if max_context is not None and prompt + output > max_context:
            prompt = max(1, max_context - output)
        ids = [rng.randrange(vocab) for _ in range(prompt)]
        trace.append(TraceRequest(clock, ids, output))
        if math.isfinite(rate):
            clock += rng.expovariate(rate)
    return trace


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(driver: str, rate: float, timings: Sequence[Timing]) -> Dict[str, Any]:
    """One result row from the requests' timings (all finished)."""
    ttft = [(t.first_s - t.arrival_s) * 1e3 for t in timings]
    tpot = [(t.end_s - t.first_s) * 1e3 / (t.tokens - 1) for t in timings if t.tokens > 1]
    latency = [(t.end_s - t.arrival_s) * 1e3 for t in timings]
    span = max(t.end_s for t in timings) - min(t.arrival_s for t in timings)
    row = {"driver": driver, "rate": rate if math.isfinite(rate) else "inf", "requests": len(timings),
           "ttft_p50_ms": _percentile(ttft, 0.5), "ttft_p99_ms": _percentile(ttft, 0.99),
           "tpot_p50_ms": _percentile(tpot, 0.5), "tpot_p99_ms": _percentile(tpot, 0.99),
           "latency_p50_ms": _percentile(latency, 0.5), "latency_p99_ms": _percentile(latency, 0.99),
           "output_tokens_per_s": sum(t.tokens for t in timings) / span}
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}


def run_baton(llm: Any, trace: Sequence[TraceRequest], label: str, logprobs: Optional[int] = None) -> List[Timing]:
    """Replays the trace open-loop: each request is submitted at its arrival time, whatever is running (with
    `logprobs`, every request asks for them: their cost on the device and in the host's reshaping)."""
    from baton.sampling import SamplingParams

    timings = [Timing(0.0) for _ in trace]
    live: Dict[int, Any] = {}
    progress = Progress(len(trace), label)
    start = time.perf_counter()
    submitted = finished = 0
    while finished < len(trace):
        now = time.perf_counter()
        while submitted < len(trace) and start + trace[submitted].arrival_s <= now:
            item = trace[submitted]
            timings[submitted].arrival_s = start + item.arrival_s
            live[submitted] = llm.submit(item.prompt, SamplingParams(max_tokens=item.output_tokens,
                                                                     ignore_eos=True, logprobs=logprobs))
            submitted += 1
        for index in list(live):
            delta = live[index].poll()
            if delta.token_ids:
                seen = time.perf_counter()
                timing = timings[index]
                if timing.first_s is None:
                    timing.first_s = seen
                timing.tokens += len(delta.token_ids)
                timing.end_s = seen
            if delta.finished:
                del live[index]
                finished += 1
        progress.update(finished)
        next_arrival = start + trace[submitted].arrival_s if submitted < len(trace) else math.inf
        llm.wait(max(0.0, min(0.002, next_arrival - time.perf_counter())))
    return timings


async def _http_request(client: Any, url: str, body: Dict[str, Any], timing: Timing, delay: float) -> None:
    import asyncio

    await asyncio.sleep(delay)
    timing.arrival_s = time.perf_counter()
    usage = None
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}: {(await response.aread())[:500]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"{url} streamed an error: {chunk['error']}")
            if any(choice.get("text") for choice in chunk.get("choices") or ()):
                seen = time.perf_counter()
                if timing.first_s is None:
                    timing.first_s = seen
                timing.end_s = seen
            usage = chunk.get("usage") or usage
    if usage is None:
        raise RuntimeError(f"{url}: a stream ended with no usage (it must honour stream_options.include_usage)")
    if timing.first_s is None:  # ended at once by a token with no text (a stop token)
        timing.first_s = timing.end_s = time.perf_counter()
    timing.tokens = usage["completion_tokens"]


def run_http(url: str, texts: Sequence[str], trace: Sequence[TraceRequest], label: str,
             model: Optional[str] = None, api_key: Optional[str] = None) -> List[Timing]:
    """Replays the trace open-loop against url/completions (streamed, greedy); returns the timings."""
    import asyncio

    import httpx

    async def main() -> List[Timing]:
        timings = [Timing(0.0) for _ in trace]
        progress = Progress(len(trace), label)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(timeout=None, limits=limits, headers=headers) as client:
            done = 0

            async def one(i: int) -> None:
                nonlocal done
                body = {"prompt": texts[i], "max_tokens": trace[i].output_tokens, "temperature": 0.0,
                        "stream": True, "stream_options": {"include_usage": True}}
                if model:
                    body["model"] = model
                await _http_request(client, url.rstrip("/") + "/completions", body, timings[i],
                                    trace[i].arrival_s)
                done += 1
                progress.update(done)

            await asyncio.gather(*(one(i) for i in range(len(trace))))
        return timings

    return asyncio.run(main())


# Prompt ids are drawn from [0, vocab - _LOW) and shifted past the test tokenizers' special tokens, so that the
# text prompts are plain words.
_LOW = 8


def _texts(model_dir: str, trace: Sequence[TraceRequest]) -> List[str]:
    from baton.text import TextCodec

    codec = TextCodec.from_dir(model_dir)
    return [codec.decode([i + _LOW for i in t.prompt]) for t in trace]


def run_url(args: argparse.Namespace) -> int:
    """bench --url: the trace through a server (the model directory gives the tokenizer and the vocabulary)."""
    if args.logprobs is not None:
        raise SystemExit("bench: --logprobs runs in-process only; leave out --url")
    config = json.loads((Path(args.model) / "config.json").read_text())
    vocab, context = config["vocab_size"], args.max_context or config.get("max_position_embeddings")
    rows = []
    warm = make_trace(args.warmup, math.inf, args.lengths, vocab - _LOW, args.trace_seed + 1, context)
    run_http(args.url, _texts(args.model, warm), warm, "warm-up", args.served_model_name, args.api_key)
    for rate in rates_of(args.rates):
        trace = make_trace(args.requests, rate, args.lengths, vocab - _LOW, args.trace_seed, context)
        timings = run_http(args.url, _texts(args.model, trace), trace, f"{args.label} rate {rate:g}",
                           args.served_model_name, args.api_key)
        rows.append(summarize(args.label, rate, timings))
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": str(args.model), "url": args.url, "lengths": args.lengths,
                       "trace_seed": args.trace_seed, "rows": rows}, f, indent=1)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="benchmark this OpenAI-compatible server (its /v1 base URL) instead of an "
                                      "in-process LLM")
    parser.add_argument("--label", default="http", help="the rows' driver name with --url")
    parser.add_argument("--served-model-name", help="the 'model' field to send with --url (default: none)")
    parser.add_argument("--api-key", help="a Bearer key to send with --url")
    parser.add_argument("--requests", type=int, default=200, help="requests per rate")
    parser.add_argument("--rates", default="4,16,inf", help="arrival rates in requests/s (inf: all at once)")
    parser.add_argument("--lengths", default="fixed", choices=["fixed", "longtail"])
    parser.add_argument("--trace-seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=8, help="requests run before timing")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--logprobs", type=int, help="every request asks for its tokens' logprobs and this many top "
                                                     "alternatives (in-process only; rows named +logprobsN)")


def rates_of(text: str) -> List[float]:
    return [math.inf if r.strip() == "inf" else float(r) for r in text.split(",")]


def run(args: argparse.Namespace, make_llm: Callable[..., Any]) -> int:
    if args.url:
        return run_url(args)
    rows = []
    max_requests = max(args.requests, 1)
    with make_llm(args, max_requests=min(max(max_requests, 64), 4096)) as llm:
        vocab, context = llm.info["vocab_size"], llm.info["max_context"]
        run_baton(llm, make_trace(args.warmup, math.inf, args.lengths, vocab, args.trace_seed + 1, context),
                  "warm-up")
        for rate in rates_of(args.rates):
            trace = make_trace(args.requests, rate, args.lengths, vocab, args.trace_seed, context)
            timings = run_baton(llm, trace, f"baton rate {rate:g}", args.logprobs)
            suffix = "" if args.logprobs is None else f"+logprobs{args.logprobs}"
            rows.append(summarize(f"baton-{llm.info['engine']}{suffix}", rate, timings))
        info = dict(llm.info)
    print_rows(rows)
    if args.json:
        report = {"model": str(args.model), "lengths": args.lengths, "trace_seed": args.trace_seed,
                  "engine": info["engine"], "max_batch": info["max_batch"],
                  "max_tokens_per_step": info["max_tokens_per_step"], "rows": rows}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def print_rows(rows: Sequence[Dict[str, Any]]) -> None:
    header = ("driver", "rate", "req", "TTFT p50", "p99", "TPOT p50", "p99", "tok/s")
    print(" ".join(f"{h:>12}" for h in header))
    for r in rows:
        print(" ".join(f"{v:>12}" for v in (
            r["driver"][:12], r["rate"], r["requests"], f"{r['ttft_p50_ms']:.1f}", f"{r['ttft_p99_ms']:.1f}",
            f"{r['tpot_p50_ms']:.2f}", f"{r['tpot_p99_ms']:.2f}", f"{r['output_tokens_per_s']:.0f}")))
