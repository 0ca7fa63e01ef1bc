#!/usr/bin/env python3
"""PyTorch peers for Baton's decode benchmark: what a PyTorch user gets on the same GPU.

Run on the GPU machine in the same call as Baton's decode_loop, on the same
checkpoint (a local Hugging Face directory; no internet needed) and prompts,
so that the numbers sit side by side. Three peers, each bf16, greedy, warmed up
before timing, medians over --repeats, torch.backends defaults:

1. transformers-generate: model.generate(..., do_sample=False,
   min_new_tokens=max_new_tokens) in eager mode, what most users run. Its time
   per step comes from the decode part only: a run of N new tokens minus a run
   of 1 new token (prefill + first token), divided by N - 1.
2. gpt-fast-compiled+sync: a gpt-fast-style decoder in plain PyTorch (this
   file's Transformer: fused QKV and gate/up projections, GQA, RoPE with the
   llama3/linear scalings and HF's rotate_half layout, Qwen2's QKV bias, a
   static KV cache of max_seq_len, F.scaled_dot_product_attention); its
   one-token decode step torch.compile'd and captured in a CUDA graph, replayed
   once per step with a host decision every step (.item() of an "all sequences
   finished" flag computed in the step), like a real serving loop.
3. gpt-fast-compiled-nosync: the same graph replayed back to back with no
   per-step synchronization: PyTorch's lower bound for this step.
4. gpt-fast-gqa-compiled+sync and -nosync: the same two with SDPA's native
   GQA (enable_gqa=True) in the decode step instead of repeat_interleave'd
   K/V, as a careful PyTorch user writes it. --compile-mode picks inductor's
   mode for every compiled peer (e.g. max-autotune-no-cudagraphs; the rows
   then carry it in their driver name).

    scripts/peers/pytorch_peers.py --self-test
    scripts/peers/pytorch_peers.py --checkpoint /tmp/parity/llama-3.2-1b --batches 1,8,32 \\
        --json results/h100-<date>-pytorch-peers.json
    scripts/peers/pytorch_peers.py --preset llama-3.2-1b --work /tmp/peers --prompts-from /tmp/parity/x.baton.json

Before timing, the decoder is checked against transformers (float32, eager,
on the CPU, tiny presets of each architecture) and then on the benchmark
checkpoint itself (float32 on the device); the script refuses to time a
decoder that disagrees.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time
from typing import Any

import torch

from decoder_checks import (CHECK_REL_TOL, SELF_TEST_PRESETS, _make_checkpoint_module, check_against_transformers,
                            compiled_matches_eager, self_test)
from gpt_fast_decoder import Decoder, ModelArgs, PeerError, Transformer, load_transformer
from peer_args import exit_status

PEERS = ("transformers-generate", "gpt-fast-compiled+sync", "gpt-fast-compiled-nosync",
         "gpt-fast-gqa-compiled+sync", "gpt-fast-gqa-compiled-nosync")


def driver_name(peer: str, compile_mode: str) -> str:
    """A row's driver: the peer, with a compile mode other than inductor's default in brackets."""
    return peer if compile_mode == "default" else peer.replace("-compiled", f"-compiled[{compile_mode}]")


# --------------------------------------------------------------------------- timing


def load_prompts(path: str | None, batch: int, prompt_tokens: int, vocab: int, seed: int) -> torch.Tensor:
    """Prompts from a Baton parity dump (its first `batch` sequences), else seeded random tokens."""
    if path:
        meta = json.loads(pathlib.Path(path).read_text())
        prompts: list[list[int]] = []
        seen: set[tuple[int, ...]] = set()
        for run in meta.get("runs", []):
            for seq in run.get("sequences", []):
                p = tuple(seq["prompt"][:prompt_tokens])
                if len(p) == prompt_tokens and p not in seen:
                    seen.add(p)
                    prompts.append(list(p))
        if not prompts:
            raise PeerError(f"--prompts-from {path}: no prompt of {prompt_tokens} tokens")
        while len(prompts) < batch:  # Baton's larger batches reuse entries the same way
            prompts += prompts[:batch - len(prompts)]
        return torch.tensor(prompts[:batch], dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, prompt_tokens), generator=generator)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_transformers_generate(checkpoint: pathlib.Path, prompts: torch.Tensor, new_tokens: int, repeats: int,
                               device: str) -> tuple[float, list[int]]:
    """µs per decode step of model.generate: (T(N new) - T(1 new)) / (N - 1), medians of each."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16).to(device).eval()
    ids = prompts.to(device)

    def generate(n: int) -> torch.Tensor:
        with torch.inference_mode():
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, pad_token_id=0)

    def timed(n: int) -> float:
        _sync(device)
        start = time.perf_counter()
        generate(n)
        _sync(device)
        return time.perf_counter() - start

    out = generate(new_tokens)  # warm-up (allocator, cuBLAS handles, kernels)
    generate(1)
    full, first = [], []
    for _ in range(repeats):  # interleaved, so that drift of the machine hits both alike
        full.append(timed(new_tokens))
        first.append(timed(1))
    us = (statistics.median(full) - statistics.median(first)) / (new_tokens - 1) * 1e6
    if us <= 0:
        raise PeerError(f"transformers-generate: {new_tokens} new tokens took no longer than 1 "
                        f"({statistics.median(full):.4f} s vs {statistics.median(first):.4f} s): timing noise; "
                        "raise --repeats or --new-tokens")
    return us, out[0, prompts.shape[1]:].tolist()


