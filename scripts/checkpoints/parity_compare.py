"""transformers as the reference, and the comparison of a parity dump with it.

Tokens are scored teacher-forced (transformers is fed Baton's own sequence, so
one divergence does not cascade); a differing token is a near-tie, not a
mismatch, when the reference's top-1 logit exceeds its logit of Baton's token by
at most tie_tol x max|reference logits| at that position.
"""
from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity_dump import Dump, Sequence

# ---------------------------------------------------------------------------
# Bounds. Both are relative to max|reference logit| at the position, so they do
# not depend on the model's logit scale.
#
# LOGIT_BOUND: Baton stores logits in its dtype, so its last-step logits carry
# at least the storage rounding (bf16: 8 significant bits, half an ulp is 2^-9
# of the value; fp16: 11 bits, 2^-12), plus what the whole forward pass
# accumulates in that dtype (activations, the KV cache and the residual stream
# are stored in it between kernels; accumulation is fp32). transformers itself
# in bf16 is the yardstick: each row reports `reference_bf16_rel_error`, the
# same figure for transformers run in the checkpoint's dtype. On the CPU
# (scripts/checkpoints/README.md) transformers-bf16 was 1.3-1.4e-2 of max|logit|
# from float32 on the 2-layer presets, 2.2e-2 on Llama-3.2-1B's shape with 4
# layers and 4.1e-2 on SmolLM2's 30 layers (above 2^-5: the error grows with
# depth); transformers-fp16 was 2.0e-3.
LOGIT_BOUND = {"bf16": 2.0**-5, "fp16": 2.0**-8}
#
# DTYPE_REFERENCE_FACTOR: because that error grows with depth, a row also
# passes when its error is within this multiple of transformers-in-dtype's own
# error on the same sequences: an independent implementation with the same
# storage rounding is what a 16-bit decoder can be held to on a deep model.
DTYPE_REFERENCE_FACTOR = 2.0
#
# TIE_TOL: two logits that are each off by up to LOGIT_BOUND x max|logit| can
# swap order when they are within twice that of each other, so a differing
# token is excusable only inside that band; any wider difference is a real
# mismatch. Defaults are 2 x LOGIT_BOUND for that reason. On the CPU every
# token transformers-bf16 picked differently from float32 (3-8% of positions)
# was within 2.4e-2 (2 layers) to 4.7e-2 (30 layers) of max|logit|.
TIE_TOL = {dtype: 2.0 * bound for dtype, bound in LOGIT_BOUND.items()}
#
# Where the distribution of (top1 - top2) / max|logit| is reported: the share
# of positions below each of these is the share a given tie_tol would excuse.
GAP_THRESHOLDS = (2.0**-4, 2.0**-5, 2.0**-6, 2.0**-7, 2.0**-8, 2.0**-9)
# ---------------------------------------------------------------------------


@dataclass
class Teacher:
    """What one teacher-forced forward says about a sequence's generated positions."""

    argmax: np.ndarray       # [n] reference argmax at each generated position
    top1: np.ndarray         # [n] its logit
    top2: np.ndarray         # [n] the second-largest logit
    at_token: np.ndarray     # [n] the reference's logit of the sequence's own token
    scale: np.ndarray        # [n] max|logit| at the position
    last: np.ndarray         # [vocab] float32 logits at the last position
    at_also: np.ndarray | None = None  # [n] the logit of another implementation's token, when asked

    def rel_gap(self) -> np.ndarray:
        return (self.top1 - self.top2) / np.maximum(self.scale, np.finfo(np.float32).tiny)


