#!/usr/bin/env python3
"""PyTorch peer for Baton's long_context sample: the decode step at long contexts, compiled and graph-captured.

Per batch B and context C (samples/long_context/main.cc's grid): B seeded random prompts of C tokens are
prefilled in --chunk token chunks into a static bf16 KV cache of C + new_tokens positions (rounded up to
CACHE_ALIGN); the batch's one-token step (gpt_fast_decoder.py's weights and layers) is timed as a careful
PyTorch user runs it: torch.compile'd (fullgraph, static shapes, coordinate-descent tuning, as gpt-fast and
pytorch_peers.py), captured in a CUDA graph, replayed back to back. Its attention reads the whole static cache
under a boolean mask made in the step (key position <= the step's; no context x context table) by SDPA's
native GQA (enable_gqa=True, no repeat_interleave'd K/V): "PyTorch compiled, SDPA GQA, CUDA graph".
--attention sdpa-gqa,sdpa-grouped adds a row whose step folds each KV head's query heads into SDPA's query
axis (exact for one query position), so SDPA sees equal head counts.

Timing: CUDA events around each of new_tokens replays (contexts C .. C + new_tokens - 1), the median step of
a run, the median of --repeats runs after one warm-up run. The prompts are prefilled once per (B, C): a run
restarts from the prefill's first token and rewrites only positions past the prompt. Prefill: the first chunk
by SDPA is_causal over its own keys, each later one by SDPA over the cached prefix with causal_lower_right
(FlashAttention's causal on the GPU, no mask materialised); prefill_ms is its host time, for information. A
(B, C) whose KV cache and working memory exceed the free GPU memory (estimated first), or that runs out of it
anyway, gets a row with `skipped`. --json is rewritten after every point. Checked before timing, or nothing is
timed: the decoder against transformers on the benchmark checkpoint at a short context, chunked prefill and
decode steps (float32 within CHECK_REL_TOL, bf16 within the parity bound), and the compiled graph's tokens
against the eager step's (float32, tiny Llama preset).

    scripts/peers/long_context_peers.py --checkpoint /tmp/ck/llama-3.2-1b --contexts 1024,8192,32768,131072 \\
        --batches 1,8 --new-tokens 64 --repeats 3 --json $OUT/long-context-peer.json
    scripts/peers/long_context_peers.py --checkpoint DIR --device cpu --contexts 64,256 --batches 1,2 --chunk 48

--device cpu is only a smoke test of the code paths, not a measurement: the step runs eagerly (compiled only
with --compile-mode), without a CUDA graph, timed by the host clock, and its driver name says so.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import json
import os
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any

from peer_args import PeerError, exit_status, parse_list

try:
    import torch
    import torch.nn.functional as F

    from decoder_checks import CHECK_REL_TOL, SELF_TEST_PRESETS, _make_checkpoint_module, _rel
    from gpt_fast_decoder import Transformer, load_transformer, rope_inv_freq, rotate_half
    from parity_compare import LOGIT_BOUND  # scripts/checkpoints, on the path via decoder_checks
    MISSING, inference_mode = None, torch.inference_mode
except ModuleNotFoundError as error:  # --help and input errors work without torch
    MISSING, inference_mode = error, lambda: (lambda f: f)


ATTENTION = {"sdpa-gqa": "SDPA GQA", "sdpa-grouped": "SDPA grouped queries"}


def driver_name(attention: str, compiled: bool, graph: bool) -> str:
    """'PyTorch compiled, SDPA GQA, CUDA graph' for the measurement; a CPU smoke test's name says what ran."""
    return (f"PyTorch {'compiled' if compiled else 'eager'}, {ATTENTION[attention]}" + (", CUDA graph" if graph else "")
            + ("" if graph else " (CPU smoke test)"))

# The static cache's length is rounded up to this: SDPA's memory-efficient kernel wants the mask's
# last dimension a multiple of 16 (else it pads a copy each call); 256 also keeps tiles whole.
CACHE_ALIGN = 256
CHECK_CONTEXT, CHECK_CHUNK, CHECK_STEPS = 300, 128, 4  # the checks' shape: three chunks, the last partial


# --------------------------------------------------------------------------- the decoder


