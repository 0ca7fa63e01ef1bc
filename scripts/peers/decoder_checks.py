"""The PyTorch peers' correctness checks, run before any timing.

The gpt-fast-style decoder against transformers (float32, eager: the tiny
presets of each architecture on the CPU, or a given checkpoint), its prompt
forward (prefill_first_tokens, prefill_peers.py's) likewise, and the compiled
(and graph-captured) step against the eager step; plus the loader of
scripts/checkpoints/make_checkpoint.py that makes the tiny presets.
"""
from __future__ import annotations

import contextlib
import pathlib
import sys
import tempfile
from typing import Any, Iterator

import torch

from gpt_fast_decoder import Decoder, cache_tensors, load_transformer, prefill_first_tokens

# make_checkpoint.py (scripts/ is not a package): imported by name, so that this
# and parity.py share one module object and its exception classes.
sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "checkpoints"))

SELF_TEST_PRESETS = ("tiny-llama3", "tiny-qwen2", "tiny-mistral", "tiny-linear-rope")
# float32 against float32 with another summation order: differences are a few
# ulps of the accumulated values, far below any real bug (a wrong RoPE or a
# missing bias moves logits by tens of percent of max|logit|).
CHECK_REL_TOL = 1e-4


# --------------------------------------------------------------------------- checks


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


@contextlib.contextmanager
def _float32_pair(checkpoint: pathlib.Path, device: str, batch: int, prompt_tokens: int, steps: int,
                  seed: int) -> Iterator[tuple[Any, Any, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """transformers and the peers' decoder on one checkpoint, both float32 eager with TF32 off (for the check
    only), seeded random prompts, and transformers' greedy generation of steps + 1 tokens with each one's
    logits: yields (hf, ours, prompts, hf_tokens [B, steps + 1], hf_logits [B, steps + 1, V])."""
    from transformers import AutoModelForCausalLM

    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32,
                                                  attn_implementation="eager").to(device).eval()
        ours = load_transformer(checkpoint, torch.float32, device)
        generator = torch.Generator().manual_seed(seed)
        prompts = torch.randint(0, ours.args.vocab_size, (batch, prompt_tokens), generator=generator).to(device)
        # eos_token_id=None: pure greedy for every step (min_new_tokens would mask the stop token instead).
        expected = hf.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                               max_new_tokens=steps + 1, eos_token_id=None, pad_token_id=0,
                               output_logits=True, return_dict_in_generate=True)
        yield (hf, ours, prompts, expected.sequences[:, prompt_tokens:],
               torch.stack([x.float() for x in expected.logits], dim=1))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32


@torch.inference_mode()
def check_against_transformers(checkpoint: pathlib.Path, device: str, batch: int = 2, prompt_tokens: int = 16,
                               steps: int = 8, seed: int = 0) -> dict[str, Any]:
    """This decoder vs transformers, both float32 eager: prefill logits, then teacher-forced decode steps.

    The decode steps are fed transformers' own greedy tokens and go through
    Decoder._step, the function the peers compile, so the static cache, the
    position bookkeeping and the masks are checked along with the layers.
    """
    with _float32_pair(checkpoint, device, batch, prompt_tokens, steps, seed) as (hf, ours, prompts, hf_tokens,
                                                                                 hf_logits):
        decoder = Decoder(ours, batch, prompt_tokens, steps + 1, stop_token=-1)
        positions = torch.arange(prompt_tokens, device=device)
        errors = [_rel(ours(prompts, positions)[:, -1], hf_logits[:, 0])]
        decoder.prefill(prompts)
        tokens_equal = bool(torch.equal(decoder.tokens[:, 0], hf_tokens[:, 0]))
        for i in range(steps):
            decoder.tokens.copy_(hf_tokens[:, i:i + 1])  # teacher-forced: one divergence must not cascade
            logits = ours(decoder.tokens, decoder.pos)[:, -1]
            errors.append(_rel(logits, hf_logits[:, i + 1]))
            decoder._step()  # the compiled step's own path, for its state updates
            tokens_equal &= bool(torch.equal(decoder.generated[:, i + 1], hf_tokens[:, i + 1]))
        result = {"checkpoint": str(checkpoint), "max_rel_logit_error": max(errors),
                  "greedy_tokens_equal": tokens_equal, "steps": steps, "batch": batch}
        result["passed"] = result["max_rel_logit_error"] <= CHECK_REL_TOL
        del hf, ours
        return result


