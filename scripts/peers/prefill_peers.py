#!/usr/bin/env python3
"""PyTorch peers for Baton's prefill benchmark: time to first token and request time on the same GPU.

Run on the GPU machine in the same call as Baton's `prefill --json` sample, on
the same checkpoint shape (make_checkpoint.py --preset llama-3.2-1b: bf16,
random weights). Prompts are seeded random tokens, one [max batch, max prompt]
draw sliced per shape (batch 1's prompt is batch 8's first, 128 tokens the
first 128 of 1000). Every measurement is host wall time from the prompt's
token ids in pinned host memory to the tokens in host memory (the .tolist()
that a server does to send them), after --warmup untimed runs of that exact
shape; the value kept is the median of --repeats.

1. transformers-forward: AutoModelForCausalLM, eager, attn_implementation
   "sdpa", bf16; ttft_ms: model(input_ids, use_cache=True, logits_to_keep=1)
   (the LM head for the last position only, as generate() does) and the
   argmax of the last position. request_ms: model.generate(do_sample=False,
   min_new_tokens=N, max_new_tokens=N) timed whole.
2. gpt-fast-prefill-graph: the peers' gpt-fast-style decoder
   (gpt_fast_decoder.py); ttft_ms: prefill_first_tokens() (the whole prompt
   in one forward, SDPA is_causal with native GQA, the KV cache written for
   decoding, the LM head for the last position, argmax) torch.compile'd once
   with dynamic shapes (gpt-fast's --compile_prefill) and captured in a CUDA
   graph per (batch, prompt) over static buffers, replayed. request_ms: that
   replay, then N - 1 steps of pytorch_peers.py's compiled+sync decode loop
   (torch.compile'd one-token step captured in a CUDA graph, an .item() per
   step) on the cache the prefill wrote: N new tokens, as generate() counts.

request_ms is measured for --request-prompts only (default 1000, the target's
length): every request shape costs a compile of the decode step.

The floor per (batch, prompt): max(weight bytes read once / read bandwidth,
prefill FLOPs / matmul throughput), FLOPs = 2 x non-embedding parameters x
tokens + the LM head once per prompt + causal attention 4 x layers x heads x
head_dim x sum over prompts of p(p+1)/2; the bandwidth is the better of a
2 GiB device copy and a 2 GiB read (sum), the throughput the median of
torch.matmul 8192^3 bf16, all measured in this process; the JSON's
floor_inputs holds every input.

Before timing: the prefill forward against transformers in float32 (the tiny
presets on the CPU, then the benchmark checkpoint on the device) within
decoder_checks.CHECK_REL_TOL, or nothing is timed; then per shape the replayed
graph's last logits against the float32 eager forward of the same prompt, by
the parity check's rule (see GRAPH_TOL), or that shape is not timed.

    scripts/peers/prefill_peers.py --preset llama-3.2-1b --work /tmp/peers --json $OUT/prefill-peers.json
    scripts/peers/prefill_peers.py --checkpoint /tmp/ck/l1b --prompts 128,1000 --batches 1,8 --repeats 3
    scripts/peers/prefill_peers.py --self-test      # the tiny presets' check only (CPU)
"""
from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any, Callable

from peer_args import exit_status

try:
    import torch

    from decoder_checks import (CHECK_REL_TOL, SELF_TEST_PRESETS, _make_checkpoint_module, _rel,
                                check_prefill_against_transformers)
    from gpt_fast_decoder import (Decoder, ModelArgs, PeerError, Transformer, cache_tensors, load_transformer,
                                  prefill_first_tokens)
    from parity_compare import DTYPE_REFERENCE_FACTOR, LOGIT_BOUND  # scripts/checkpoints, via decoder_checks
    MISSING = None
except ModuleNotFoundError as error:  # --help works without torch; running needs it
    MISSING = error
    LOGIT_BOUND, DTYPE_REFERENCE_FACTOR = {"bf16": float("nan")}, float("nan")