class LongContextDecoder:
    """A batch's static KV cache and greedy decode state over a loaded Transformer's weights. Not
    setup_caches(): it also builds a max_seq_len^2 mask table (17 GB at 131,072); the step makes its mask from
    the position. The step touches only tensors held here, so it can be captured: a replay is one step."""

    def __init__(self, model: Transformer, batch: int, context: int, new_tokens: int, attention: str) -> None:
        a = model.args
        self.model, self.batch, self.context, self.new_tokens, self.attention = (model, batch, context, new_tokens,
                                                                                  attention)
        self.cache_len = -(-(context + new_tokens) // CACHE_ALIGN) * CACHE_ALIGN
        if a.sliding_window is not None and self.cache_len > a.sliding_window:
            raise PeerError(f"{self.cache_len} positions exceed the sliding window ({a.sliding_window}), "
                            "which this decoder does not implement")
        dtype, device = model.output.weight.dtype, model.output.weight.device
        shape = (batch, a.kv_heads, self.cache_len, a.head_dim)  # K, V apart: compiled inputs must not alias
        self.caches = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                       for _ in range(a.layers)]
        # cos/sin in float32 then rounded to the model dtype, as transformers (and setup_caches) do.
        freqs = torch.outer(torch.arange(self.cache_len, dtype=torch.float32), rope_inv_freq(a))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)
        self.key_positions = torch.arange(self.cache_len, device=device)
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.first = torch.zeros(batch, dtype=torch.long, device=device)
        self.generated = torch.zeros(batch, new_tokens + 1, dtype=torch.long, device=device)  # [0]: prefill's
        self.step_fn, self.graph, self.prefill_attention = self._step, None, "none yet"

    def _attention(self, attn: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor,
                   cache: tuple[torch.Tensor, torch.Tensor], mode: str, mask: torch.Tensor | None,
                   prefix: int) -> torch.Tensor:
        """gpt_fast_decoder.Attention's projections and RoPE; the attention itself by `mode`."""
        a = attn.args
        batch, seq, _ = x.shape
        q, k, v = attn.wqkv(x).split(attn.split, dim=-1)
        q = q.view(batch, seq, a.heads, a.head_dim).transpose(1, 2)
        k = k.view(batch, seq, a.kv_heads, a.head_dim).transpose(1, 2)
        v = v.view(batch, seq, a.kv_heads, a.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        cache[0].index_copy_(2, input_pos, k)
        cache[1].index_copy_(2, input_pos, v)
        gqa = a.heads != a.kv_heads
        if mode == "first":  # positions 0..seq-1: the chunk's own keys, causal, no mask tensor
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        elif mode == "chunk":  # positions prefix-seq..prefix-1 over the cached prefix
            y = self._chunk_attention(q, cache[0][:, :, :prefix], cache[1][:, :, :prefix], gqa)
        elif self.attention == "sdpa-gqa":  # decode: the whole static cache, masked past the position
            y = F.scaled_dot_product_attention(q, cache[0], cache[1], attn_mask=mask, enable_gqa=gqa)
        else:  # sdpa-grouped: one query position, so each KV head's query heads can stand in for positions
            group = a.heads // a.kv_heads
            y = F.scaled_dot_product_attention(q.reshape(batch, a.kv_heads, group * seq, a.head_dim), cache[0],
                                               cache[1], attn_mask=mask)
            y = y.reshape(batch, a.heads, seq, a.head_dim)
        return attn.wo(y.transpose(1, 2).reshape(batch, seq, a.heads * a.head_dim))

    def _chunk_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> torch.Tensor:
        """Queries at the prefix's last positions, keys the whole prefix: causal aligned bottom-right."""
        from torch.backends.cuda import SDPAParams, can_use_flash_attention
        from torch.nn.attention.bias import causal_lower_right

        seq, prefix = q.shape[2], k.shape[2]
        if q.is_cuda and can_use_flash_attention(SDPAParams(q, k, v, None, 0.0, False, gqa)):
            # FlashAttention's causal is bottom-right with native GQA: no mask, no K/V copies.
            self.prefill_attention = "FlashAttention, lower-right causal (causal_lower_right), native GQA"
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(seq, prefix), enable_gqa=gqa)
        # Elsewhere (CPU, float32): the chunk x prefix boolean mask (not context x context), made explicit
        # so that no backend's own lower-right path has to support GQA.
        self.prefill_attention = "SDPA with a materialised chunk x prefix boolean mask"
        mask = causal_lower_right(seq, prefix)._materialize(q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, mode: str, prefix: int = 0,
                last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, V] (or [B, 1, V]) of tokens [B, T] at positions input_pos [T] (mode: first, chunk, decode)."""
        m = self.model
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        # [1, 1, T, cache_len]: key s visible to the query at position t if s <= t.
        mask = (self.key_positions[None, :] <= input_pos[:, None])[None, None] if mode == "decode" else None
        x = m.embed(tokens)
        for layer, cache in zip(m.layers, self.caches):
            x = x + self._attention(layer.attention, layer.attention_norm(x), cos, sin, input_pos, cache, mode, mask,
                                    prefix)
            x = x + layer.feed_forward(layer.ffn_norm(x))
        if last_only:
            x = x[:, -1:]  # the LM head where a token is picked only
        return m.output(m.norm(x))

    @inference_mode()
    def prefill(self, prompts: torch.Tensor, chunk: int) -> torch.Tensor:
        """The prompts [B, C] in chunks of `chunk` tokens; returns the last position's logits [B, V]."""
        logits = torch.empty(0)
        for start in range(0, self.context, chunk):
            end = min(self.context, start + chunk)
            positions = torch.arange(start, end, device=prompts.device)
            logits = self.forward(prompts[:, start:end], positions, "first" if start == 0 else "chunk", prefix=end,
                                  last_only=end == self.context)
        self.first.copy_(logits[:, -1].argmax(-1))
        self.reset()
        return logits[:, -1]

    def reset(self) -> None:
        """Back to the state right after prefill: the first token to feed, at position C."""
        self.tokens.copy_(self.first[:, None])
        self.pos.fill_(self.context)
        self.generated.zero_()
        self.generated[:, 0] = self.first

    def _step(self) -> None:
        """One decode step: feed self.tokens at self.pos, pick greedily, update the state in place."""
        logits = self.forward(self.tokens, self.pos, "decode")
        nxt = logits[:, -1].argmax(-1)
        self.generated.index_copy_(1, self.pos - (self.context - 1), nxt[:, None])
        self.tokens.copy_(nxt[:, None])
        self.pos.add_(1)

    def compile(self, mode: str) -> None:
        # dynamic=False: each (batch, cache length) is its own static shape, as its CUDA graph is.
        self.step_fn = torch.compile(self._step, mode=None if mode == "default" else mode, fullgraph=True,
                                     dynamic=False)

    @inference_mode()
    def capture(self, warmup_steps: int = 3) -> None:
        """pytorch_peers.py's recipe: warm up (compile, autotune) on a side stream, then capture one step."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_steps):
                self.pos.fill_(self.context)
                self.step_fn()
        torch.cuda.current_stream().wait_stream(side)
        self.reset()
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step_fn()
        torch.cuda.synchronize()
        self.reset()

    def _host_step_us(self) -> float:
        start = time.perf_counter()
        self.step_fn()
        return (time.perf_counter() - start) * 1e6

    @inference_mode()
    def run_steps(self, steps: int) -> list[float]:
        """µs of each of `steps` steps from the reset state: CUDA events around replays, else host time."""
        self.reset()
        if self.graph is None:  # the CPU (host clock; its ops are synchronous) or an eager reference run
            return [self._host_step_us() for _ in range(steps)]
        events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        events[0].record()
        for i in range(steps):
            self.graph.replay()
            events[i + 1].record()
        events[-1].synchronize()
        return [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(steps)]


# --------------------------------------------------------------------------- checks


@inference_mode()
def check_chunked_against_transformers(checkpoint: pathlib.Path, device: str, batch: int = 2,
                                       context: int = CHECK_CONTEXT, chunk: int = CHECK_CHUNK,
                                       steps: int = CHECK_STEPS, attention: tuple[str, ...] = tuple(ATTENTION),
                                       seed: int = 0) -> dict[str, Any]:
    """Chunked prefill + teacher-forced decode steps against one transformers forward (float32, eager) over the
    same tokens, each attention variant: the last prompt position's logits and each step's, as a share of
    max|logit|. float32 within CHECK_REL_TOL; bf16 (the timed dtype: FlashAttention's chunks on the GPU) within
    the parity bound or twice transformers-in-bf16's own error."""
    from transformers import AutoModelForCausalLM

    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32,
                                                  attn_implementation="eager").to(device).eval()
        ids = torch.randint(0, hf.config.vocab_size, (batch, context + steps),
                            generator=torch.Generator().manual_seed(seed)).to(device)
        want = hf(input_ids=ids).logits[:, context - 1:context + steps].float()  # [B, steps + 1, V]
        del hf
        result: dict[str, Any] = {"checkpoint": str(checkpoint), "device": device, "batch": batch, "context": context,
                                  "chunk": chunk, "steps": steps, "tolerance_float32": CHECK_REL_TOL}
        hf16 = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16,
                                                    attn_implementation="sdpa").to(device).eval()
        own = _rel(hf16(input_ids=ids).logits[:, context - 1:context + steps].float(), want)
        result.update(transformers_bf16_error=own, bound_bf16=max(LOGIT_BOUND["bf16"], 2.0 * own))
        del hf16
        passed = True
        for dtype in (torch.float32, torch.bfloat16):
            model = load_transformer(checkpoint, dtype, device)
            for variant in attention:
                d = LongContextDecoder(model, batch, context, steps + 1, variant)
                errors = [_rel(d.prefill(ids[:, :context], chunk).float(), want[:, 0])]
                for i in range(steps):
                    d.tokens.copy_(ids[:, context + i:context + i + 1])  # teacher-forced
                    errors.append(_rel(d.forward(d.tokens, d.pos, "decode")[:, -1].float(), want[:, i + 1]))
                    d.pos.add_(1)
                key = f"{variant} {'float32' if dtype == torch.float32 else 'bf16'}"
                bound = CHECK_REL_TOL if dtype == torch.float32 else result["bound_bf16"]
                result[key] = {"prefill_last_position": errors[0], "decode_steps": max(errors[1:]),
                               "prefill_attention": d.prefill_attention, "passed": max(errors) <= bound}
                passed &= result[key]["passed"]
            del model
        result["passed"] = passed
        return result
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32


