"""Log-probabilities on a GPU (skipped without one), against transformers in float32 on the tiny checkpoint of
test_llm_gpu.py: Baton's tokens are teacher-forced through transformers, and each generated token's logprobs
(SamplingParams.logprobs=5: the chosen token's and the top 5) are compared with log_softmax of transformers'
float32 logits for the same prefix, for greedy requests and for sampled ones with penalties, top-k and top-p
(which the "raw" logprobs must not see).

Tolerance: Baton's logits carry the bf16 error parity_compare.LOGIT_BOUND bounds (2^-5 x max|logit| at the
position); a logprob is a logit minus the log-sum-exp, whose error is a softmax-weighted mean of the logits'
errors, so a logprob is off by at most twice that: TIE_TOL["bf16"] x max|logit|, the project's near-tie band. Two
tokens can swap order only when their reference logprobs are within that band too (the log-sum-exp cancels), so
the top-5 ids are compared modulo near-ties: a token the reference puts above its 5th value by more than the
band must be in Baton's top 5, and none Baton names may lie below it by more. Exact properties of the device's
own numbers: the top 5 sorted descending (ties to the lower id), the chosen token's logprob at most the first's
(equal to it for greedy), and their probabilities summing to at most 1 (+ float32 rounding). Through the server
too: `python -m baton serve` answers the in-process LLM's numbers for greedy requests.
"""

import math
import pathlib
import sys

import pytest

import baton
from test_llm_gpu import OPTIONS, _gpu_count, checkpoint  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU visible")

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOP = 5
SUM_SLACK = 1e-4  # float32 rounding of a few exp terms
SERVER_SLACK = 1e-5  # the same device numbers in another process (a cross-block sum may add in another order)


def reference(model, prompt, tokens):
    """Per generated position: float64 log_softmax of transformers' float32 logits, and max|logit| there."""
    import torch

    ids = torch.tensor([list(prompt) + list(tokens)], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)].double()
    return torch.log_softmax(logits, dim=-1).cpu(), logits.abs().max(dim=-1).values.cpu()


def problems_of(ref_row, scale, token, entry, tie_tol, greedy):
    """What is wrong with one token's logprobs (vLLM's dict) against the reference row; empty when right."""
    import torch

    tol = tie_tol * float(scale)
    out = []
    top = sorted(((t, p) for t, p in entry.items() if p.rank is not None), key=lambda item: item[1].rank)
    ids, values = [t for t, _ in top], [p.logprob for _, p in top]
    if [p.rank for _, p in top] != list(range(1, TOP + 1)):
        out.append(f"ranks {[p.rank for _, p in top]}")
        return out
    for (a, va), (b, vb) in zip(zip(ids, values), zip(ids[1:], values[1:])):
        if not (va > vb or (va == vb and a < b)):
            out.append(f"top not in order: ({a}, {va}) before ({b}, {vb})")
    for t, p in entry.items():
        if abs(p.logprob - float(ref_row[t])) > tol:
            out.append(f"token {t}: {p.logprob:.5f}, reference {float(ref_row[t]):.5f} (tolerance {tol:.5f})")
    best = torch.topk(ref_row, TOP)
    kth = float(best.values[-1])
    for t in ids:
        if float(ref_row[t]) < kth - tol:
            out.append(f"token {t} in Baton's top {TOP} lies {kth - float(ref_row[t]):.5f} below the reference's")
    for t, v in zip(best.indices.tolist(), best.values.tolist()):
        if v > kth + tol and t not in ids:
            out.append(f"token {t} (reference {v:.5f}) is clearly in the top {TOP} but not in Baton's {ids}")
    chosen = entry[token].logprob
    if chosen > values[0] or (greedy and chosen != values[0]):
        out.append(f"chosen token {token}: {chosen} against the first's {values[0]} (greedy: {greedy})")
    if sum(math.exp(v) for v in values) > 1 + SUM_SLACK:
        out.append(f"top {TOP} probabilities sum to {sum(math.exp(v) for v in values)}")
    return out


