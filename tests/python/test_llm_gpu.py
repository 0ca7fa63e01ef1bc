"""The LLM on a GPU (skipped without one): a tiny Llama-3-shaped checkpoint written by transformers
(scripts/checkpoints/make_checkpoint.py) carrying the tiny tokenizer, its vocabulary the tokenizer's.

What is asserted: the token ids equal the C++ runtime's for the same requests (decode_loop's parity dump), the
text equals tokenizer.decode of the ids, streaming yields exactly the final tokens in order, stop strings and
stop ids end a request where they say, sampling is reproducible by seed, and 1,000 requests submitted at once
from several threads each complete once with the tokens they get alone.
"""

import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

import baton
from baton import errors, llm as llm_module

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _gpu_count() -> int:
    try:
        return llm_module._native().device_count()
    except errors.BatonError:
        return 0


pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU visible")

OPTIONS = dict(max_batch=8, max_tokens_per_step=64, max_requests=1024, gemm="gemv")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "scripts" / "checkpoints"))
    import make_checkpoint
    import tiny_tokenizer

    directory = tmp_path_factory.mktemp("tiny-llama3-text")
    tokenizer_dir = tiny_tokenizer.write(directory / "tokenizer", "byte-level")
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    config = dict(make_checkpoint.PRESETS["tiny-llama3"].config)
    config["vocab_size"] = (len(vocab) + 7) // 8 * 8  # Baton serves vocabularies of multiples of 8
    config["bos_token_id"] = vocab[tiny_tokenizer.BOS]
    config["eos_token_id"] = vocab[tiny_tokenizer.EOT]
    (directory / "config.in.json").write_text(json.dumps(config))
    model = directory / "model"
    make_checkpoint.make_checkpoint(str(model), config_file=str(directory / "config.in.json"), seed=7,
                                    dtype=make_checkpoint.PRESETS["tiny-llama3"].dtype)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).write_bytes((tokenizer_dir / name).read_bytes())
    return model


@pytest.fixture(scope="module")
def llm(checkpoint):
    with baton.LLM(checkpoint, **OPTIONS) as served:
        yield served


def random_prompts(rng, llm, count, low=1, high=80):
    vocab = llm.info["vocab_size"]
    return [[rng.randrange(vocab) for _ in range(rng.randint(low, high))] for _ in range(count)]