class Reference:
    """A transformers model in one dtype, with teacher-forced results cached per token sequence."""

    def __init__(self, checkpoint: pathlib.Path, dtype: str, device: str, attn_implementation: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.device = device
        self.dtype = dtype
        self.model = AutoModelForCausalLM.from_pretrained(
            # .to() rather than device_map=: device_map needs accelerate, which the GPU machine may lack.
            checkpoint, dtype=getattr(torch, dtype), attn_implementation=attn_implementation).to(device).eval()
        self.cache: dict[tuple[int, ...], Teacher] = {}

    def teacher(self, sequence: Sequence, also: np.ndarray | None = None) -> Teacher:
        """The teacher-forced results; `also` adds this model's logits of other tokens (one per position)."""
        if sequence.key not in self.cache:
            self.cache[sequence.key] = self._forward(sequence, also)
        return self.cache[sequence.key]

    def _forward(self, sequence: Sequence, also: np.ndarray | None) -> Teacher:
        torch = self.torch
        n = len(sequence.generated)
        # The last generated token is never an input: its logits come from the step before.
        tokens = sequence.prompt + sequence.generated[:-1]
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, logits_to_keep=n, use_cache=False).logits[0].float()
        top = logits.topk(2, dim=-1).values
        own = torch.tensor(sequence.generated, dtype=torch.long, device=self.device)
        return Teacher(
            argmax=logits.argmax(dim=-1).cpu().numpy(),
            top1=top[:, 0].cpu().numpy(),
            top2=top[:, 1].cpu().numpy(),
            at_token=logits.gather(1, own[:, None])[:, 0].cpu().numpy(),
            scale=logits.abs().amax(dim=-1).cpu().numpy(),
            last=logits[-1].cpu().numpy().astype(np.float32),
            at_also=None if also is None else logits.gather(
                1, torch.as_tensor(also, dtype=torch.long, device=self.device)[:, None])[:, 0].cpu().numpy(),
        )

    def close(self) -> None:
        del self.model
        self.cache.clear()
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()


# --------------------------------------------------------------------------- comparison


def rel_error(values: np.ndarray, ref: np.ndarray) -> float:
    """max|values - ref| / max|ref| over the vocabulary."""
    scale = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(values.astype(np.float64) - ref.astype(np.float64)))) / max(scale, 1e-30)


def classify_tokens(generated: list[int], teacher: Teacher, tie_tol: float) -> tuple[int, int, list[dict[str, Any]]]:
    """(mismatched, near_ties, details of each differing position) for one sequence."""
    mismatched, near_ties, differing = 0, 0, []
    for i, token in enumerate(generated):
        if token == int(teacher.argmax[i]):
            continue
        shortfall = float(teacher.top1[i] - teacher.at_token[i]) / max(float(teacher.scale[i]), 1e-30)
        is_tie = shortfall <= tie_tol
        near_ties += is_tie
        mismatched += not is_tie
        differing.append({"index": i, "near_tie": bool(is_tie), "baton_token": int(token),
                          "reference_token": int(teacher.argmax[i]), "reference_shortfall_rel": shortfall,
                          "reference_top2_gap_rel": float(teacher.top1[i] - teacher.top2[i])
                          / max(float(teacher.scale[i]), 1e-30)})
    return mismatched, near_ties, differing


def gap_distribution(gaps: np.ndarray) -> dict[str, Any]:
    """Share of positions whose (top1 - top2) / max|logit| is below each threshold."""
    if gaps.size == 0:
        return {"positions": 0}
    return {
        "positions": int(gaps.size),
        "fraction_below": {f"2^{round(math.log2(t))}": float(np.mean(gaps < t)) for t in GAP_THRESHOLDS},
        "min": float(gaps.min()),
        "median": float(np.median(gaps)),
    }


@dataclass
class Bounds:
    logit_bound: dict[str, float]
    tie_tol: dict[str, float]
    # When set, a logit error within this multiple of transformers-in-dtype's own
    # error on the same sequences also passes (deep random models: see the header).
    dtype_reference_factor: float | None = None

    def logits_ok(self, dtype: str, error: float, reference_error: float | None) -> bool:
        if error <= self.logit_bound[dtype]:
            return True
        return (self.dtype_reference_factor is not None and reference_error is not None
                and error <= self.dtype_reference_factor * reference_error)

    def to_json(self) -> dict[str, Any]:
        rule = ("a row passes when max_rel_logit_error <= logit_bound[dtype]"
                + ("" if self.dtype_reference_factor is None else
                   f" (or <= {self.dtype_reference_factor:g} x reference_bf16_rel_error)")
                + " and tokens_mismatched == 0; a differing token is a near-tie when the reference's top-1 logit "
                  "exceeds its logit of Baton's token by <= tie_tol[dtype] x max|reference logits| there")
        return {"logit_bound": self.logit_bound, "tie_tol": self.tie_tol,
                "dtype_reference_factor": self.dtype_reference_factor, "rule": rule}