@inference_mode()
def graph_matches_eager(checkpoint: pathlib.Path, device: str, compile_mode: str, attention: str,
                        steps: int = 6) -> bool:
    """The compiled (and on CUDA captured) step gives the eager step's tokens, float32, after a chunked prefill."""
    model = load_transformer(checkpoint, torch.float32, device)
    prompts = torch.randint(0, model.args.vocab_size, (2, 100), generator=torch.Generator().manual_seed(1))
    d = LongContextDecoder(model, 2, 100, steps, attention)
    d.prefill(prompts.to(device), 48)
    d.run_steps(steps)
    want = d.generated.clone()
    d.compile(compile_mode)
    if device.startswith("cuda"):
        d.capture()
    d.run_steps(steps)
    same = bool(torch.equal(d.generated, want))
    print(f"compiled{' + CUDA graph' * (d.graph is not None)} step vs eager ({attention}, float32): {same}", flush=True)
    return same


def summary(r: dict[str, Any]) -> str:
    """One line of a check: each variant and dtype's prefill/steps errors, the bounds, the verdict."""
    checks = {k: v for k, v in r.items() if isinstance(v, dict)}
    return (", ".join(f"{k} {v['prefill_last_position']:.1e}/{v['decode_steps']:.1e}" for k, v in checks.items())
            + f" (prefill/steps; float32 tolerance {CHECK_REL_TOL:g}, bf16 {r['bound_bf16']:.2g}; later chunks: "
            f"{list(checks.values())[-1]['prefill_attention']}): " + ("passed" if r["passed"] else "FAILED"))


