#!/usr/bin/env python3
"""Parity of Baton's decode loop with transformers, in one call on the GPU machine.

For each preset and batch: make a random checkpoint (make_checkpoint.py), run
Baton's decode_loop on it with greedy decoding and a parity dump, then run
transformers on the same checkpoint in float32 (the reference) over each of
Baton's sequences, teacher-forced, and compare:

- tokens: at every generated position, transformers' argmax vs Baton's token.
  Because transformers is fed Baton's own sequence, one divergence does not
  cascade into the rest of the sequence.
- logits: Baton's logits at each sequence's last step against the reference's,
  as max|baton - ref| / max|ref| over the vocabulary.

    scripts/checkpoints/parity.py --presets tiny-llama3,llama-3.2-1b --batches 1,8 \\
        --work /tmp/parity --out results/h100-<date>-parity.json
    scripts/checkpoints/parity.py --compare-only /tmp/parity/tiny-llama3.baton --out r.json
    scripts/checkpoints/parity.py --self-test --presets tiny-llama3 --device cpu

The dump Baton writes (decode_loop --parity_out=PREFIX) is described, read and
validated in parity_dump.py.

Random models have near-uniform logits (make_checkpoint.py says why), so the
top two logits of a position are often close and a correct bf16 implementation
can pick the second. A differing token is therefore a near-tie, not a mismatch,
when the reference's top-1 logit exceeds its logit of Baton's token by at most
tie_tol x max|reference logits at that position|. (This is the top-1 minus
top-2 gap whenever Baton picked the reference's second choice, and stricter
when it picked a lower one.)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time
from typing import Any

import numpy as np

from parity_compare import DTYPE_REFERENCE_FACTOR, LOGIT_BOUND, TIE_TOL, Bounds, Reference, compare_dump
from parity_dump import ParityError, Sequence, read_dump, write_dump

DEFAULT_BATON_FLAGS = {
    "engines": "host,tail,conditional,dp",
    "gemm": "gemv",
    "prompt_tokens": "16",
    "new_tokens": "256",
    "requests_per_slot": "1",
    "temperature": "0",
}
ROW_KEYS = ("preset", "batch", "driver", "dtype", "max_rel_logit_error", "logits_compared", "tokens_compared",
            "tokens_mismatched", "near_ties", "passed", "reference_bf16_rel_error")


def _make_checkpoint_module() -> Any:
    """make_checkpoint.py beside this file (on sys.path, like parity_dump), imported when first needed."""
    import make_checkpoint

    return make_checkpoint


# --------------------------------------------------------------------------- Baton and the self-test


def baton_command(baton: str, checkpoint: pathlib.Path, batches: list[int], prefix: pathlib.Path,
                  flags: dict[str, str]) -> list[str]:
    merged = {"checkpoint": str(checkpoint), "batches": ",".join(map(str, batches)), **flags,
              "parity_out": str(prefix)}
    return [baton] + [f"--{k}={v}" for k, v in merged.items()]


def run_baton(command: list[str], log_path: pathlib.Path) -> None:
    """Runs decode_loop, keeping its output beside the dump; a failure quotes the output's end."""
    print("$ " + shlex.join(command), flush=True)
    if not pathlib.Path(command[0]).is_file():
        raise ParityError(f"no decode_loop at {command[0]} (build it, or pass --baton PATH)")
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    log_path.write_text(result.stdout)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-30:])
        raise ParityError(f"decode_loop exited {result.returncode} (log: {log_path}):\n{tail}")
    print(f"  decode_loop finished in {time.perf_counter() - start:.1f} s (log: {log_path})", flush=True)


