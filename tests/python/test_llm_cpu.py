"""The LLM's CPU-side behaviour: importing without a GPU, option checks and their messages, error classes.

These need the native module (pip install . builds it) but no GPU: every check named here runs before any GPU
work, in the same code the GPU path runs (baton._baton.validate_options is Server.create's first step).
"""

import pytest

import baton
from baton import errors, llm as llm_module

GOOD = dict(max_batch=8, max_context=0, max_tokens_per_step=64, max_tokens_without_decodes=2048,
            max_chunk_tokens=0, max_requests=64,
            dtype="auto", gemm="auto", engine="conditional", stream_window=256)


@pytest.fixture(scope="module")
def native():
    return llm_module._native()


def make(directory, **changes):
    options = dict(GOOD)
    options.update(changes)
    return baton.LLM(directory, **options)


def test_import_needs_no_gpu_and_exports_the_api():
    for name in ("LLM", "SamplingParams", "Request", "RequestOutput", "StreamDelta", "BatonError"):
        assert hasattr(baton, name)


@pytest.mark.parametrize("changes, words", [
    (dict(max_batch=0), ["max_batch is 0"]),
    (dict(max_batch=8, max_tokens_per_step=4), ["max_tokens_per_step", "4"]),
    (dict(max_tokens_without_decodes=70000), ["max_tokens_without_decodes is 70000", "65536"]),
    (dict(stream_window=3), ["stream_window", "3"]),
    (dict(max_logprobs=21), ["max_logprobs", "21"]),
    (dict(max_requests=0), ["max_requests"]),
    (dict(engine="tail"), ["engine 'tail'", "'tail-launch'"]),
    (dict(gemm="cublas"), ["gemm 'cublas'", "'cublaslt'"]),
    (dict(dtype="fp8"), ["dtype 'fp8'", "'bfloat16'"]),
    (dict(max_batch=-1), ["max_batch", "-1"]),
    (dict(max_context=True), ["max_context", "True"]),
    (dict(tensor_parallel_size=0), ["tensor_parallel_size is 0", "use 1 (one GPU) to 8"]),
    (dict(tensor_parallel_size=9), ["tensor_parallel_size is 9", "use 1 (one GPU) to 8"]),
    (dict(tensor_parallel_size=True), ["tensor_parallel_size", "True"]),
])
def test_bad_options_are_refused_naming_the_option(tmp_path, changes, words):
    with pytest.raises(errors.InvalidArgumentError) as caught:
        make(tmp_path, **changes)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert isinstance(caught.value, ValueError)  # what a Python user catches for a bad value


def test_missing_model_directory_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError) as caught:
        make(tmp_path / "nowhere")
    assert "nowhere" in str(caught.value) and isinstance(caught.value, FileNotFoundError)


def test_status_codes_map_to_their_classes(native):
    # The translator raises the class errors.py registers for each absl::StatusCode.
    with pytest.raises(errors.InvalidArgumentError):
        native.validate_options(checkpoint="", **dict(GOOD, max_batch=0))
    assert errors._BY_CODE[8] is errors.ResourceExhaustedError
    assert errors._BY_CODE[5] is errors.NotFoundError


def test_without_a_gpu_making_an_llm_says_so(tmp_path, native):
    if native.device_count() > 0:
        pytest.skip("a GPU is visible: tests/python/test_llm_gpu.py covers this machine")
    with pytest.raises(errors.NoGPUError) as caught:
        make(tmp_path)
    assert "no CUDA GPU" in str(caught.value)


def test_the_command_line_refuses_bad_input_with_a_message(tmp_path, capsys):
    from baton import cli

    assert cli.main(["generate", "--model", str(tmp_path), "--prompt", "x", "--max-batch", "0"]) == 2
    assert "max_batch is 0" in capsys.readouterr().err
    assert cli.main(["generate", "--model", str(tmp_path), "--prompt", "x", "--top-p", "2"]) == 2
    assert "top_p" in capsys.readouterr().err