def self_test() -> bool:
    """The chunked-prefill check on each architecture's tiny preset, float32 and bf16 on the CPU."""
    import tempfile

    make = _make_checkpoint_module()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for preset in SELF_TEST_PRESETS:
            checkpoint = make.make_checkpoint(pathlib.Path(tmp) / preset, preset=preset, log=lambda *_: None)
            r = check_chunked_against_transformers(checkpoint, "cpu", context=100, chunk=32)
            ok &= r["passed"]
            print(f"self-test {preset:17} {summary(r)}", flush=True)
    print("self-test " + ("Passed" if ok else "FAILED"))
    return ok


# --------------------------------------------------------------------------- timing


def memory_needed(model: Transformer, batch: int, context: int, chunk: int, cache_len: int) -> dict[str, int]:
    """Bytes a point allocates beside the weights: the KV cache, and the widest chunk's activations."""
    a = model.args
    kv = a.layers * 2 * batch * a.kv_heads * cache_len * a.head_dim * 2
    tokens = batch * min(chunk, context)
    width = 4 * a.hidden_size + 2 * a.intermediate_size + (a.heads + 2 * a.kv_heads) * a.head_dim
    # x3: a layer's inputs, outputs and temporaries live together; plus 1 GiB for the graph pool and allocator slack.
    return {"kv_cache": kv, "working": 3 * tokens * width * 2 + batch * a.vocab_size * 4 + (1 << 30)}


