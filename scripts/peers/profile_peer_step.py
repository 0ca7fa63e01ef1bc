#!/usr/bin/env python3
"""Where the compiled PyTorch decode step's time goes, kernel by kernel (a diagnostic for the roofline work).

The same step pytorch_peers.py times (gpt_fast_decoder.py's Decoder: torch.compile'd, captured in a CUDA graph,
SDPA with native GQA), replayed under torch.profiler; the kernels' GPU time per step, grouped by kind
(GEMM, attention, the rest), beside Baton's ncu breakdown of its own step at the same batch and context.

    scripts/peers/profile_peer_step.py --preset llama-3.2-1b --batch 32 --prompt-tokens 512 --json out.json

The decode steps run at contexts prompt_tokens .. prompt_tokens + steps (the KV cache holds prompt + new tokens).
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "checkpoints"))

from decoder_checks import _make_checkpoint_module  # noqa: E402
from gpt_fast_decoder import Decoder, load_transformer  # noqa: E402


def kind_of(name: str) -> str:
    """A kernel's kind from its name: what the breakdown groups by."""
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "attention", "sdpa", "cudnn")):
        return "attention"
    if any(k in n for k in ("gemm", "gemv", "nvjet", "xmma", "cutlass", "splitk", "mm_")):
        return "projection"
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="llama-3.2-1b")
    parser.add_argument("--work", default="/tmp/baton-peers")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=32, help="profiled decode steps")
    parser.add_argument("--json", help="write the breakdown here")
    args = parser.parse_args(argv)

    import torch._inductor.config as inductor_config

    inductor_config.coordinate_descent_tuning = True  # as pytorch_peers.py (gpt-fast's setting)
    make = _make_checkpoint_module()
    checkpoint = make.make_checkpoint(pathlib.Path(args.work) / args.preset, preset=args.preset, reuse=True,
                                      device="cuda")
    model = load_transformer(checkpoint, torch.bfloat16, "cuda")
    model.native_gqa = True
    new_tokens = args.steps + 8
    decoder = Decoder(model, args.batch, args.prompt_tokens, new_tokens, stop_token=-1)
    decoder.compile("default")
    decoder.capture()
    prompts = torch.randint(0, 1000, (args.batch, args.prompt_tokens), device="cuda")
    decoder.prefill(prompts)
    decoder.run_nosync(4)  # warm
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decoder.run_nosync(args.steps)
        torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            per_kernel[event.name].append(event.device_time_total)
    rows = []
    for name, times in per_kernel.items():
        rows.append({"kernel": name[:160], "kind": kind_of(name), "calls_per_step": len(times) / args.steps,
                     "us_per_step": sum(times) / args.steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    by_kind: dict[str, float] = collections.defaultdict(float)
    for r in rows:
        by_kind[r["kind"]] += r["us_per_step"]
    total = sum(by_kind.values())
    print(f"{args.preset} b{args.batch} context {args.prompt_tokens}..{args.prompt_tokens + args.steps}: "
          f"kernels {total:.1f} us/step; " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_kind.items())))
    for r in rows[:25]:
        print(f"  {r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kind']:10s}  {r['kernel'][:100]}")
    if args.json:
        out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "preset": args.preset,
               "batch": args.batch, "prompt_tokens": args.prompt_tokens, "steps": args.steps,
               "kernel_us_per_step": total, "by_kind": by_kind, "kernels": rows}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