def test_trace_lengths_and_arrivals_follow_their_distributions():
    from baton import bench

    fixed = bench.make_trace(400, 10.0, "fixed", vocab=1000, seed=3)
    assert {len(r.prompt) for r in fixed} <= set(bench.FIXED_PROMPTS)
    assert {r.output_tokens for r in fixed} <= set(bench.FIXED_OUTPUTS)
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(fixed, fixed[1:])]
    assert all(g >= 0 for g in gaps)
    mean = sum(gaps) / len(gaps)
    assert 0.08 < mean < 0.12, mean  # exponential gaps of mean 1/rate (399 of them: within ~15%)
    assert all(0 <= t < 1000 for r in fixed for t in r.prompt)
    burst = bench.make_trace(50, float("inf"), "longtail", vocab=1000, seed=3)
    assert all(r.arrival_s == 0 for r in burst)
    assert all(16 <= len(r.prompt) <= 4000 and 8 <= r.output_tokens <= 1024 for r in burst)
    assert bench.make_trace(50, 2.0, "longtail", 1000, 5)[7].prompt == bench.make_trace(50, 2.0, "longtail",
                                                                                       1000, 5)[7].prompt


def test_summary_percentiles_from_known_timings():
    from baton import bench

    timings = [bench.Timing(arrival_s=0.0, first_s=0.010 * (i + 1), end_s=0.010 * (i + 1) + 0.001 * 9, tokens=10)
               for i in range(100)]
    row = bench.summarize("x", 4.0, timings)
    assert row["ttft_p50_ms"] == pytest.approx(505.0)
    assert row["ttft_p99_ms"] == pytest.approx(990.1)
    assert row["tpot_p50_ms"] == pytest.approx(1.0)
    assert row["output_tokens_per_s"] == pytest.approx(1000 / 1.009)
    assert set(row) == set(bench.ROW_KEYS)


def test_defaults_and_limits_are_the_native_modules(native):
    # The package restates no default or limit: LLM's options, SamplingParams' checks and MAX_STOP_TOKENS are
    # the C++ library's (ServerOptions{}, kMaxStopTokens, kDecoderMaxVocab).
    import inspect

    from baton import sampling

    options = [p for p in inspect.signature(baton.LLM.__init__).parameters
               if p not in ("self", "model", "load_progress")]
    defaults = llm_module.defaults()
    assert sorted(options) == sorted(defaults), (options, defaults)
    assert all(inspect.signature(baton.LLM.__init__).parameters[p].default is None for p in options)
    limits = native.limits()
    assert baton.MAX_STOP_TOKENS == limits["max_stop_tokens"] == sampling.MAX_STOP_TOKENS
    assert sampling.MAX_LOGPROBS == limits["max_logprobs"] == defaults["max_logprobs"]
    with pytest.raises(ValueError) as caught:
        baton.SamplingParams(top_k=limits["max_vocab"] + 1)
    assert str(limits["max_vocab"]) in str(caught.value)
    baton.SamplingParams(top_k=limits["max_vocab"], stop_token_ids=list(range(limits["max_stop_tokens"])))


def test_tensor_parallel_size_reaches_the_native_server(monkeypatch, tmp_path):
    # The package passes vLLM's argument through as the C++ ServerOptions::tensor_parallel_size, whose checks
    # (range above; more ranks than GPUs, on the GPU) are the library's; unset, the server's default (1).
    import fake_native
    import tiny_tokenizer

    directory = tiny_tokenizer.write(tmp_path / "model", "byte-level")
    fake = fake_native.FakeNative(llm_module._native())
    monkeypatch.setattr(llm_module, "_native", lambda: fake)
    with baton.LLM(directory, tensor_parallel_size=2, load_progress=False):
        pass
    with baton.LLM(directory, load_progress=False):
        pass
    assert [c["tensor_parallel_size"] for c in fake.created] == [2, llm_module.defaults()["tensor_parallel_size"]]
    assert llm_module.defaults()["tensor_parallel_size"] == 1