def time_gpt_fast(model: Transformer, prompts: torch.Tensor, new_tokens: int, repeats: int, compile_mode: str,
                  stop_token: int, device: str, use_graph: bool) -> tuple[dict[str, float], list[list[int]]]:
    """µs per step of the compiled, graph-captured step, with (key "+sync") and without ("-nosync") a per-step
    host decision."""
    batch, prompt_tokens = prompts.shape
    decoder = Decoder(model, batch, prompt_tokens, new_tokens, stop_token)
    if compile_mode != "none":
        decoder.compile(compile_mode)
    if use_graph:
        decoder.capture()
    ids = prompts.to(device)
    steps = new_tokens - 1  # the first token comes from prefill
    results: dict[str, list[float]] = {"+sync": [], "-nosync": []}
    tokens: list[list[int]] = []
    for repeat in range(repeats + 1):  # the first round is a warm-up
        for driver, run in (("+sync", decoder.run_sync), ("-nosync", decoder.run_nosync)):
            decoder.prefill(ids)
            _sync(device)
            start = time.perf_counter()
            ran = run(steps)
            _sync(device)
            elapsed = time.perf_counter() - start
            if repeat:
                results[driver].append(elapsed / ran * 1e6)
            tokens = decoder.generated.tolist()
    return {k: statistics.median(v) for k, v in results.items()}, tokens


@torch.inference_mode()
def eager_greedy(model: Transformer, prompts: torch.Tensor, new_tokens: int) -> list[list[int]]:
    """The same greedy decode with the uncompiled step, for comparing the graph's tokens."""
    decoder = Decoder(model, prompts.shape[0], prompts.shape[1], new_tokens, stop_token=-1)
    decoder.prefill(prompts)
    decoder.run_nosync(new_tokens - 1)
    return decoder.generated.tolist()


