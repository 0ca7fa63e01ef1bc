"""The command line: `python -m baton generate` streams a completion to the terminal; `python -m baton serve`
runs the OpenAI-compatible HTTP server (baton.serving); `python -m baton bench` runs the serving benchmark
(baton.bench), in process or against a server's URL.

    python -m baton generate --model DIR --prompt "The capital of France is" --max-tokens 32
    python -m baton generate --model DIR --chat --prompt "Write a haiku about GPUs" --temperature 0.7 --seed 1
    python -m baton serve --model DIR --port 8000
    python -m baton bench --model DIR --rates 4,16,inf --requests 200 --json results.json
    python -m baton bench --url http://127.0.0.1:8000/v1 --model DIR --rates 4,16
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional

from baton import errors


def _engine_args(parser: argparse.ArgumentParser) -> None:
    # Options left out take the library's defaults (baton.llm.defaults(), the C++ ServerOptions{}).
    parser.add_argument("--model", required=True, help="a Hugging Face model directory")
    parser.add_argument("--engine", choices=["conditional", "tail-launch", "dynamic-parallelism"],
                        help="the device loop's engine")
    parser.add_argument("--max-batch", type=int, help="sequences decoded together")
    parser.add_argument("--max-context", type=int, help="tokens per sequence (0: what fits)")
    parser.add_argument("--max-tokens-per-step", type=int, help="rows one step holds")
    parser.add_argument("--max-tokens-without-decodes", type=int,
                        help="rows a step holds when no sequence decodes")
    parser.add_argument("--max-chunk-tokens", type=int, help="most prompt tokens one sequence reads per step")
    parser.add_argument("--gemm", choices=["auto", "gemv", "cublaslt"], help="the projections' kernels")
    parser.add_argument("--tensor-parallel-size", type=int,
                        help="GPUs to split the model across (GPUs 0..n-1, one rank each)")


def _llm(args: argparse.Namespace, **extra):
    from baton.llm import LLM

    if getattr(args, "url", None):
        raise errors.InvalidArgumentError("--url benchmarks a running server; it loads no model here")

    return LLM(args.model, engine=args.engine, max_batch=args.max_batch, max_context=args.max_context,
               max_tokens_per_step=args.max_tokens_per_step,
               max_tokens_without_decodes=args.max_tokens_without_decodes, max_chunk_tokens=args.max_chunk_tokens,
               gemm=args.gemm, tensor_parallel_size=getattr(args, "tensor_parallel_size", None), **extra)


def generate(args: argparse.Namespace) -> int:
    from baton.sampling import SamplingParams

    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                              top_k=args.top_k, seed=args.seed, stop=args.stop or None)
    with _llm(args, load_progress=True) as llm:
        start = time.perf_counter()
        first = None
        tokens = 0
        reason = None
        for delta in llm.stream(args.prompt, sampling, chat=args.chat):
            if delta.token_ids and first is None:
                first = time.perf_counter()
            tokens += len(delta.token_ids)
            sys.stdout.write(delta.text)
            sys.stdout.flush()
            reason = delta.finish_reason
        end = time.perf_counter()
    sys.stdout.write("\n")
    if first is not None:
        per_token = (end - first) / max(tokens - 1, 1) * 1e3
        print(f"[{tokens} tokens, {reason}; first token {(first - start) * 1e3:.1f} ms, then "
              f"{per_token:.2f} ms/token]", file=sys.stderr)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baton", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="stream one completion to the terminal")
    _engine_args(gen)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the checkpoint's chat template")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", help="a stop string (repeatable)")

    serve = commands.add_parser("serve", help="the OpenAI-compatible HTTP server (baton.serving)")
    _engine_args(serve)
    from baton.serving import run as serve_module

    serve_module.add_arguments(serve)

    bench = commands.add_parser("bench", help="the serving benchmark (baton.bench)")
    _engine_args(bench)
    from baton import bench as bench_module

    bench_module.add_arguments(bench)

    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            return generate(args)
        if args.command == "serve":
            return serve_module.serve(args, _llm)
        return bench_module.run(args, _llm)
    except (errors.BatonError, ValueError, TypeError) as e:
        print(f"baton: {e}", file=sys.stderr)
        return 2