def sdpa_backend(d: LongContextDecoder) -> str:
    """The backend SDPA picks for the decode step's attention call (what the compiled step lowers to)."""
    try:
        from torch.nn.attention import SDPBackend

        a, k = d.model.args, d.caches[0][0]
        group = a.heads // a.kv_heads
        q = k.new_empty((d.batch, a.heads, 1, a.head_dim) if d.attention == "sdpa-gqa" else
                        (d.batch, a.kv_heads, group, a.head_dim))
        mask = (d.key_positions[None, :] <= d.pos[:, None])[None, None]
        choice = torch._fused_sdp_choice(q, k, k, mask, enable_gqa=d.attention == "sdpa-gqa" and group > 1)
        return next((n for n, b in SDPBackend.__members__.items() if int(b.value) == choice), str(choice))
    except Exception as error:  # private API: a record, never a reason to fail
        return f"unknown ({type(error).__name__})"


def free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _skip_reason(error: Exception) -> tuple[str, bool]:
    """(why a row has no time, whether that is a failure): running out of GPU memory is a result, not one."""
    text = str(error).splitlines()[0] if str(error) else ""
    if isinstance(error, torch.OutOfMemoryError) or any(s in text for s in ("out of memory", "ALLOC_FAILED")):
        return f"out of GPU memory: {text}", False
    traceback.print_exc()
    return f"failed: {type(error).__name__}: {text}", True