def test_logprobs_follow_a_float32_reference(checkpoint, rng):  # noqa: F811
    import torch
    import transformers

    sys.path.insert(0, str(ROOT / "scripts" / "checkpoints"))
    from parity_compare import TIE_TOL

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).cuda().eval()
    with baton.LLM(checkpoint, **OPTIONS) as llm:
        vocab = llm.info["vocab_size"]
        problems, checked, worst = [], 0, 0.0
        for k in range(12):
            prompt = [rng.randrange(8, vocab) for _ in range(rng.randint(1, 40))]
            greedy = k % 2 == 0
            sampling = baton.SamplingParams(max_tokens=24, logprobs=TOP, ignore_eos=True) if greedy else \
                baton.SamplingParams(max_tokens=24, logprobs=TOP, ignore_eos=True, temperature=0.9, seed=k,
                                     top_k=50, top_p=0.95, repetition_penalty=1.3, presence_penalty=0.5)
            out = llm.generate([prompt], sampling)[0].outputs[0]
            assert len(out.logprobs) == len(out.token_ids) == 24
            assert out.cumulative_logprob == pytest.approx(
                sum(e[t].logprob for e, t in zip(out.logprobs, out.token_ids)))
            rows, scales = reference(model, prompt, out.token_ids)
            for g, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
                problems += [f"request {k} token {g}: {p}" for p in problems_of(
                    rows[g], scales[g], token, entry, TIE_TOL["bf16"], greedy)]
                worst = max(worst, max(abs(p.logprob - float(rows[g][t])) / float(scales[g])
                                       for t, p in entry.items()))
                checked += 1
        print(f"{checked} tokens; largest logprob error {worst:.2e} x max|logit| (tolerance {TIE_TOL['bf16']:.2e})")
        assert not problems, "\n".join(problems[:40])


def test_the_server_returns_the_in_process_numbers(checkpoint, rng):  # noqa: F811
    import openai
    from test_serve_gpu import start_server

    with baton.LLM(checkpoint, **OPTIONS) as llm:
        vocab = llm.info["vocab_size"]
        codec = llm.tokenizer
        prompt = [rng.randrange(8, vocab) for _ in range(12)]
        want = llm.generate([prompt], baton.SamplingParams(max_tokens=16, logprobs=TOP))[0].outputs[0]
        messages = [{"role": "user", "content": "Write about GPUs."}]
        ids = llm.tokenizer.encode(llm.tokenizer.apply_chat_template(messages), add_special_tokens=False)
        chat_want = llm.generate([ids], baton.SamplingParams(max_tokens=16, logprobs=TOP))[0].outputs[0]

    def text(token):  # as the server writes a token: decoded alone, special tokens kept
        return codec.decode([token], skip_special_tokens=False)

    process, url = start_server(checkpoint)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        out = client.completions.create(model="model", prompt=prompt, max_tokens=16, temperature=0, logprobs=TOP)
        lp = out.choices[0].logprobs
        assert lp.tokens == [text(t) for t in want.token_ids]
        assert lp.token_logprobs == pytest.approx([e[t].logprob for e, t in zip(want.logprobs, want.token_ids)],
                                                  abs=SERVER_SLACK)
        chat = client.chat.completions.create(model="model", messages=messages, max_tokens=16, temperature=0,
                                              logprobs=True, top_logprobs=TOP)
        content = chat.choices[0].logprobs.content
        assert [c.token for c in content] == [text(t) for t in chat_want.token_ids]
        for item, token, entry in zip(content, chat_want.token_ids, chat_want.logprobs):
            top = sorted((p for p in entry.values() if p.rank is not None), key=lambda p: p.rank)
            assert item.logprob == pytest.approx(entry[token].logprob, abs=SERVER_SLACK)
            assert [t.token for t in item.top_logprobs] == [p.decoded_token for p in top]
            assert [t.logprob for t in item.top_logprobs] == pytest.approx([p.logprob for p in top],
                                                                           abs=SERVER_SLACK)
    finally:
        process.terminate()
        process.wait(60)