def fabricate_dump(checkpoint: pathlib.Path, prefix: pathlib.Path, batches: list[int], prompt_tokens: int,
                   new_tokens: int, device: str, seed: int, drivers: tuple[str, ...] = ("host", "tail")) -> None:
    """A Baton-format dump made by transformers' own greedy generation in the checkpoint's dtype.

    transformers in bf16 is a second, independent implementation with the same
    storage rounding as Baton, so the comparison should pass it; each batch is
    generated separately so that batch-dependent numerics show up as they would.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads((checkpoint / "config.json").read_text())
    torch_dtype = config.get("torch_dtype", config.get("dtype"))
    dtype = {"bfloat16": "bf16", "float16": "fp16"}.get(torch_dtype)
    if dtype is None:
        raise ParityError(f"{checkpoint}: dtype {torch_dtype!r}; Baton's dumps are bf16 or fp16")
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, torch_dtype)).to(device).eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, vocab, (max(batches), prompt_tokens), generator=generator)
    runs = []
    for batch in batches:
        ids = prompts[:batch].to(device)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                # No stop token: pure greedy for exactly new_tokens steps, as Baton's dump is.
                eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        generated = out.sequences[:, prompt_tokens:].cpu().tolist()
        last = out.logits[-1].float().cpu().numpy()
        sequences = [(b, prompts[b].tolist(), generated[b], last[b]) for b in range(batch)]
        for driver in drivers:
            runs.append((batch, driver, sequences))
    write_dump(prefix, checkpoint, dtype, vocab, runs)


def corrupt_dump(source: pathlib.Path, target: pathlib.Path, reference: Reference) -> None:
    """A copy of a dump with one clearly wrong token and one logit off by half of max|logit|."""
    dump = read_dump(source)
    meta = json.loads(dump.path.read_text())
    logits = np.array(dump.logits)
    seq = dump.runs[0].sequences[0]
    teacher = reference.teacher(seq)
    index = len(seq.generated) // 2
    # The token the reference likes least at that position: far outside any tie band.
    worst = int(np.argmin(_full_logits(reference, seq, index)))
    meta["runs"][0]["sequences"][0]["generated"][index] = worst
    row = meta["runs"][-1]["sequences"][0]["logits_row"]
    logits[row, 0] += 0.5 * float(np.max(np.abs(teacher.last)))
    logits_path = target.with_name(target.name + ".logits.f32")
    logits.astype("<f4").tofile(logits_path)
    meta["logits_file"] = str(logits_path)
    target.with_name(target.name + ".json").write_text(json.dumps(meta) + "\n")


def _full_logits(reference: Reference, seq: Sequence, index: int) -> np.ndarray:
    torch = reference.torch
    tokens = seq.prompt + seq.generated[:index]
    with torch.inference_mode():
        ids = torch.tensor([tokens], device=reference.device)
        return reference.model(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1].float().cpu().numpy()


# --------------------------------------------------------------------------- reporting


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()})"


def print_table(rows: list[dict[str, Any]], bounds: Bounds) -> None:
    header = (f"{'preset':18} {'batch':>5} {'driver':12} {'dtype':5} {'rel err':>9} {'bound':>9} "
              f"{'tf-dtype':>9} {'tokens':>7} {'mism':>5} {'ties':>5}  result")
    print(header)
    print("-" * len(header))
    for r in rows:
        ref = r["reference_bf16_rel_error"]
        err = r["max_rel_logit_error"]
        print(f"{r['preset']:18} {r['batch']:5} {r['driver']:12} {r['dtype']:5} "
              f"{'tokens only' if err is None else f'{err:9.2e}':>9} "
              f"{bounds.logit_bound[r['dtype']]:9.2e} {'' if ref is None else f'{ref:9.2e}':>9} "
              f"{r['tokens_compared']:7} {r['tokens_mismatched']:5} {r['near_ties']:5}  "
              f"{'pass' if r['passed'] else 'FAIL'}")


def failures(rows: list[dict[str, Any]], bounds: Bounds) -> list[str]:
    out = []
    for r in rows:
        if r["passed"]:
            continue
        what = []
        if r["max_rel_logit_error"] is not None and not bounds.logits_ok(
                r["dtype"], r["max_rel_logit_error"], r["reference_bf16_rel_error"]):
            what.append(f"logit error {r['max_rel_logit_error']:.3g} > bound {bounds.logit_bound[r['dtype']]:.3g}")
        if r["tokens_mismatched"]:
            fm = r.get("first_mismatch", {})
            what.append(f"{r['tokens_mismatched']} mismatched tokens (first: entry {fm.get('entry')} position "
                        f"{fm.get('position')}: Baton {fm.get('baton_token')}, reference {fm.get('reference_token')},"
                        f" shortfall {fm.get('reference_shortfall_rel', float('nan')):.3g} of max|logit|)")
        out.append(f"{r['preset']} batch {r['batch']} {r['driver']}: " + "; ".join(what))
    return out


def split_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows with exactly the documented keys, and the per-row diagnostics beside them."""
    clean, diagnostics = [], []
    for r in rows:
        clean.append({k: r[k] for k in ROW_KEYS} | ({"first_mismatch": r["first_mismatch"]}
                                                     if "first_mismatch" in r else {}))
        diagnostics.append({k: r[k] for k in ("preset", "batch", "driver")} | r["_diagnostics"])
    return clean, diagnostics