def test_tokens_equal_the_cpp_runtime_for_the_same_requests(checkpoint, tmp_path):
    binary = pathlib.Path(os.environ.get("BATON_BUILD_DIR", ROOT / "build")) / "bin" / "decode_loop"
    if not binary.exists():
        pytest.skip(f"{binary} not built (BATON_BUILD_DIR names the C++ build)")
    prefix = tmp_path / "dump"
    # The dump needs every sequence to end in the same step: the budget reads all four prompts at once.
    ran = subprocess.run([str(binary), f"--checkpoint={checkpoint}", "--batches=4", "--engines=host,conditional",
                          "--prompt_tokens=37", "--new_tokens=24", "--requests_per_slot=1", "--repeats=1",
                          "--max_tokens_per_step=256", "--gemm=gemv", f"--parity_out={prefix}"],
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    dump = json.loads(prefix.with_suffix(".json").read_text())
    (run,) = [r for r in dump["runs"] if r["driver"] == "conditional"]
    sequences = sorted(run["sequences"], key=lambda s: s["entry"])
    with baton.LLM(checkpoint, **dict(OPTIONS, max_batch=4, max_tokens_per_step=256)) as served:
        outputs = served.generate([s["prompt"] for s in sequences],
                                  baton.SamplingParams(max_tokens=24, ignore_eos=True))
    for sequence, output in zip(sequences, outputs):
        assert output.token_ids == sequence["generated"], f"entry {sequence['entry']}"
        assert output.finish_reason == "length"


def test_text_is_the_tokenizers_decode_of_the_ids(llm, rng):
    prompts = ["the quick brown fox", "GPUs decode tokens", "héllo wörld, 你好"]
    outputs = llm.generate(prompts, baton.SamplingParams(max_tokens=40, ignore_eos=True))
    for prompt, output in zip(prompts, outputs):
        assert output.prompt_token_ids == llm.tokenizer.encode(prompt)
        assert len(output.token_ids) == 40
        assert output.text == llm.tokenizer.decode(output.token_ids)


def test_streaming_yields_exactly_the_final_tokens_in_order(llm, rng):
    prompt = random_prompts(rng, llm, 1, 100, 200)[0]  # read in several chunks
    sampling = baton.SamplingParams(max_tokens=64, ignore_eos=True)
    deltas = list(llm.stream(prompt, sampling))
    streamed = [t for d in deltas for t in d.token_ids]
    assert deltas[-1].finished and all(not d.finished for d in deltas[:-1])
    assert len(deltas) > 2  # tokens arrived as steps ended, not all at the end
    final = llm.generate([prompt], sampling)[0]
    assert streamed == final.token_ids
    assert "".join(d.text for d in deltas) == final.text


def test_stop_ids_and_stop_strings_end_the_request_where_they_say(llm, rng):
    prompt = random_prompts(rng, llm, 1)[0]
    free = llm.generate([prompt], baton.SamplingParams(max_tokens=48, ignore_eos=True))[0]
    stop_id = free.token_ids[20]
    first = free.token_ids.index(stop_id)
    stopped = llm.generate([prompt], baton.SamplingParams(max_tokens=48, ignore_eos=True,
                                                          stop_token_ids=[stop_id]))[0]
    assert stopped.token_ids == free.token_ids[:first + 1] and stopped.finish_reason == "stop"
    text = free.text
    if len(text) < 12:
        pytest.skip(f"seed gave only {len(text)} characters of text")
    stop = text[5:9]
    by_string = llm.generate([prompt], baton.SamplingParams(max_tokens=48, ignore_eos=True, stop=stop))[0]
    assert by_string.text == text[:text.index(stop)] and by_string.finish_reason == "stop"


def test_sampling_is_reproducible_by_seed(llm, rng):
    prompt = random_prompts(rng, llm, 1)[0]
    one = baton.SamplingParams(max_tokens=32, temperature=0.9, top_p=0.9, seed=11, ignore_eos=True)
    a, b = (llm.generate([prompt], one)[0] for _ in range(2))
    other = llm.generate([prompt], baton.SamplingParams(max_tokens=32, temperature=0.9, top_p=0.9, seed=12,
                                                         ignore_eos=True))[0]
    assert a.token_ids == b.token_ids
    assert a.token_ids != other.token_ids


def test_a_thousand_concurrent_requests_each_complete_once_with_their_own_tokens(checkpoint, rng):
    # Steps of at most max_batch rows (prompts read a token per step) run Baton's GEMV for every row, so a
    # request's tokens do not depend on what else its steps hold (README, "Tokens and chunking").
    llm = baton.LLM(checkpoint, **dict(OPTIONS, max_tokens_per_step=8, max_chunk_tokens=1))
    prompts = random_prompts(rng, llm, 1000, 1, 40)
    lengths = [rng.randint(1, 24) for _ in prompts]
    results = [None] * len(prompts)
    barrier = threading.Barrier(4)

    def client(indices):
        barrier.wait()
        requests = [(i, llm.submit(prompts[i], baton.SamplingParams(max_tokens=lengths[i], ignore_eos=True)))
                    for i in indices]
        for i, request in requests:
            results[i] = request.result()

    threads = [threading.Thread(target=client, args=(range(k, len(prompts), 4),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = llm.stats()
    assert stats["submitted"] == stats["completed"] == 1000
    assert all(len(r.token_ids) == n for r, n in zip(results, lengths))
    for i in rng.sample(range(len(prompts)), 12):  # a sample, run alone, gives the same tokens
        alone = llm.generate([prompts[i]], baton.SamplingParams(max_tokens=lengths[i], ignore_eos=True))[0]
        assert alone.token_ids == results[i].token_ids, f"request {i}"
    llm.close()


def test_bad_requests_are_refused_and_lose_nothing(llm, rng):
    vocab = llm.info["vocab_size"]
    with pytest.raises(errors.InvalidArgumentError) as caught:
        llm.submit([vocab + 3])
    assert str(vocab + 3) in str(caught.value)
    with pytest.raises(errors.InvalidArgumentError):
        llm.submit([1] * (llm.info["max_context"] + 1))
    with pytest.raises(errors.InvalidArgumentError):
        llm.submit([])
    ok = llm.generate([[1, 2, 3]], baton.SamplingParams(max_tokens=4, ignore_eos=True))[0]
    assert len(ok.token_ids) == 4


def test_the_command_line_streams_what_generate_returns(checkpoint, llm, capsys):
    from baton import cli

    prompt = "the quick brown fox"
    expected = llm.generate([prompt], baton.SamplingParams(max_tokens=12))[0]
    assert cli.main(["generate", "--model", str(checkpoint), "--prompt", prompt, "--max-tokens", "12",
                     "--max-batch", "8", "--max-tokens-per-step", "64", "--gemm", "gemv"]) == 0
    captured = capsys.readouterr()
    assert captured.out == expected.text + "\n"
    assert f"{len(expected.token_ids)} tokens, {expected.finish_reason}" in captured.err


def test_the_readme_quick_start_runs_as_written(checkpoint, capsys):
    # README.md's Python block, with only the model directory replaced, so that the quick start cannot rot.
    import re

    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert '"/models/Llama-3.2-1B-Instruct"' in block
    scope = {}
    exec(compile(block.replace('"/models/Llama-3.2-1B-Instruct"', repr(str(checkpoint))), "README.md", "exec"),
         scope)
    printed = capsys.readouterr().out
    scope["llm"].close()
    with baton.LLM(checkpoint) as same:  # the snippet's options: the same greedy text
        expected = same.generate("The capital of France is", baton.SamplingParams(max_tokens=32))[0].text
    assert printed == expected + "\n"


def test_a_stop_string_or_a_cancel_ends_the_generation_on_the_device(llm, rng):
    # Without the device-side cancel the two long requests below would run 3,000 steps each; with it each ends a
    # few steps after the host asked (a poll interval: tens of this tiny model's steps).
    prompt = random_prompts(rng, llm, 1)[0]
    reference = llm.generate([prompt], baton.SamplingParams(max_tokens=600, ignore_eos=True))[0]
    text = reference.text
    if len(text) < 12:
        pytest.skip(f"seed gave only {len(text)} characters of text")
    steps = llm.stats()["steps"]
    long = baton.SamplingParams(max_tokens=3000, ignore_eos=True)
    stopped = llm.generate([prompt], baton.SamplingParams(max_tokens=3000, ignore_eos=True, stop=text[8:12]))[0]
    assert stopped.finish_reason == "stop" and stopped.text == text[:text.index(text[8:12])]
    request = llm.submit(prompt, long)
    for _ in request:
        if len(request.token_ids) >= 5:
            request.cancel()
    assert request.result().finish_reason == "cancelled"
    assert 5 <= len(request.token_ids) < 600
    assert request.token_ids == reference.token_ids[:len(request.token_ids)]
    while llm._server.pending():  # the device's end of both requests
        llm.wait()
    assert llm.stats()["steps"] - steps < 1500, llm.stats()
    # The entries are reused: a request after the cancels generates as before.
    again = llm.generate([prompt], baton.SamplingParams(max_tokens=24, ignore_eos=True))[0]
    assert again.token_ids == reference.token_ids[:24]