def first_differences(a: list[list[int]], b: list[list[int]]) -> dict[str, Any]:
    """Per sequence, the first generated index where two decodes differ (the length if never)."""
    firsts = [next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), len(p)) for p, q in zip(a, b)]
    return {"sequences": len(firsts), "identical": sum(f == len(a[0]) for f in firsts),
            "min_first_difference": min(firsts), "median_first_difference": statistics.median(firsts),
            "of": len(a[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a local Hugging Face checkpoint directory (Baton's --checkpoint)")
    parser.add_argument("--preset", help="make this preset's checkpoint in --work instead (make_checkpoint.py)")
    parser.add_argument("--work", default="/tmp/baton-peers", help="where --preset checkpoints go (reused)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per peer and batch (median)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {', '.join(PEERS)}")
    parser.add_argument("--compile-mode", default="default",
                        help='torch.compile mode: "default", "max-autotune-no-cudagraphs" (minutes of autotuning '
                             'per batch), or "none" (eager step, for testing)')
    parser.add_argument("--no-coordinate-descent", action="store_true",
                        help="leave inductor's coordinate_descent_tuning off (gpt-fast turns it on)")
    parser.add_argument("--stop-token", type=int, default=-1,
                        help="token that finishes a sequence; -1 (never) keeps every run at --new-tokens steps, "
                             "as min_new_tokens does for generate")
    parser.add_argument("--prompts-from", help="a Baton parity dump JSON whose prompts to use")
    parser.add_argument("--seed", type=int, default=0, help="seed of random prompts (without --prompts-from)")
    parser.add_argument("--device", default=None, help="default: cuda if available (CPU runs skip CUDA graphs)")
    parser.add_argument("--model-name", help="the rows' model label (default: the checkpoint's directory name)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--self-test", action="store_true",
                        help="check the decoder against transformers (float32, CPU, tiny presets) and exit")
    parser.add_argument("--self-test-compile", action="store_true",
                        help="with --self-test: also check torch.compile of the step on the CPU (slow)")
    args = parser.parse_args(argv)
    # Local directories only: the GPU machine has no internet, and a hub lookup would only time out.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return exit_status(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    if args.self_test:
        return 0 if self_test(pathlib.Path(args.work), args.self_test_compile) else 1
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise PeerError(f"unknown peer(s) {unknown}; known: {', '.join(PEERS)}")
    if args.new_tokens < 2:
        raise PeerError("--new-tokens must be at least 2 (the step time is a difference of runs)")
    if (args.checkpoint is None) == (args.preset is None):
        raise PeerError("give exactly one of --checkpoint DIR or --preset NAME")
    if args.checkpoint:
        checkpoint = pathlib.Path(args.checkpoint)
    else:
        make = _make_checkpoint_module()
        checkpoint = make.make_checkpoint(pathlib.Path(args.work) / args.preset, preset=args.preset, reuse=True,
                                          device="cuda" if device.startswith("cuda") else "cpu")
    model_name = args.model_name or checkpoint.name

    # Refuse to time a decoder that disagrees with transformers: first the tiny
    # presets of each architecture on the CPU, then the benchmark checkpoint itself.
    if not self_test(pathlib.Path(args.work), compile_cpu=False):
        raise PeerError("the decoder disagrees with transformers on the tiny presets; not timing it")
    check = check_against_transformers(checkpoint, device, batch=2, prompt_tokens=args.prompt_tokens, steps=4)
    print(f"{model_name}: decoder vs transformers (float32, {device}): max rel logit error "
          f"{check['max_rel_logit_error']:.2e}, greedy tokens equal: {check['greedy_tokens_equal']}")
    if not check["passed"]:
        raise PeerError(f"the decoder disagrees with transformers on {checkpoint} "
                        f"({check['max_rel_logit_error']:.2e} > {CHECK_REL_TOL:g}); not timing it")
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    if not args.no_coordinate_descent:
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = True  # as gpt-fast sets it
    use_graph = device.startswith("cuda")
    model = None
    if any(p.startswith("gpt-fast") for p in peers):
        if use_graph:
            # The compiled, captured step must give the eager step's tokens. Checked
            # in float32 on the tiny Llama (fast to compile), where a bf16 near-tie
            # cannot make a correct graph look wrong.
            tiny = pathlib.Path(args.work) / f"peers-selftest-{SELF_TEST_PRESETS[0]}"
            for native in sorted({p.startswith("gpt-fast-gqa") for p in peers if p.startswith("gpt-fast")}):
                if not compiled_matches_eager(tiny, device, torch.float32, mode=args.compile_mode, graph=True,
                                              native_gqa=native):
                    raise PeerError("the compiled CUDA-graph step disagrees with the eager step in float32"
                                    f"{' (native GQA)' if native else ''}; not timing it")
                torch._dynamo.reset()
        model = load_transformer(checkpoint, torch.bfloat16, device)
    rows: list[dict[str, Any]] = []
    agreement: dict[str, Any] = {}
    graph_vs_eager: dict[str, Any] = {}
    for batch in [int(b) for b in args.batches.split(",") if b]:
        prompts = load_prompts(args.prompts_from, batch, args.prompt_tokens,
                               ModelArgs.from_checkpoint(checkpoint).vocab_size, args.seed)
        tokens: dict[str, list[int]] = {}
        if "transformers-generate" in peers:
            us, tokens["transformers-generate"] = time_transformers_generate(
                checkpoint, prompts, args.new_tokens, args.repeats, device)
            rows.append(_row(model_name, batch, "transformers-generate", us))
        for native in (False, True):  # repeat_interleave'd K/V, then SDPA's native GQA
            prefix = "gpt-fast-gqa-compiled" if native else "gpt-fast-compiled"
            wanted = [p for p in peers if p.startswith(prefix)]
            if not wanted:
                continue
            assert model is not None
            model.native_gqa = native
            start = time.perf_counter()
            times, graph_tokens = time_gpt_fast(model, prompts, args.new_tokens, args.repeats,
                                                args.compile_mode, args.stop_token, device, use_graph)
            print(f"batch {batch}: {prefix} peers compiled, captured and timed in "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
            rows += [_row(model_name, batch, driver_name(p, args.compile_mode), times[p[len(prefix):]])
                     for p in wanted]
            tokens.setdefault("gpt-fast", graph_tokens[0])
            if device.startswith("cuda"):
                torch._dynamo.reset()  # the next batch (or variant) compiles its own static shapes
            eager_tokens = eager_greedy(model, prompts.to(device), args.new_tokens)
            graph_vs_eager[f"{batch}{' native GQA' if native else ''}"] = first_differences(graph_tokens,
                                                                                           eager_tokens)
        if len(tokens) == 2:
            a, b = tokens.values()
            same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
            agreement[str(batch)] = {"first_differing_token": same, "of": len(a)}
        _print_rows([r for r in rows if r["batch"] == batch])
    report = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "CPU",
        "torch": torch.__version__,
        "transformers": _transformers_version(),
        "date": datetime.date.today().isoformat(),
        "checkpoint": str(checkpoint),
        "settings": {"prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "repeats": args.repeats,
                     "compile_mode": args.compile_mode, "cuda_graph": use_graph, "dtype": "bfloat16",
                     "coordinate_descent_tuning": not args.no_coordinate_descent, "stop_token": args.stop_token,
                     "prompts": args.prompts_from or f"random, seed {args.seed}",
                     "transformers-generate us_per_step": "(T(new_tokens) - T(1)) / (new_tokens - 1), medians",
                     "gpt-fast us_per_step": "timed decode steps after prefill / steps, median of repeats"},
        "checks": {"benchmark_checkpoint_vs_transformers_float32": check,
                   # bf16 greedy tokens of a random model flip at near-ties (a few % of steps),
                   # so these agree for a while, not to the end: information, not a gate.
                   "sequence_0_greedy_agreement_transformers_vs_gpt_fast": agreement,
                   "bf16_graph_vs_eager_step_tokens": graph_vs_eager},
        "rows": rows,
    }
    print("all rows:")
    _print_rows(rows)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _row(model: str, batch: int, driver: str, us: float) -> dict[str, Any]:
    return {"model": model, "batch": batch, "driver": driver, "us_per_step": round(us, 2),
            "tokens_per_s": round(batch * 1e6 / us, 1)}


def _print_rows(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(f"  {r['model']:20} b{r['batch']:<3} {r['driver']:26} {r['us_per_step']:10.1f} us/step "
              f"{r['tokens_per_s']:12,.0f} tokens/s")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


if __name__ == "__main__":
    sys.exit(main())