def compare_dump(dump: Dump, preset: str, reference: Reference, in_dtype: Reference | None,
                 bounds: Bounds) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One result row per (batch, driver) run of the dump, and the preset's diagnostics."""
    tie_tol = bounds.tie_tol[dump.dtype]
    rows = []
    for run in dump.runs:
        errors, in_dtype_errors = [], []
        compared = mismatched = near_ties = inconsistent = 0
        widest_tie = 0.0
        first: dict[str, Any] | None = None
        for seq in run.sequences:
            # transformers-in-dtype first, so that the reference can also grade its tokens.
            other = in_dtype.teacher(seq) if in_dtype is not None else None
            teacher = reference.teacher(seq, None if other is None else other.argmax)
            if seq.logits_row is not None:
                baton_last = np.asarray(dump.logits[seq.logits_row], dtype=np.float32)
                errors.append(rel_error(baton_last, teacher.last))
                # The dump's own consistency: the last row's argmax is the last token
                # unless that step was itself a near-tie; a wrong logits_row shows here.
                inconsistent += int(np.argmax(baton_last)) != seq.generated[-1]
            m, t, differing = classify_tokens(seq.generated, teacher, tie_tol)
            compared += len(seq.generated)
            mismatched += m
            near_ties += t
            widest_tie = max([widest_tie] + [d["reference_shortfall_rel"] for d in differing if d["near_tie"]])
            if first is None:
                for d in differing:
                    if not d["near_tie"]:
                        first = {"entry": seq.entry, "position": len(seq.prompt) - 1 + d["index"], **d}
                        break
            if other is not None and seq.logits_row is not None:
                in_dtype_errors.append(rel_error(other.last, teacher.last))
        max_error = max(errors) if errors else None
        in_dtype_error = max(in_dtype_errors) if in_dtype_errors else None
        row: dict[str, Any] = {
            "preset": preset,
            "batch": run.batch,
            "driver": run.driver,
            "dtype": dump.dtype,
            "max_rel_logit_error": max_error,
            "tokens_compared": compared,
            "tokens_mismatched": mismatched,
            "near_ties": near_ties,
            # Runs whose sequences ended in different steps carry no logits: their tokens alone decide.
            "logits_compared": len(errors),
            "passed": compared > 0 and mismatched == 0 and (
                not errors or bounds.logits_ok(dump.dtype, max_error, in_dtype_error)),
            "reference_bf16_rel_error": in_dtype_error,
        }
        if first is not None:
            row["first_mismatch"] = first
        row["_diagnostics"] = {"sequences": len(run.sequences),
                               "mean_rel_logit_error": float(np.mean(errors)) if errors else None,
                               "last_row_argmax_differs_from_last_token": inconsistent,
                               # how much of tie_tol the near-ties used: the data for tuning it
                               "widest_near_tie_shortfall_rel": widest_tie}
        rows.append(row)
    return rows, preset_diagnostics(reference, in_dtype, tie_tol)


def preset_diagnostics(reference: Reference, in_dtype: Reference | None, tie_tol: float) -> dict[str, Any]:
    """Over every distinct sequence: the top-2 gap distribution and transformers-in-dtype vs float32."""
    gaps = np.concatenate([t.rel_gap() for t in reference.cache.values()]) if reference.cache else np.zeros(0)
    out: dict[str, Any] = {"distinct_sequences": len(reference.cache),
                           "reference_top2_gap_rel": gap_distribution(gaps)}
    if in_dtype is not None:
        differing = ties = compared = 0
        widest = 0.0
        last_errors = []
        for key, teacher in reference.cache.items():
            other = in_dtype.cache.get(key)
            if other is None or teacher.at_also is None:
                continue
            # What transformers-in-dtype picks, teacher-forced, graded like Baton's tokens.
            differs = other.argmax != teacher.argmax
            shortfall = (teacher.top1 - teacher.at_also) / np.maximum(teacher.scale, 1e-30)
            ties += int(np.sum(differs & (shortfall <= tie_tol)))
            differing += int(np.sum(differs & (shortfall > tie_tol)))
            if differs.any():
                widest = max(widest, float(np.max(shortfall[differs])))
            compared += len(other.argmax)
            last_errors.append(rel_error(other.last, teacher.last))
        out[f"transformers_{in_dtype.dtype}_vs_float32"] = {
            "positions": compared,
            "argmax_differs_beyond_tie_tol": differing,
            "argmax_differs_near_tie": ties,
            "widest_shortfall_rel_where_argmax_differs": widest,
            "max_rel_logit_error_last_position": max(last_errors) if last_errors else None,
            "median_rel_logit_error_last_position": float(np.median(last_errors)) if last_errors else None,
        }
    return out