def time_point(model: Transformer, batch: int, context: int, attention: list[str], args: argparse.Namespace,
               label: str) -> list[dict[str, Any]]:
    """The rows of one (batch, context), a row per attention variant: prefill once, then per variant
    compile, capture and time. A row that cannot be timed has `skipped` (and `failed` if not for memory)."""
    cuda = args.device.startswith("cuda")
    rows = [{"model": label, "batch": batch, "context": context, "us_per_step": None,
             "driver": driver_name(a, args.compile_mode != "none", cuda)} for a in attention]
    cache_len = -(-(context + args.new_tokens) // CACHE_ALIGN) * CACHE_ALIGN
    need = memory_needed(model, batch, context, args.chunk, cache_len)
    if cuda:
        free, _ = torch.cuda.mem_get_info()
        free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()  # the allocator's cached blocks
        if need["kv_cache"] + need["working"] > free:
            reason = (f"needs {need['kv_cache'] / 2**30:.1f} GiB of KV cache + {need['working'] / 2**30:.1f} GiB "
                      f"working memory; {free / 2**30:.1f} GiB free beside the weights")
            print(f"b{batch} context {context}: skipped: {reason}", flush=True)
            return [{**r, "skipped": reason} for r in rows]
    seed = args.seed + context  # as the Baton sample seeds its prompts: one draw per context
    print(f"b{batch} context {context}: prompts seeded {seed}, cache {cache_len} positions "
          f"({need['kv_cache'] / 2**30:.2f} GiB)", flush=True)
    d = None
    try:
        d = LongContextDecoder(model, batch, context, args.new_tokens, attention[0])
        prompts = torch.randint(0, model.args.vocab_size, (batch, context),
                                generator=torch.Generator().manual_seed(seed)).to(args.device)
        start = time.perf_counter()
        d.prefill(prompts, args.chunk)
        if cuda:
            torch.cuda.synchronize()
        prefill_ms = round((time.perf_counter() - start) * 1e3, 1)
        del prompts
    except Exception as error:  # noqa: BLE001 - a row says why; the other points still run
        reason, failed = _skip_reason(error)
        rows = [{**r, "skipped": reason, **({"failed": True} if failed else {})} for r in rows]
        d = None
    for variant, row in zip(attention if d is not None else [], rows):
        try:
            time_variant(d, variant, row, args)
            row.update(prefill_ms=prefill_ms, cache_positions=cache_len, kv_cache_bytes=need["kv_cache"])
            print(f"  {variant}: {row['us_per_step']:.1f} us/step (runs {row['runs_us']}), prefill {prefill_ms:.0f} "
                  f"ms, compile + capture {row['compile_capture_s']} s, SDPA {row['sdpa_backend_decode']}", flush=True)
        except Exception as error:  # noqa: BLE001
            reason, failed = _skip_reason(error)
            row.update(us_per_step=None, skipped=reason, **({"failed": True} if failed else {}))
            print(f"  {variant}: skipped: {reason}", flush=True)
        finally:
            d.step_fn, d.graph = d._step, None  # the next variant compiles and captures its own
            if cuda:
                torch._dynamo.reset()  # every variant and point compiles its own static shapes
            free_device_memory()
    d = None
    free_device_memory()
    return rows


def time_variant(d: LongContextDecoder, variant: str, row: dict[str, Any], args: argparse.Namespace) -> None:
    """Compile and capture the step for one attention variant over the prefilled cache, then time it."""
    d.attention = variant
    d.run_steps(args.new_tokens)  # eager: its tokens are compared with the graph's below
    eager = d.generated[:, 1:].tolist()
    start = time.perf_counter()
    if args.compile_mode != "none":
        d.compile(args.compile_mode)
    if args.device.startswith("cuda"):
        d.capture()
    else:
        with torch.inference_mode():
            d.reset()
            d.step_fn()  # torch.compile is lazy: compile here, not in the warm-up run
    row["compile_capture_s"] = round(time.perf_counter() - start, 1)
    d.run_steps(args.new_tokens)  # the warm-up run
    runs = [statistics.median(d.run_steps(args.new_tokens)) for _ in range(args.repeats)]
    us = statistics.median(runs)
    row.update(us_per_step=round(us, 2), tokens_per_s=round(d.batch * 1e6 / us, 1),
               runs_us=[round(r, 2) for r in runs], steps_per_run=args.new_tokens,
               sdpa_backend_decode=sdpa_backend(d), prefill_attention=d.prefill_attention)
    # A record, not a gate (that is graph_matches_eager, float32): bf16 greedy tokens of a random model flip
    # at near-ties. The first step where a sequence's tokens differ, of steps_per_run.
    got = d.generated[:, 1:].tolist()
    row["compiled_vs_eager_bf16_first_difference"] = min(
        next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), len(p)) for p, q in zip(got, eager))


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a local Hugging Face checkpoint directory (Baton's --checkpoint)")
    parser.add_argument("--model", help="the rows' model label (default: the checkpoint directory's name, as Baton)")
    parser.add_argument("--contexts", default="1024,8192,32768,131072", help="prompt tokens per sequence")
    parser.add_argument("--batches", default="1,8", help="sequences decoding together")
    parser.add_argument("--new-tokens", "--new_tokens", dest="new_tokens", type=int, default=64, help="steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per point after one warm-up (median)")
    parser.add_argument("--chunk", type=int, default=4096, help="prefill chunk (tokens per sequence per forward)")
    parser.add_argument("--attention", default="sdpa-gqa", help=f"comma-separated subset of {', '.join(ATTENTION)}")
    parser.add_argument("--seed", type=int, default=1, help="prompts: seed + context (default: %(default)s)")
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test)")
    parser.add_argument("--compile-mode", help='torch.compile mode: "default" (CUDA\'s default), '
                        '"max-autotune-no-cudagraphs", or "none" (eager; the CPU\'s default)')
    parser.add_argument("--no-coordinate-descent", action="store_true", help="inductor's tuning off (gpt-fast's: on)")
    parser.add_argument("--skip-checks", action="store_true", help="time without the checks against transformers")
    parser.add_argument("--work", default="/tmp/baton-peers", help="where the tiny check checkpoint goes (reused)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--self-test", action="store_true", help="the tiny presets against transformers (CPU); exit")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: the GPU machine has no internet
    return exit_status(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    contexts, batches = parse_list(args.contexts, "contexts"), parse_list(args.batches, "batches")
    attention = [a for a in args.attention.split(",") if a.strip()]
    if not attention or any(a not in ATTENTION for a in attention):
        raise PeerError(f"--attention {args.attention!r}: a comma-separated subset of {', '.join(ATTENTION)}")
    for name in ("new_tokens", "repeats", "chunk"):
        if getattr(args, name) < 1:
            raise PeerError(f"--{name.replace('_', '-')} must be at least 1")
    if MISSING is not None:
        raise PeerError(f"{MISSING}: this needs torch, transformers and safetensors")
    if args.self_test:
        return 0 if self_test() else 1
    if not args.checkpoint:
        raise PeerError("--checkpoint DIR is required")
    checkpoint = pathlib.Path(args.checkpoint)
    if not checkpoint.is_dir():
        raise PeerError(f"--checkpoint {checkpoint}: no such directory")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise PeerError("--device cuda, but torch sees no CUDA device (use --device cpu for a smoke test)")
    if args.compile_mode is None:
        args.compile_mode = "default" if cuda else "none"
    label = args.model or checkpoint.name
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config
    if not args.no_coordinate_descent:
        inductor_config.coordinate_descent_tuning = True  # as gpt-fast and pytorch_peers.py set it
    for name in ("recompile_limit", "cache_size_limit"):  # a compile per point: never fall back to eager unnoticed
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 64)

    checks: dict[str, Any] = {}
    if not args.skip_checks:
        # Refuse to time a decoder that disagrees with transformers on this checkpoint, chunked prefill included.
        check = check_chunked_against_transformers(checkpoint, args.device, attention=tuple(attention))
        checks["benchmark_checkpoint_vs_transformers"] = check
        print(f"{label} vs transformers, {CHECK_CONTEXT} tokens by {CHECK_CHUNK}, {CHECK_STEPS} steps: "
              f"{summary(check)}", flush=True)
        if not check["passed"]:
            raise PeerError("the decoder disagrees with transformers on the benchmark checkpoint; not timing it")
        if args.compile_mode != "none":
            tiny = _make_checkpoint_module().make_checkpoint(pathlib.Path(args.work) / "peers-selftest-tiny-llama3",
                                                             preset="tiny-llama3", reuse=True, log=lambda *_: None)
            for variant in attention:
                ok = graph_matches_eager(tiny, args.device, args.compile_mode, variant)
                checks[f"compiled_vs_eager_float32 {variant}"] = ok
                if not ok:
                    raise PeerError(f"the compiled step ({variant}) disagrees with the eager step; not timing it")
            if cuda:
                torch._dynamo.reset()
        free_device_memory()

    model = load_transformer(checkpoint, torch.bfloat16, args.device).requires_grad_(False)
    rows: list[dict[str, Any]] = []
    report = {
        "sample": "long_context_peers",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(torch.device(args.device)) if cuda else "CPU",
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
        "checkpoint": str(checkpoint),
        "params": {"model": label, "contexts": contexts, "batches": batches, "new_tokens": args.new_tokens,
                   "repeats": args.repeats, "chunk": args.chunk, "seed": f"{args.seed} + context",
                   "attention": attention, "dtype": "bfloat16", "checkpoint_dtype": model.args.dtype,
                   "weight_bytes": sum(  # a tied head once
                       {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}.values()),
                   "compile_mode": args.compile_mode, "cuda_graph": cuda,
                   "coordinate_descent_tuning": not args.no_coordinate_descent, "smoke_test": not cuda,
                   "cache_positions": f"context + new_tokens rounded up to {CACHE_ALIGN}; every step attends over "
                                      "all of it under a boolean mask (key position <= the step's)",
                   "timing": ("CUDA events around each replay of the captured step" if cuda else "host clock "
                              "around each step (CPU smoke test)") + "; median step of a run, median of the runs"},
        "checks": checks, "complete": False, "rows": rows,
    }
    for batch in batches:
        for context in contexts:
            rows += time_point(model, batch, context, attention, args, label)
            report["complete"] = (batch, context) == (batches[-1], contexts[-1])
            if args.json:  # after every point: a run cut off by a time limit keeps what it measured
                pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print_table(rows)
    print(f"wrote {args.json}" if args.json else "(no --json: nothing written)")
    return 1 if any(r.get("failed") for r in rows) else 0  # running out of memory is a row, not a failure


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'batch':>5} {'context':>8} {'us/step':>10} {'tokens/s':>10}  driver")
    for r in rows:
        us, tps = ("skipped", "") if r.get("skipped") else (f"{r['us_per_step']:.1f}", f"{r['tokens_per_s']:,.0f}")
        print(f"{r['batch']:>5} {r['context']:>8} {us:>10} {tps:>10}  {r['driver']}" + (
            f": {r['skipped']}" if r.get("skipped") else ""))


if __name__ == "__main__":
    sys.exit(main())