@torch.inference_mode()
def check_prefill_against_transformers(checkpoint: pathlib.Path, device: str, batch: int = 2,
                                       prompt_tokens: int = 64, steps: int = 4, seed: int = 0) -> dict[str, Any]:
    """The prompt forward that prefill_peers.py times against transformers, both float32 eager.

    Compared: the logits of every prompt position (the causal attention within
    the prompt), the last position's from prefill_first_tokens and its greedy
    token, then teacher-forced decode steps through the default decode path that
    read the KV cache the prefill wrote (so a cache written at the wrong place or
    layout fails here, not only in the timed run).
    """
    with _float32_pair(checkpoint, device, batch, prompt_tokens, steps, seed) as (hf, ours, prompts, hf_tokens,
                                                                                 hf_logits):
        hf_all = hf(prompts).logits.float()  # [B, T, V]
        decoder = Decoder(ours, batch, prompt_tokens, steps + 1, stop_token=-1)
        caches = cache_tensors(ours)
        cos, sin = ours.cos[:prompt_tokens], ours.sin[:prompt_tokens]
        positions = torch.arange(prompt_tokens, device=device)
        every = ours(prompts, positions, caches=caches, rope=(cos, sin), prefill=True)
        for k, v in caches:  # the timed path below must write the cache itself
            k.zero_()
            v.zero_()
        first, last = prefill_first_tokens(ours, prompts, caches, cos, sin)
        errors = {"every_prompt_position": _rel(every, hf_all), "last_position": _rel(last, hf_logits[:, 0])}
        tokens_equal = bool(torch.equal(first, hf_tokens[:, 0]))
        decoder.pos.fill_(prompt_tokens)
        steps_error = 0.0
        for i in range(steps):
            decoder.tokens.copy_(hf_tokens[:, i:i + 1])  # teacher-forced: one divergence must not cascade
            logits = ours(decoder.tokens, decoder.pos)[:, -1]
            steps_error = max(steps_error, _rel(logits, hf_logits[:, i + 1]))
            tokens_equal &= bool(torch.equal(logits.argmax(-1), hf_tokens[:, i + 1]))
            decoder.pos.add_(1)
        errors["decode_steps_after_prefill"] = steps_error
        worst = max(errors.values())
        result = {"checkpoint": str(checkpoint), "device": device, "batch": batch, "prompt_tokens": prompt_tokens,
                  "steps": steps, "max_rel_logit_error": worst, "errors": errors,
                  "greedy_tokens_equal": tokens_equal, "tolerance": CHECK_REL_TOL,
                  "passed": worst <= CHECK_REL_TOL}
        del hf, ours, decoder
        return result


def _make_checkpoint_module() -> Any:
    """scripts/checkpoints/make_checkpoint.py, imported when first needed."""
    import make_checkpoint

    return make_checkpoint


def self_test(work: pathlib.Path | None, compile_cpu: bool) -> bool:
    """The decoder against transformers on tiny presets of each architecture, float32 on the CPU."""
    make = _make_checkpoint_module()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        base = work or pathlib.Path(tmp)
        for preset in SELF_TEST_PRESETS:
            checkpoint = make.make_checkpoint(base / f"peers-selftest-{preset}", preset=preset, reuse=True,
                                              log=lambda *_: None)
            result = check_against_transformers(checkpoint, "cpu")
            ok &= result["passed"] and result["greedy_tokens_equal"]
            print(f"self-test {preset:17} max rel logit error {result['max_rel_logit_error']:.2e} "
                  f"(tolerance {CHECK_REL_TOL:g}), greedy tokens equal: {result['greedy_tokens_equal']}")
        if compile_cpu:
            checkpoint = base / f"peers-selftest-{SELF_TEST_PRESETS[0]}"
            ok &= compiled_matches_eager(checkpoint, "cpu", torch.float32)
    print("self-test " + ("Passed" if ok else "FAILED"))
    return ok


@torch.inference_mode()
def compiled_matches_eager(checkpoint: pathlib.Path, device: str, dtype: torch.dtype, batch: int = 2,
                           steps: int = 6, mode: str = "default", graph: bool = False,
                           native_gqa: bool = False) -> bool:
    """The compiled (and, on CUDA, graph-captured) step produces the eager step's tokens."""
    model = load_transformer(checkpoint, dtype, device)
    model.native_gqa = native_gqa
    prompts = torch.randint(0, model.args.vocab_size, (batch, 16), generator=torch.Generator().manual_seed(1))
    prompts = prompts.to(device)
    eager = Decoder(model, batch, 16, steps + 1, stop_token=-1)
    eager.prefill(prompts)
    eager.run_nosync(steps)
    want = eager.generated.clone()
    compiled = Decoder(model, batch, 16, steps + 1, stop_token=-1)
    compiled.compile(mode)
    if graph:
        compiled.capture()
    compiled.prefill(prompts)
    compiled.run_nosync(steps)
    same = bool(torch.equal(compiled.generated, want))
    print(f"compiled{' + CUDA graph' if graph else ''} step vs eager step ({dtype}, {device}"
          f"{', native GQA' if native_gqa else ''}): same tokens: {same}")
    return same

