"""Penalties and min_tokens on a GPU (skipped without one), against transformers in float32 on the tiny checkpoint
of test_llm_gpu.py: the reference restates the rules from their definitions (vLLM's apply_penalties: the
repetition penalty on prompt and generated tokens, then frequency and presence on the generated ones; the stop
tokens at -inf before min_tokens) on transformers' logits, teacher-forced along Baton's greedy tokens. A token
that differs must be a near-tie (within parity_compare.TIE_TOL x max|logit|, the project's parity rule), and
few may. Through the server too: its text for a penalized request equals the in-process LLM's.
"""

import pathlib
import sys

import pytest

import baton
from test_llm_gpu import OPTIONS, _gpu_count, checkpoint  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU visible")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def reference_check(model, prompt, tokens, sampling, stop_ids, tie_tol):
    """(near-ties, mismatches) of Baton's tokens against the rules applied to transformers' float32 logits."""
    import torch

    ids = torch.tensor([list(prompt) + list(tokens)], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:].double()  # row g predicts generated token g
    ties = mismatches = 0
    counts = {}
    for g, token in enumerate(tokens):
        row = logits[g].clone()
        seen = set(prompt) | set(counts)
        index = torch.tensor(sorted(seen), device="cuda")
        x = row[index]
        x = torch.where(x > 0, x / sampling.repetition_penalty, x * sampling.repetition_penalty)
        row[index] = x
        for t, n in counts.items():
            row[t] -= sampling.frequency_penalty * n + sampling.presence_penalty
        if g < sampling.min_tokens:
            row[torch.tensor(stop_ids, device="cuda")] = float("-inf")
        best = int(torch.argmax(row))
        if token != best:
            shortfall = float(row[best] - row[token]) / float(logits[g].abs().max())
            if shortfall <= tie_tol:
                ties += 1
            else:
                mismatches += 1
        counts[token] = counts.get(token, 0) + 1
    return ties, mismatches


def test_penalties_and_min_tokens_follow_a_float32_reference(checkpoint, rng):  # noqa: F811
    import torch
    import transformers

    sys.path.insert(0, str(ROOT / "scripts" / "checkpoints"))
    from parity_compare import TIE_TOL

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).cuda().eval()
    with baton.LLM(checkpoint, **OPTIONS) as llm:
        vocab = llm.info["vocab_size"]
        eos = llm.info["eos_token_ids"]
        total_ties = total_mismatches = total = 0
        for k in range(8):
            prompt = [rng.randrange(8, vocab) for _ in range(rng.randint(1, 30))]
            sampling = baton.SamplingParams(
                max_tokens=32, presence_penalty=round(rng.uniform(-2, 2), 2),
                frequency_penalty=round(rng.uniform(-2, 2), 2), repetition_penalty=round(rng.uniform(0.5, 2), 2),
                min_tokens=rng.randint(0, 16), stop_token_ids=[rng.randrange(8, vocab) for _ in range(3)])
            out = llm.generate([prompt], sampling)[0]
            stops = list(sampling.stop_token_ids) + [t for t in eos if t not in sampling.stop_token_ids]
            assert not set(out.token_ids[:sampling.min_tokens]) & set(stops), (k, sampling, out.token_ids)
            ties, mismatches = reference_check(model, prompt, out.token_ids, sampling, stops, TIE_TOL["bf16"])
            print(f"request {k}: {sampling} -> {len(out.token_ids)} tokens, {ties} near-ties, {mismatches} mismatches")
            total_ties += ties
            total_mismatches += mismatches
            total += len(out.token_ids)
        assert total_mismatches == 0
        assert total_ties <= max(2, total // 10)

        import httpx
        from test_serve_gpu import start_server

        process, url = start_server(checkpoint)
        try:
            prompt = [rng.randrange(8, vocab) for _ in range(12)]
            fields = dict(max_tokens=24, presence_penalty=0.7, frequency_penalty=0.4, repetition_penalty=1.3,
                          min_tokens=5)
            want = llm.generate([prompt], baton.SamplingParams(**fields))[0].text
            got = httpx.post(url + "/v1/completions", json=dict(prompt=prompt, temperature=0, **fields), timeout=60)
            assert got.status_code == 200, got.text
            assert got.json()["choices"][0]["text"] == want
        finally:
            process.terminate()
            process.wait(60)