DRIVERS = ("transformers-forward", "gpt-fast-prefill-graph")
# The replayed bf16 graph against the float32 eager forward of the same prompt:
# the parity check's rule (parity_compare.py), with our eager bf16 forward as the
# in-dtype reference: within LOGIT_BOUND, or within DTYPE_REFERENCE_FACTOR x that
# eager forward's own error. Fusion rounds differently from eager (graph vs eager
# bf16 measured 0.033-0.040 of max|logit| on the H100 at 128-1000 tokens, as far
# apart as each is from float32); a stale buffer or a wrong position is off by far more.
GRAPH_TOL = LOGIT_BOUND["bf16"]
MATMUL_N = 8192
BANDWIDTH_BYTES = 2 << 30  # 40x the H100's and H200's L2: every byte comes from HBM


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def wall_ms(fn: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
    """Host wall time of fn in ms, each run fenced by synchronizes (fn itself ends at a host read)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _event_ms(fn: Callable[[], Any], repeats: int = 10, warmup: int = 3) -> float:
    """Median device time of fn in ms (CUDA events), for the floor's bandwidth and throughput."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_device() -> dict[str, Any]:
    """Read bandwidth (the better of a copy and a pure read) and dense bf16 matmul throughput."""
    def bandwidths() -> tuple[float, float]:
        src = torch.ones(BANDWIDTH_BYTES // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        copy = 2 * BANDWIDTH_BYTES / _event_ms(lambda: dst.copy_(src)) / 1e6  # bytes read + written
        return copy, BANDWIDTH_BYTES / _event_ms(lambda: src.sum()) / 1e6

    def throughput() -> float:
        generator = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device="cuda", generator=generator)
        b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device="cuda", generator=generator)
        return 2 * MATMUL_N**3 / _event_ms(lambda: torch.matmul(a, b), repeats=20) / 1e9

    copy_gbps, read_gbps = bandwidths()
    tflops = throughput()
    torch.cuda.empty_cache()
    return {"copy_bandwidth_GBps": round(copy_gbps, 1), "read_bandwidth_GBps": round(read_gbps, 1),
            "bandwidth_GBps": round(max(copy_gbps, read_gbps), 1), "matmul_tflops": round(tflops, 1),
            "bandwidth_method": f"median of 10 CUDA-event timings: a {BANDWIDTH_BYTES >> 30} GiB float32 "
                                "device copy (bytes read + written) and torch.sum of it (bytes read); the better",
            "matmul_method": f"median of 20 CUDA-event timings of torch.matmul {MATMUL_N}x{MATMUL_N}x{MATMUL_N} "
                             "bf16 (random data), 2 N^3 FLOPs each"}


def model_counts(args: ModelArgs) -> dict[str, int]:
    """Parameters of the shape: the non-embedding ones (every layer, the final norm) and the LM head."""
    h, f = args.hidden_size, args.intermediate_size
    q, kv = args.heads * args.head_dim, args.kv_heads * args.head_dim
    layer = h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h  # QKV, O, gate/up/down, two norms
    layer += (q + 2 * kv) * args.qkv_bias + h * args.o_bias + (2 * f + h) * args.mlp_bias
    return {"non_embedding_parameters": args.layers * layer + h, "lm_head_parameters": args.vocab_size * h,
            "layers": args.layers, "heads": args.heads, "head_dim": args.head_dim,
            "tied_embeddings": int(args.tie_word_embeddings)}