# --------------------------------------------------------------------------- main


def parse_list(text: str, kind: type) -> list[Any]:
    return [kind(x) for x in text.split(",") if x.strip()]


def compare_prefixes(items: list[tuple[str, pathlib.Path]], args: argparse.Namespace, bounds: Bounds
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Compares each (preset, dump prefix), loading the references once per checkpoint."""
    import torch

    # The reference is float32 everywhere: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows: list[dict[str, Any]] = []
    diagnostics: dict[str, Any] = {}
    for preset, prefix in items:
        dump = read_dump(prefix)
        if not (dump.checkpoint / "config.json").is_file():
            raise ParityError(f"{dump.path}: checkpoint {dump.checkpoint} has no config.json")
        start = time.perf_counter()
        reference = Reference(dump.checkpoint, args.ref_dtype, args.device, args.attn_implementation)
        in_dtype = None
        if not args.no_dtype_reference:
            in_dtype = Reference(dump.checkpoint, {"bf16": "bfloat16", "fp16": "float16"}[dump.dtype],
                                 args.device, args.attn_implementation)
        preset_rows, diag = compare_dump(dump, preset, reference, in_dtype, bounds)
        diag["seconds"] = round(time.perf_counter() - start, 1)
        rows += preset_rows
        diagnostics[preset] = diag
        reference.close()
        if in_dtype is not None:
            in_dtype.close()
    return rows, diagnostics


def write_report(path: str | None, rows: list[dict[str, Any]], diagnostics: dict[str, Any], bounds: Bounds,
                 args: argparse.Namespace, extra: dict[str, Any] | None = None) -> None:
    import torch
    import transformers

    clean, row_diagnostics = split_rows(rows)
    report = {
        "reference": f"transformers {transformers.__version__} (torch {torch.__version__}, {args.ref_dtype} on "
                     f"{device_name(args.device)})",
        "date": datetime.date.today().isoformat(),
        "device": device_name(args.device),
        "bounds": bounds.to_json(),
        "rows": clean,
        "diagnostics": {"rows": row_diagnostics, "presets": diagnostics, **(extra or {})},
    }
    if path:
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")


def print_diagnostics(diagnostics: dict[str, Any]) -> None:
    for preset, diag in diagnostics.items():
        gaps = diag["reference_top2_gap_rel"]
        if gaps.get("positions"):
            below = ", ".join(f"<{k}: {v:.3f}" for k, v in gaps["fraction_below"].items())
            print(f"{preset}: reference (top1-top2)/max|logit| over {gaps['positions']} positions: {below}; "
                  f"min {gaps['min']:.2e}, median {gaps['median']:.2e}")
        for key, value in diag.items():
            if key.startswith("transformers_"):
                print(f"{preset}: {key}: max rel logit error (last position) "
                      f"{value['max_rel_logit_error_last_position']:.2e}, median "
                      f"{value['median_rel_logit_error_last_position']:.2e}; argmax differs at "
                      f"{value['argmax_differs_near_tie']} near-ties and {value['argmax_differs_beyond_tie_tol']} "
                      f"beyond tie_tol of {value['positions']} positions (widest shortfall "
                      f"{value['widest_shortfall_rel_where_argmax_differs']:.2e} of max|logit|)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="tiny-llama3", help="comma-separated presets (make_checkpoint.py --list)")
    parser.add_argument("--batches", default="1,8", help="batch sizes for decode_loop --batches")
    parser.add_argument("--work", default="/tmp/baton-parity", help="checkpoints and dumps go here (reused)")
    parser.add_argument("--out", help="write the report JSON here (e.g. results/h100-<date>-parity.json)")
    parser.add_argument("--baton", default="build/bin/decode_loop", help="decode_loop binary")
    parser.add_argument("--engines", default=DEFAULT_BATON_FLAGS["engines"])
    parser.add_argument("--gemm", default=DEFAULT_BATON_FLAGS["gemm"])
    parser.add_argument("--prompt-tokens", type=int, default=int(DEFAULT_BATON_FLAGS["prompt_tokens"]))
    parser.add_argument("--new-tokens", type=int, default=int(DEFAULT_BATON_FLAGS["new_tokens"]))
    parser.add_argument("--requests-per-slot", type=int, default=int(DEFAULT_BATON_FLAGS["requests_per_slot"]))
    parser.add_argument("--temperature", default=DEFAULT_BATON_FLAGS["temperature"])
    parser.add_argument("--baton-flag", action="append", default=[], metavar="NAME=VALUE",
                        help="add or override any decode_loop flag (repeatable), e.g. --baton-flag max_context=512")
    parser.add_argument("--layers", type=int, help="make every checkpoint with this many layers")
    parser.add_argument("--seed", type=int, default=0, help="checkpoint seed (and the self-test's prompts)")
    parser.add_argument("--device", default=None, help="where transformers runs (default: cuda if available)")
    parser.add_argument("--ref-dtype", default="float32", choices=["float32", "float64"],
                        help="the reference's dtype (weights are upcast exactly)")
    parser.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--no-dtype-reference", action="store_true",
                        help="skip transformers in the checkpoint's dtype (reference_bf16_rel_error becomes null)")
    parser.add_argument("--logit-bound", type=float, help=f"override LOGIT_BOUND (default by dtype: {LOGIT_BOUND})")
    parser.add_argument("--tie-tol", type=float, help=f"override TIE_TOL (default by dtype: {TIE_TOL})")
    parser.add_argument("--dtype-reference-factor", type=float, default=DTYPE_REFERENCE_FACTOR,
                        help="also pass a logit error within K x transformers-in-dtype's own error on the same "
                             f"sequences (default {DTYPE_REFERENCE_FACTOR:g}; 0: off)")
    parser.add_argument("--compare-only", nargs="+", metavar="PREFIX",
                        help="compare existing dumps (PREFIX.json + logits); no checkpoints made, no Baton run")
    parser.add_argument("--self-test", action="store_true",
                        help="fabricate dumps with transformers (no Baton), compare, and check that a corrupted "
                             "dump fails")
    args = parser.parse_args(argv)
    # Local directories only: the GPU machine has no internet, and a hub lookup would only time out.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    bounds = Bounds(
        {d: args.logit_bound if args.logit_bound is not None else b for d, b in LOGIT_BOUND.items()},
        {d: args.tie_tol if args.tie_tol is not None else t for d, t in TIE_TOL.items()},
        args.dtype_reference_factor or None)
    presets = parse_list(args.presets, str)
    batches = parse_list(args.batches, int)
    work = pathlib.Path(args.work)
    make = _make_checkpoint_module()
    try:
        if args.compare_only:
            items = []
            for prefix in args.compare_only:
                dump = read_dump(prefix)
                items.append((dump.checkpoint.name, pathlib.Path(prefix)))
            rows, diagnostics = compare_prefixes(items, args, bounds)
            return finish(rows, diagnostics, bounds, args)
        checkpoints = {}
        for preset in presets:
            name = preset if args.layers is None else f"{preset}-l{args.layers}"
            checkpoints[preset] = make.make_checkpoint(
                work / name, preset=preset, seed=args.seed, layers=args.layers, reuse=True,
                device="cuda" if args.device.startswith("cuda") else "cpu")
        if args.self_test:
            return self_test(checkpoints, batches, work, bounds, args)
        flags = dict(DEFAULT_BATON_FLAGS)
        flags.update(engines=args.engines, gemm=args.gemm, prompt_tokens=str(args.prompt_tokens),
                     new_tokens=str(args.new_tokens), requests_per_slot=str(args.requests_per_slot),
                     temperature=str(args.temperature))
        for item in args.baton_flag:
            name, sep, value = item.partition("=")
            if not sep:
                raise ParityError(f"--baton-flag {item!r}: expected NAME=VALUE")
            flags[name.lstrip("-")] = value
        items = []
        for checkpoint in checkpoints.values():
            prefix = work / f"{checkpoint.name}.baton"
            run_baton(baton_command(args.baton, checkpoint, batches, prefix, flags),
                      work / f"{checkpoint.name}.decode_loop.log")
            items.append((checkpoint.name, prefix))  # the preset, with -lN when --layers made it smaller
        rows, diagnostics = compare_prefixes(items, args, bounds)
        return finish(rows, diagnostics, bounds, args)
    except (ParityError, make.CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def finish(rows: list[dict[str, Any]], diagnostics: dict[str, Any], bounds: Bounds, args: argparse.Namespace,
           extra: dict[str, Any] | None = None) -> int:
    print_table(rows, bounds)
    print_diagnostics(diagnostics)
    write_report(args.out, rows, diagnostics, bounds, args, extra)
    failed = failures(rows, bounds)
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    print("Passed")
    return 0


def self_test(checkpoints: dict[str, pathlib.Path], batches: list[int], work: pathlib.Path, bounds: Bounds,
              args: argparse.Namespace) -> int:
    """Checks the comparison itself: transformers' own dump must pass and a corrupted one must fail."""
    items = []
    for preset, checkpoint in checkpoints.items():
        prefix = work / f"{checkpoint.name}.selftest"
        start = time.perf_counter()
        fabricate_dump(checkpoint, prefix, batches, args.prompt_tokens, args.new_tokens, args.device, args.seed)
        print(f"{checkpoint.name}: fabricated a dump from transformers' greedy generation in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        items.append((checkpoint.name, prefix))
    rows, diagnostics = compare_prefixes(items, args, bounds)
    print("== transformers in the checkpoint's dtype, as if it were Baton (should pass)")
    finish(rows, diagnostics, bounds, args)  # its verdict is about the bounds; the self-test judges below

    print("== the same dump with one wrong token and one logit off by max|logit|/2 (must fail)")
    preset, prefix = items[0]
    checkpoint = next(iter(checkpoints.values()))
    reference = Reference(checkpoint, args.ref_dtype, args.device, args.attn_implementation)
    corrupted = work / f"{checkpoint.name}.selftest-corrupted"
    corrupt_dump(prefix, corrupted, reference)
    bad_rows, _ = compare_dump(read_dump(corrupted), preset, reference, None, bounds)
    reference.close()
    print_table(bad_rows, bounds)
    caught_token = bad_rows[0]["tokens_mismatched"] >= 1 and not bad_rows[0]["passed"]
    last = bad_rows[-1]
    caught_logit = not bounds.logits_ok(last["dtype"], last["max_rel_logit_error"], last["reference_bf16_rel_error"])
    print(f"corrupted token caught: {caught_token}; corrupted logit caught: {caught_logit}")
    # The comparison code is right when it catches both and finds no token of
    # transformers' own dump beyond the tie band; a logit error of transformers
    # itself above the bound says the bound is too tight for that model.
    tokens_clean = all(r["tokens_mismatched"] == 0 for r in rows)
    for r in rows:
        if not bounds.logits_ok(r["dtype"], r["max_rel_logit_error"], r["reference_bf16_rel_error"]):
            print(f"warning: {r['preset']} batch {r['batch']}: transformers in {r['dtype']} is itself "
                  f"{r['max_rel_logit_error']:.3g} of max|logit| from float32, above the bound "
                  f"{bounds.logit_bound[r['dtype']]:.3g}: the bound is too tight for this model")
    ok = tokens_clean and caught_token and caught_logit
    print("self-test " + ("Passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
