#!/usr/bin/env python3
"""What the Python path costs: tokens/s through baton.LLM.generate beside the C++ decode_loop sample on the
same requests (the same checkpoint, batch, prompt and output lengths, engine and options), in one call.

decode_loop times its conditional engine from Submit to the last completion polled; generate is timed whole
(writing the requests, submitting, polling, reading the tokens back), after one untimed warm-up; both report
the median of --repeats. Requests: batch x --requests-per-slot prompts of --prompt-tokens random ids, each
generating exactly --new-tokens (no stop token), greedy.

    scripts/peers/python_overhead.py --decode-loop build/bin/decode_loop --checkpoint /tmp/ck/l1b --json X.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List

import baton


def cpp_tokens_per_s(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "decode_loop.json"
        subprocess.run([str(args.decode_loop), f"--checkpoint={args.checkpoint}", f"--batches={args.batches}",
                        "--engines=host,conditional", f"--prompt_tokens={args.prompt_tokens}",
                        f"--new_tokens={args.new_tokens}", f"--requests_per_slot={args.requests_per_slot}",
                        f"--repeats={args.repeats}", f"--json={out}"], check=True, stdout=subprocess.DEVNULL)
        report = json.loads(out.read_text())
    rates = {"device": report["device"]["name"], "date": report["date"]}
    for row in report["rows"]:
        if row["driver"] == "Baton conditional":
            rates[int(row["scenario"].rsplit("b", 1)[1])] = row["tokens_per_s"]
    return rates


def python_tokens_per_s(args: argparse.Namespace, batch: int) -> float:
    context = args.prompt_tokens + args.new_tokens
    rng = random.Random(batch)
    with baton.LLM(args.checkpoint, max_batch=batch, max_context=context) as llm:
        vocab = llm.info["vocab_size"]
        sampling = baton.SamplingParams(max_tokens=args.new_tokens, ignore_eos=True)
        rates: List[float] = []
        for repeat in range(args.repeats + 1):
            prompts = [[rng.randrange(vocab) for _ in range(args.prompt_tokens)]
                       for _ in range(batch * args.requests_per_slot)]
            start = time.perf_counter()
            outputs = llm.generate(prompts, sampling)
            seconds = time.perf_counter() - start
            assert all(len(o.token_ids) == args.new_tokens for o in outputs)
            if repeat > 0:  # the first is the warm-up
                rates.append(sum(len(o.token_ids) for o in outputs) / seconds)
    return statistics.median(rates)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode-loop", type=pathlib.Path, required=True, help="the C++ sample's binary")
    parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--requests-per-slot", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    cpp = cpp_tokens_per_s(args)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        python = python_tokens_per_s(args, batch)
        rows.append({"batch": batch, "cpp_tokens_per_s": round(cpp[batch], 1),
                     "python_tokens_per_s": round(python, 1), "python_vs_cpp": round(python / cpp[batch], 4)})
    print(f"{'batch':>6} {'C++ tok/s':>12} {'Python tok/s':>13} {'Python/C++':>11}")
    for r in rows:
        print(f"{r['batch']:>6} {r['cpp_tokens_per_s']:>12.0f} {r['python_tokens_per_s']:>13.0f} "
              f"{r['python_vs_cpp']:>11.3f}")
    if args.json:
        args.json.write_text(json.dumps({"device": cpp["device"], "date": cpp["date"],
                                         "checkpoint": str(args.checkpoint), "engine": "conditional",
                                         "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                                         "requests_per_slot": args.requests_per_slot, "repeats": args.repeats,
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
