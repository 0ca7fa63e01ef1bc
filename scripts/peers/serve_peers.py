#!/usr/bin/env python3
"""PyTorch peers for Baton's serving benchmark (python -m baton bench): the same trace, the same metrics.

Run on the GPU machine in the same call as `python -m baton bench`, on the same checkpoint, with the same
--requests/--rates/--lengths/--trace-seed: baton.bench.make_trace draws the identical requests (arrival times,
prompt token ids, output lengths) and baton.bench.summarize computes the rows. Both peers serve static
batches: when the GPU is free, the requests that have arrived (up to --max-batch, first come first served)
form a batch that runs until its longest output is done; requests arriving meanwhile wait for the next batch.
A request's first token is seen when its batch's prefill ends, its last when the step producing it ends (the
host syncs every step, as a server streaming tokens must), so a short request in a long batch is not charged
for the rest.

1. gpt-fast-static: the peers' gpt-fast-style decoder (gpt_fast_decoder.py: SDPA with native GQA), its decode
   step torch.compile'd and captured in a CUDA graph for one static shape: every batch padded to --max-batch
   rows and the trace's longest prompt (prompts left-padded with token 0, with no mask, as gpt-fast serves
   one length: the padded rows' tokens are wrong, their cost is what a padded static batch pays), prefill
   eager. The strongest loop a careful PyTorch user writes without a serving framework.
2. transformers-generate: AutoModelForCausalLM (sdpa, bf16) model.generate per batch, left-padded with an
   attention mask, greedy, max_new_tokens = the batch's longest output.

    scripts/peers/serve_peers.py --checkpoint /tmp/ck/l1b --requests 100 --rates 8,32,inf --json $OUT/p.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import sys
import time
from typing import Any, Callable, List, Sequence

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from baton import bench  # noqa: E402  (the installed package: the same trace and summary)
import gpt_fast_decoder as gf  # noqa: E402

RunBatch = Callable[[List[bench.TraceRequest]], List[List[float]]]  # per request: its tokens' times


def serve_static(trace: Sequence[bench.TraceRequest], max_batch: int, run_batch: RunBatch,
                 label: str) -> List[bench.Timing]:
    timings = [bench.Timing(0.0) for _ in trace]
    progress = bench.Progress(len(trace), label)
    start = time.perf_counter()
    for i, item in enumerate(trace):
        timings[i].arrival_s = start + item.arrival_s
    nxt = done = 0
    while done < len(trace):
        now = time.perf_counter()
        if timings[nxt].arrival_s > now:
            time.sleep(timings[nxt].arrival_s - now)
            continue
        batch = [i for i in range(nxt, len(trace)) if timings[i].arrival_s <= now][:max_batch]
        nxt = batch[-1] + 1
        for i, times in zip(batch, run_batch([trace[i] for i in batch])):
            timings[i].first_s, timings[i].end_s, timings[i].tokens = times[0], times[-1], len(times)
        done += len(batch)
        progress.update(done)
    return timings


def gpt_fast_runner(checkpoint: pathlib.Path, max_batch: int, prompt_tokens: int, new_tokens: int) -> RunBatch:
    model = gf.load_transformer(checkpoint, torch.bfloat16, "cuda")
    decoder = gf.Decoder(model, max_batch, prompt_tokens, new_tokens, stop_token=-1)
    decoder.compile("default")
    decoder.capture()
    pinned = torch.zeros(max_batch, prompt_tokens, dtype=torch.long).pin_memory()

    def run(batch: List[bench.TraceRequest]) -> List[List[float]]:
        pinned.zero_()
        for row, item in enumerate(batch):
            pinned[row, prompt_tokens - len(item.prompt):] = torch.tensor(item.prompt)
        decoder.prefill(pinned.to("cuda", non_blocking=True))
        decoder.generated[:, 0].tolist()  # the first tokens on the host
        times = [time.perf_counter()]
        for _ in range(max(item.output_tokens for item in batch) - 1):
            decoder.replay()
            decoder.tokens[:, 0].tolist()  # each step's tokens reach the host, as a server streams them
            times.append(time.perf_counter())
        return [times[:item.output_tokens] for item in batch]

    return run


class _StepClock:
    """A logits processor that stamps each generate() step once its logits exist (the step has run)."""

    def __init__(self) -> None:
        self.times: List[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        return scores


def transformers_runner(checkpoint: pathlib.Path) -> RunBatch:
    from transformers import AutoModelForCausalLM, LogitsProcessorList

    model = AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").to("cuda").eval()

    @torch.inference_mode()
    def run(batch: List[bench.TraceRequest]) -> List[List[float]]:
        width = max(len(item.prompt) for item in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for row, item in enumerate(batch):
            ids[row, width - len(item.prompt):] = torch.tensor(item.prompt)
            mask[row, width - len(item.prompt):] = 1
        longest = max(item.output_tokens for item in batch)
        clock = _StepClock()
        model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), do_sample=False, max_new_tokens=longest,
                       min_new_tokens=longest, pad_token_id=0, logits_processor=LogitsProcessorList([clock]))
        return [clock.times[:item.output_tokens] for item in batch]

    return run


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--drivers", default="gpt-fast-static,transformers-generate")
    bench.add_arguments(parser)
    args = parser.parse_args(argv)
    config = json.loads((args.checkpoint / "config.json").read_text())
    vocab = config["vocab_size"]
    rates = bench.rates_of(args.rates)
    traces = {rate: bench.make_trace(args.requests, rate, args.lengths, vocab, args.trace_seed) for rate in rates}
    longest_prompt = max(len(r.prompt) for t in traces.values() for r in t)
    longest_output = max(r.output_tokens for t in traces.values() for r in t)
    rows: List[dict[str, Any]] = []
    for driver in args.drivers.split(","):
        if driver == "gpt-fast-static":
            run = gpt_fast_runner(args.checkpoint, args.max_batch, longest_prompt, longest_output)
        elif driver == "transformers-generate":
            run = transformers_runner(args.checkpoint)
        else:
            parser.error(f"--drivers: {driver!r} is not gpt-fast-static or transformers-generate")
        warm = bench.make_trace(min(args.warmup, args.max_batch), math.inf, args.lengths, vocab, args.trace_seed + 1)
        serve_static(warm, args.max_batch, run, f"{driver} warm-up")
        for rate in rates:
            timings = serve_static(traces[rate], args.max_batch, run, f"{driver} rate {rate:g}")
            rows.append(bench.summarize(driver, rate, timings))
        torch.cuda.empty_cache()
    bench.print_rows(rows)
    if args.json:
        report = {"checkpoint": str(args.checkpoint), "lengths": args.lengths, "trace_seed": args.trace_seed,
                  "max_batch": args.max_batch, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "rows": rows}
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