def floor_ms(counts: dict[str, int], device: dict[str, Any], batch: int, prompt: int) -> dict[str, Any]:
    """The prefill floor of one shape and its terms."""
    flops = (2 * counts["non_embedding_parameters"] * batch * prompt + 2 * counts["lm_head_parameters"] * batch
             + 4 * counts["layers"] * counts["heads"] * counts["head_dim"] * batch * prompt * (prompt + 1) // 2)
    compute = flops / (device["matmul_tflops"] * 1e12) * 1e3
    memory = counts["weight_bytes"] / (device["bandwidth_GBps"] * 1e9) * 1e3
    return {"batch": batch, "prompt_tokens": prompt, "flops": flops, "compute_ms": round(compute, 4),
            "weights_ms": round(memory, 4), "floor_ms": round(max(compute, memory), 4),
            "bound": "compute" if compute >= memory else "weights"}


# --------------------------------------------------------------------------- drivers


def time_transformers(checkpoint: pathlib.Path, shapes: list[tuple[int, int]], prompts: dict, request: set[int],
                      args: argparse.Namespace) -> tuple[dict, dict[str, Any]]:
    """(batch, prompt) -> {ttft_ms, request_ms, first}: the eager transformers model, as most users run it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").to("cuda").eval()
    params = inspect.signature(model.forward).parameters
    keep = next(({k: 1} for k in ("logits_to_keep", "num_logits_to_keep") if k in params), {})
    n = args.new_tokens
    out: dict[tuple[int, int], dict[str, Any]] = {}
    with torch.inference_mode():
        for batch, prompt in shapes:
            host = prompts[(batch, prompt)]

            def first_token(host: torch.Tensor = host) -> list[int]:
                ids = host.to("cuda", non_blocking=True)
                logits = model(input_ids=ids, use_cache=True, **keep).logits
                return logits[:, -1].argmax(-1).tolist()

            r: dict[str, Any] = {"ttft_ms": statistics.median(wall_ms(first_token, args.repeats, args.warmup)),
                                 "first": first_token(), "request_ms": None}
            if prompt in request:
                def generate(host: torch.Tensor = host) -> list[list[int]]:
                    ids = host.to("cuda", non_blocking=True)
                    return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                          min_new_tokens=n, max_new_tokens=n, pad_token_id=0).tolist()

                r["request_ms"] = statistics.median(wall_ms(generate, args.repeats, 1))
            out[(batch, prompt)] = r
            print(f"  transformers-forward b{batch} p{prompt}: ttft {r['ttft_ms']:.2f} ms"
                  + (f", request {r['request_ms']:.1f} ms" if r["request_ms"] else ""), flush=True)
    settings = {"how": "AutoModelForCausalLM.from_pretrained(dtype=bfloat16, attn_implementation='sdpa'), eager; "
                       f"ttft: model(input_ids, use_cache=True{', ' + next(iter(keep)) + '=1' if keep else ''}) + "
                       "argmax of the last position + .tolist(); request: generate(do_sample=False, "
                       "min_new_tokens=N, max_new_tokens=N).tolist()",
                "logits_to_keep": next(iter(keep), None)}
    return out, settings


class PrefillGraph:
    """One (batch, prompt) shape's prefill over static buffers, captured in a CUDA graph.

    The graph runs `fn` (prefill_first_tokens, compiled or not) on the static
    prompt buffer, writing the decoder's KV cache, and leaves the decoder's
    state as Decoder.prefill does (next tokens, position, finished flags, the
    first generated token), so the decode step's graph can follow at once.
    """

    def __init__(self, model: Transformer, decoder: Decoder, fn: Callable) -> None:
        self.model, self.decoder, self.fn = model, decoder, fn
        p = decoder.prompt_tokens
        self.tokens = torch.zeros(decoder.batch, p, dtype=torch.long, device=model.output.weight.device)
        self.caches = cache_tensors(model)
        self.cos, self.sin = model.cos[:p], model.sin[:p]  # views of the decoder's tables, kept alive by it
        self.graph: torch.cuda.CUDAGraph | None = None
        self.first = self.logits = torch.empty(0)

    def _body(self) -> tuple[torch.Tensor, torch.Tensor]:
        first, logits = self.fn(self.model, self.tokens, self.caches, self.cos, self.sin)
        d = self.decoder
        d.tokens.copy_(first[:, None])
        d.pos.fill_(d.prompt_tokens)
        d.finished.copy_(first == d.stop)
        d.generated.zero_()
        d.generated[:, 0] = first
        return first, logits

    def capture(self, warmup: int = 2) -> None:
        """Warm-up on a side stream (compiles for this shape, settles lazy state), then capture."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self._body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.first, self.logits = self._body()
        torch.cuda.synchronize()

    def first_tokens(self, host: torch.Tensor) -> list[int]:
        self.tokens.copy_(host, non_blocking=True)
        assert self.graph is not None
        self.graph.replay()
        return self.first.tolist()


def _compile_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def time_gpt_fast(checkpoint: pathlib.Path, shapes: list[tuple[int, int]], prompts: dict, request: set[int],
                  args: argparse.Namespace) -> tuple[dict, dict[str, Any]]:
    """(batch, prompt) -> {ttft_ms, request_ms, first, check} for the captured prefill (+ decode loop)."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    if not args.no_coordinate_descent:
        inductor_config.coordinate_descent_tuning = True  # as gpt-fast and pytorch_peers.py set it
    # Every request shape compiles the decode step anew (static shapes) next to the one
    # dynamic prefill: never let dynamo hit its limit and fall back to eager unnoticed.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 64)
    model = load_transformer(checkpoint, torch.bfloat16, "cuda").requires_grad_(False)
    reference = load_transformer(checkpoint, torch.float32, "cuda").requires_grad_(False)  # the graph's check
    fn: Callable = prefill_first_tokens
    if args.prefill_compile == "dynamic":
        # gpt-fast's --compile_prefill: one compile for every prompt length (dynamic), then a
        # graph per shape, so the elementwise ops (RMSNorm, RoPE, SiLU*up) run fused.
        fn = torch.compile(prefill_first_tokens, dynamic=True, fullgraph=True)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    compile_log: list[dict[str, Any]] = []
    with torch.inference_mode():
        for batch, prompt in shapes:
            host = prompts[(batch, prompt)]
            decoder = Decoder(model, batch, prompt, args.new_tokens, stop_token=-1)  # its cache: prompt + n positions
            graph = PrefillGraph(model, decoder, fn)
            graph.tokens.copy_(host)
            start, graphs = time.perf_counter(), _compile_count()
            graph.capture()
            compile_log.append({"shape": f"b{batch} p{prompt}", "new_dynamo_graphs": _compile_count() - graphs,
                                "prefill_capture_s": round(time.perf_counter() - start, 1)})
            check = _check_graph(graph, model, reference, host)
            r: dict[str, Any] = {"check": check, "ttft_ms": None, "request_ms": None}
            out[(batch, prompt)] = r
            if not check["passed"]:
                print(f"  gpt-fast-prefill-graph b{batch} p{prompt}: {check}; not timed", flush=True)
                continue
            r.update(_time_graph(graph, decoder, host, prompt in request, args))
            if "decode_compile_capture_s" in r:
                compile_log[-1]["decode_compile_capture_s"] = r.pop("decode_compile_capture_s")
            print(f"  gpt-fast-prefill-graph b{batch} p{prompt}: ttft {r['ttft_ms']:.2f} ms"
                  + (f", request {r['request_ms']:.1f} ms" if r["request_ms"] else "")
                  + f" (vs float32: graph {check['graph']:.1e}, eager bf16 {check['eager_bf16']:.1e}; "
                    f"{compile_log[-1]})", flush=True)
            graph = decoder = None  # their graphs, caches and pools go before the next shape's
            torch.cuda.empty_cache()
    settings = {"how": "gpt_fast_decoder.prefill_first_tokens (SDPA is_causal + enable_gqa over the prompt, KV cache "
                       "written, LM head on the last position, argmax) "
                       + ("torch.compile(dynamic=True, fullgraph=True), " if args.prefill_compile == "dynamic" else
                          "eager ops, ") + "captured in a CUDA graph per (batch, prompt) over static buffers; ttft: "
                       "prompt copied into the static buffer, replay, .tolist() of the first tokens; request: that, "
                       "then N - 1 replays of the compiled one-token step's graph with an .item() each "
                       "(pytorch_peers.py's compiled+sync loop), then .tolist() of the tokens",
                "prefill_compile": args.prefill_compile, "decode_compile_mode": args.compile_mode,
                "coordinate_descent_tuning": not args.no_coordinate_descent,
                "decode_kv_cache_positions": "prompt + new_tokens per shape (attention over the whole static cache)",
                "sdpa_backend_prefill": _sdpa_backend(model.args), "compiles": compile_log,
                "dynamo_graphs_total": _compile_count()}
    return out, settings


def _check_graph(graph: PrefillGraph, model: Transformer, reference: Transformer, host: torch.Tensor
                 ) -> dict[str, Any]:
    """The replayed graph's last logits and the eager bf16 forward's, each against float32 eager."""
    graph.first_tokens(host)
    got = graph.logits.float().clone()
    _, eager = prefill_first_tokens(model, graph.tokens, graph.caches, graph.cos, graph.sin)
    batch, prompt = graph.tokens.shape
    reference.setup_caches(batch, prompt)
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        _, exact = prefill_first_tokens(reference, graph.tokens, cache_tensors(reference), reference.cos,
                                        reference.sin)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    check = {"graph": _rel(got, exact), "eager_bf16": _rel(eager.float(), exact), "graph_vs_eager_bf16":
             _rel(got, eager.float())}
    check["bound"] = max(GRAPH_TOL, DTYPE_REFERENCE_FACTOR * check["eager_bf16"])
    check["passed"] = check["graph"] <= check["bound"]
    return check


def _time_graph(graph: PrefillGraph, decoder: Decoder, host: torch.Tensor, request: bool,
                args: argparse.Namespace) -> dict[str, Any]:
    """TTFT of the captured prefill; with `request`, the whole request through the decode step's graph."""
    r: dict[str, Any] = {"ttft_ms": statistics.median(wall_ms(lambda: graph.first_tokens(host), args.repeats,
                                                              args.warmup)),
                         "first": graph.first_tokens(host), "request_ms": None}
    if request:
        start = time.perf_counter()
        if args.compile_mode != "none":
            decoder.compile(args.compile_mode)
        decoder.capture()  # warms up (compiles) on a side stream first; moves the state, which the prefill resets
        r["decode_compile_capture_s"] = round(time.perf_counter() - start, 1)

        def whole_request() -> list[list[int]]:
            graph.first_tokens(host)  # the first token reaches the host, as a server sends it
            decoder.run_sync(args.new_tokens - 1)
            return decoder.generated.tolist()

        r["request_ms"] = statistics.median(wall_ms(whole_request, args.repeats, 1))
    return r


def _sdpa_backend(a: ModelArgs) -> str:
    """The backend SDPA picks for the prefill's attention (batch 1, 1000 tokens, bf16)."""
    try:
        from torch.nn.attention import SDPBackend

        q = torch.empty(1, a.heads, 1000, a.head_dim, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(1, a.kv_heads, 1000, a.head_dim, dtype=torch.bfloat16, device="cuda")
        choice = torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=a.heads != a.kv_heads)
        return next((name for name, b in SDPBackend.__members__.items() if int(b.value) == choice), str(choice))
    except Exception as error:  # private API: a record, never a reason to fail
        return f"unknown ({type(error).__name__})"


# --------------------------------------------------------------------------- main


def tiny_checks(work: pathlib.Path) -> list[dict[str, Any]]:
    """The prefill forward against transformers on each architecture's tiny preset, float32 on the CPU."""
    make = _make_checkpoint_module()
    results = []
    for preset in SELF_TEST_PRESETS:
        checkpoint = make.make_checkpoint(work / f"peers-selftest-{preset}", preset=preset, reuse=True,
                                          log=lambda *_: None)
        r = check_prefill_against_transformers(checkpoint, "cpu", prompt_tokens=16)
        r["preset"] = preset
        print(f"prefill check {preset:17} max rel logit error {r['max_rel_logit_error']:.2e} "
              f"(tolerance {CHECK_REL_TOL:g}), greedy tokens equal: {r['greedy_tokens_equal']}", flush=True)
        results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a local Hugging Face checkpoint directory")
    parser.add_argument("--preset", help="make this preset's checkpoint in --work instead (make_checkpoint.py)")
    parser.add_argument("--work", default="/tmp/baton-peers", help="where checkpoints go (reused)")
    parser.add_argument("--prompts", default="128,512,1000,2000,4000", help="prompt lengths (tokens)")
    parser.add_argument("--batches", default="1,8", help="prompts prefilled together")
    parser.add_argument("--new-tokens", "--new_tokens", dest="new_tokens", type=int, default=128,
                        help="new tokens of a request (request_ms)")
    parser.add_argument("--request-prompts", default="1000",
                        help='prompt lengths whose request_ms is measured: a list, "all" or "none"')
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per driver and shape (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs of each shape before its TTFT timing")
    parser.add_argument("--drivers", default=",".join(DRIVERS), help=f"subset of {', '.join(DRIVERS)}")
    parser.add_argument("--prefill-compile", choices=("dynamic", "none"), default="dynamic",
                        help="gpt-fast-prefill-graph: torch.compile the prefill (dynamic shapes) or capture eager ops")
    parser.add_argument("--compile-mode", default="default",
                        help='torch.compile mode of the decode step ("none": eager step in the graph)')
    parser.add_argument("--no-coordinate-descent", action="store_true",
                        help="leave inductor's coordinate_descent_tuning off (gpt-fast turns it on)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    parser.add_argument("--model-name", help="the rows' model label (default: --preset, else the directory's name)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--self-test", action="store_true",
                        help="only check the prefill forward against transformers on the tiny presets (CPU)")
    args = parser.parse_args(argv)
    if MISSING is not None:
        print(f"error: {MISSING} (the peers need torch, transformers and safetensors)", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: the GPU machine has no internet
    return exit_status(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    work = pathlib.Path(args.work)
    if args.self_test:
        return 0 if all(r["passed"] and r["greedy_tokens_equal"] for r in tiny_checks(work)) else 1
    drivers = [d for d in args.drivers.split(",") if d]
    if set(drivers) - set(DRIVERS):
        raise PeerError(f"unknown driver(s) {sorted(set(drivers) - set(DRIVERS))}; known: {', '.join(DRIVERS)}")
    if not torch.cuda.is_available():
        raise PeerError("no CUDA device: the peers time GPU prefill (--self-test runs on the CPU)")
    if (args.checkpoint is None) == (args.preset is None):
        raise PeerError("give exactly one of --checkpoint DIR or --preset NAME")
    if args.new_tokens < 2:
        raise PeerError("--new-tokens must be at least 2 (a first token and a decode step)")
    began = time.perf_counter()
    if args.checkpoint:
        checkpoint = pathlib.Path(args.checkpoint)
    else:
        checkpoint = _make_checkpoint_module().make_checkpoint(work / args.preset, preset=args.preset, reuse=True,
                                                               device="cuda")
    model_name = args.model_name or args.preset or checkpoint.name
    prompts_list, batches = _ints(args.prompts), _ints(args.batches)
    request = (set(prompts_list) if args.request_prompts == "all" else
               set() if args.request_prompts == "none" else set(_ints(args.request_prompts)))
    shapes = [(b, p) for b in batches for p in prompts_list]
    margs = ModelArgs.from_checkpoint(checkpoint)

    # Refuse to time a prefill that disagrees with transformers.
    tiny = tiny_checks(work)
    if not all(r["passed"] and r["greedy_tokens_equal"] for r in tiny):
        raise PeerError("the prefill forward disagrees with transformers on a tiny preset; not timing it")
    bench = check_prefill_against_transformers(checkpoint, "cuda", batch=2, prompt_tokens=128)
    print(f"{model_name}: prefill vs transformers (float32, cuda): {bench['errors']} (tolerance "
          f"{CHECK_REL_TOL:g}), greedy tokens equal: {bench['greedy_tokens_equal']}", flush=True)
    if not bench["passed"]:
        raise PeerError(f"the prefill forward disagrees with transformers on {checkpoint} "
                        f"({bench['max_rel_logit_error']:.2e} > {CHECK_REL_TOL:g}); not timing it")
    torch.cuda.empty_cache()

    device = measure_device()
    counts = model_counts(margs)
    counts["weight_bytes"] = (counts["non_embedding_parameters"] + counts["lm_head_parameters"]) * 2  # bf16
    floors = {(b, p): floor_ms(counts, device, b, p) for b, p in shapes}
    print(f"device: {device['bandwidth_GBps']:.0f} GB/s, {device['matmul_tflops']:.0f} TFLOP/s; "
          f"{time.perf_counter() - began:.0f} s so far", flush=True)

    generator = torch.Generator().manual_seed(args.seed)
    draw = torch.randint(0, margs.vocab_size, (max(batches), max(prompts_list)), generator=generator)
    prompts = {(b, p): draw[:b, :p].contiguous().pin_memory() for b, p in shapes}
    results: dict[str, dict] = {}
    settings: dict[str, Any] = {}
    failed = []
    timers = {"transformers-forward": time_transformers, "gpt-fast-prefill-graph": time_gpt_fast}
    for driver in drivers:  # in the order given
        timer = timers[driver]
        try:
            results[driver], settings[driver] = timer(checkpoint, shapes, prompts, request, args)
        except Exception as error:  # noqa: BLE001  one driver's failure must not discard the other's rows
            traceback.print_exc()
            settings[driver] = {"error": f"{type(error).__name__}: {error}"}
            failed.append(driver)
        torch.cuda.empty_cache()
        print(f"{driver} done, {time.perf_counter() - began:.0f} s so far", flush=True)

    rows = []
    for b, p in shapes:
        for driver, by_shape in results.items():
            r = by_shape[(b, p)]
            rows.append({"model": model_name, "batch": b, "prompt_tokens": p, "new_tokens": args.new_tokens,
                         "driver": driver, "ttft_ms": _round(r["ttft_ms"], 3), "request_ms": _round(r["request_ms"], 2),
                         "floor_ms": round(floors[(b, p)]["floor_ms"], 3)})
    agree = {}
    if len(results) == len(DRIVERS):  # bf16 first tokens of a random model flip at near-ties: information, not a gate
        for b, p in shapes:
            x, y = (results[d][(b, p)].get("first") for d in DRIVERS)
            if x and y:
                agree[f"b{b} p{p}"] = f"{sum(i == j for i, j in zip(x, y))}/{len(x)}"
    refused = [f"b{b} p{p}" for b, p in shapes
               if not results.get("gpt-fast-prefill-graph", {}).get((b, p), {}).get("check", {}).get("passed", True)]
    settings.update({"dtype": "bfloat16", "repeats": args.repeats, "warmup": args.warmup, "new_tokens": args.new_tokens,
                     "request_prompts": sorted(request & set(prompts_list)), "prompts": f"random, seed {args.seed}",
                     "statistic": "median of repeats, host wall time (perf_counter) from pinned host prompt ids to "
                                  "host tokens, fenced by torch.cuda.synchronize()",
                     "ttft_ms": "prompt forward + greedy first token of every prompt of the batch on the host",
                     "request_ms": "the same + new_tokens - 1 greedy decode steps, all tokens on the host",
                     "floor_ms": "max(weight_bytes / bandwidth, flops / matmul throughput): floor_inputs"})
    report = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "transformers": _transformers_version(), "checkpoint": str(checkpoint),
              "model": model_name, "settings": settings,
              "floor_inputs": {**device, **counts, "weight_bytes_note": "non-embedding + LM head parameters x 2 "
                               "bytes (bf16): every weight read once; the embedding gather reads only its rows",
                               "flops_formula": "2 x non_embedding_parameters x batch x prompt + 2 x "
                               "lm_head_parameters x batch + 4 x layers x heads x head_dim x batch x p(p+1)/2",
                               "shapes": list(floors.values())},
              "checks": {"tiny_presets_prefill_vs_transformers_float32_cpu": tiny,
                         "benchmark_checkpoint_prefill_vs_transformers_float32": bench,
                         "graph_vs_float32_rule": f"max rel logit error <= max({GRAPH_TOL:g}, "
                                                  f"{DTYPE_REFERENCE_FACTOR:g} x the eager bf16 forward's)",
                         "graph_vs_float32": {f"b{b} p{p}": r["check"] for (b, p), r in
                                                 results.get("gpt-fast-prefill-graph", {}).items()},
                         "not_timed_graph_disagreed": refused,
                         "first_tokens_equal_transformers_vs_gpt_fast_bf16": agree},
              "rows": rows}
    _print_rows(rows)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json} ({time.perf_counter() - began:.0f} s)")
    if failed:
        print(f"error: {', '.join(failed)} failed (settings.<driver>.error)", file=sys.stderr)
    return 3 if failed else 1 if refused else 0


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"  {'batch':>5} {'prompt':>6} {'driver':24} {'ttft ms':>9} {'request ms':>10} {'floor ms':>9}")
    for r in rows:
        req = "" if r["request_ms"] is None else f"{r['request_ms']:.1f}"
        ttft = "not timed" if r["ttft_ms"] is None else f"{r['ttft_ms']:.2f}"
        print(f"  {r['batch']:>5} {r['prompt_tokens']:>6} {r['driver']:24} {ttft:>9} {req:>10} {r['floor_ms']:>9.2f}")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


if __name__ == "__main__":
    sys.exit(main())
