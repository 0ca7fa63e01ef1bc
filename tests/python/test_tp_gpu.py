"""The LLM split across GPUs (tensor_parallel_size; skipped below 2 GPUs): a tiny Llama-3-shaped checkpoint written
by transformers with 4 key/value heads (so it splits 2 and 4 ways), served with tensor_parallel_size 2 (and 4 where
4 GPUs are visible) from this one process, the ranks' device schedulers in lockstep.

What is asserted: every greedy token follows transformers' float32 model teacher-forced on the same prefix under
the project's near-tie rule (the token's reference logprob within TIE_TOL["bf16"] x max|logit| of the best: the
ranks' partial sums are rounded to bf16 before they are added, so a split model's logits differ from one GPU's by
that rounding and its tokens may differ at near-ties, not elsewhere); a stream gives what generate gives for the same
prompt alone; more ranks
than GPUs is refused naming both, before anything loads.
"""

import json
import pathlib
import sys

import pytest

import baton
from baton import errors
from test_llm_gpu import OPTIONS, _gpu_count

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(_gpu_count() < 2, reason="multi-GPU: tensor parallelism needs 2 GPUs")


@pytest.fixture(scope="module")
def split_checkpoint(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "scripts" / "checkpoints"))
    import make_checkpoint

    directory = tmp_path_factory.mktemp("tiny-llama3-kv4")
    config = dict(make_checkpoint.PRESETS["tiny-llama3"].config)
    config["num_attention_heads"] = 4
    config["num_key_value_heads"] = 4  # splits 2 and 4 ways
    (directory / "config.in.json").write_text(json.dumps(config))
    model = directory / "model"
    make_checkpoint.make_checkpoint(str(model), config_file=str(directory / "config.in.json"), seed=11,
                                    dtype=make_checkpoint.PRESETS["tiny-llama3"].dtype)
    return model


def test_split_tokens_follow_transformers_under_the_near_tie_rule(split_checkpoint, rng):
    import torch
    import transformers
    from parity_compare import TIE_TOL

    reference = transformers.AutoModelForCausalLM.from_pretrained(split_checkpoint, dtype=torch.float32).cuda().eval()
    vocab = reference.config.vocab_size
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(1, 60))] for _ in range(8)]
    sizes = [2, 4] if _gpu_count() >= 4 else [2]
    for size in sizes:
        with baton.LLM(split_checkpoint, **OPTIONS, tensor_parallel_size=size) as llm:
            outputs = llm.generate(prompts, baton.SamplingParams(max_tokens=16, ignore_eos=True))
            alone = llm.generate([prompts[0]], baton.SamplingParams(max_tokens=16, ignore_eos=True))
            streamed = list(llm.stream(prompts[0], baton.SamplingParams(max_tokens=16, ignore_eos=True)))
        ties = checked = 0
        for prompt, output in zip(prompts, outputs):
            tokens = output.outputs[0].token_ids
            assert len(tokens) == 16
            ids = torch.tensor([list(prompt) + list(tokens)], device="cuda")
            with torch.no_grad():
                logits = reference(ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)].double()
            rows = torch.log_softmax(logits, dim=-1).cpu()
            scales = logits.abs().max(dim=-1).values.cpu()
            for g, token in enumerate(tokens):
                gap = float(rows[g].max() - rows[g][token])
                assert gap <= TIE_TOL["bf16"] * float(scales[g]), \
                    f"TP{size}, prompt {prompt[:8]}..., token {g}: {token} is {gap:.3g} below the best"
                ties += gap > 0
                checked += 1
        assert [t for d in streamed for t in d.token_ids] == alone[0].outputs[0].token_ids
        print(f"TP{size}: {checked} tokens follow transformers; {ties} near-ties")


def test_more_ranks_than_gpus_is_refused_naming_both(split_checkpoint):
    count = _gpu_count()
    if count >= 8:
        pytest.skip("every rank count up to the most fits")
    with pytest.raises(errors.BatonError) as caught:
        baton.LLM(split_checkpoint, **OPTIONS, tensor_parallel_size=count + 1)
    message = str(caught.value)
    assert f"tensor_parallel_size is {count + 1}" in message and f"{count} GPU(s) are visible" in message, message
