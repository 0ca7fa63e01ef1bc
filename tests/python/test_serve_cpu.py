"""The HTTP server without a GPU: the real LLM, AsyncLLM and FastAPI app over the fake native server of
fake_native.py (its tokens follow a rule the tests compute), under uvicorn on 127.0.0.1, driven by the official
openai client and by httpx for what the client hides (raw errors, disconnects, headers).

What is asserted: the text and usage of completions and chat (streamed or not) equal the rule's tokens decoded
by the checkpoint's tokenizer; n completions come back indexed; stop strings and stop ids end where they say;
every bad request gets OpenAI's error object with the status, the field and the limit; a full request table
answers 503 with Retry-After and loses nothing; a client leaving mid-stream cancels its request and its pages
return; /metrics counts what was served.
"""

import json

import httpx
import openai
import pytest

import baton
import fake_native
import serve_support
from baton import llm as llm_module
from baton.async_llm import AsyncLLM
from baton.serving import protocol
from baton.serving.app import build_app
from serve_support import assert_error, stream_completion

import tiny_tokenizer


@pytest.fixture
def served(monkeypatch, tmp_path):
    """(base URL, the fake native server, the LLM) with max_requests=8, 4 in a batch."""
    directory = tiny_tokenizer.write(tmp_path / "model", "byte-level")
    fake = fake_native.FakeNative(llm_module._native(), max_batch=4)
    monkeypatch.setattr(llm_module, "_native", lambda: fake)
    llm = baton.LLM(directory, max_requests=8, load_progress=False)
    app = build_app(AsyncLLM(llm), "tiny", model_path=str(directory), api_key=None, max_body_bytes=4096)
    server = serve_support.ThreadServer(app)
    yield server.url, fake.servers[0], llm
    server.stop()
    app.state.engine.close()


def expected(llm, prompt_ids, max_tokens, temperature=0.0, seed=0, sequence=0, ignore_eos=False):
    """The fake model's tokens: up to max_tokens, or to its end-of-sequence token (kept) unless ignore_eos."""
    tokens = []
    for k in range(max_tokens):
        tokens.append(fake_native.rule(prompt_ids, k, temperature, seed, sequence))
        if tokens[-1] in llm.info["eos_token_ids"] and not ignore_eos:
            break
    return tokens


def client_of(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_completion_text_and_usage_are_the_tokens_decoded(served, rng):
    url, fake, llm = served
    prompt = [rng.randrange(8, 500) for _ in range(rng.randint(1, 40))]
    out = client_of(url).completions.create(model="tiny", prompt=prompt, max_tokens=9, temperature=0)
    tokens = expected(llm, prompt, 9)
    assert out.choices[0].text == llm.tokenizer.decode(tokens)
    assert out.choices[0].finish_reason == ("length" if len(tokens) == 9 else "stop") and out.choices[0].index == 0
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == \
        (len(prompt), len(tokens), len(prompt) + len(tokens))
    assert out.object == "text_completion" and out.model == "tiny" and out.id.startswith("cmpl-")


def test_streamed_completion_equals_the_whole_one_and_ends_with_usage_then_done(served, rng):
    url, fake, llm = served
    prompt = "Baton keeps the decode loop on the GPU"
    with httpx.Client(base_url=url) as client:
        whole = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 12, "temperature": 0}).json()
        chunks = stream_completion(client, "/v1/completions", {
            "prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}})
    assert chunks[-1] == "[DONE]"
    usage_chunk = chunks[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 12
    text_chunks = chunks[:-2]
    assert all(c["usage"] is None for c in text_chunks)
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in text_chunks][-1] == "length"
    ids = llm.encode(prompt)
    assert whole["choices"][0]["text"] == llm.tokenizer.decode(expected(llm, ids, 12))


def test_chat_reads_the_messages_through_the_chat_template(served):
    url, fake, llm = served
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Où est la gare?"},
                {"role": "assistant", "content": "Là."}, {"role": "user", "content": [
                    {"type": "text", "text": "Et "}, {"type": "text", "text": "après?"}]}]
    rendered = [dict(m, content=m["content"] if isinstance(m["content"], str) else "Et après?") for m in messages]
    ids = llm.tokenizer.encode(llm.tokenizer.apply_chat_template(rendered), add_special_tokens=False)
    client = client_of(url)
    out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0)
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == llm.tokenizer.decode(expected(llm, ids, 6))
    assert out.usage.prompt_tokens == len(ids)
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == out.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 6


def test_n_completions_come_back_indexed_each_its_own_sampling_stream(served):
    url, fake, llm = served
    prompt = [11, 12, 13]
    out = client_of(url).completions.create(model="tiny", prompt=prompt, max_tokens=5, temperature=0.8, seed=42,
                                            n=3)
    assert [c.index for c in out.choices] == [0, 1, 2]
    texts = [llm.tokenizer.decode(expected(llm, prompt, 5, 0.8, 42, 42 + i)) for i in range(3)]
    assert [c.text for c in out.choices] == texts and len(set(texts)) == 3
    assert out.usage.completion_tokens == 15


def test_several_prompts_are_choices_in_prompt_order(served):
    url, fake, llm = served
    prompts = [[20, 21], [30], [40, 41, 42]]
    out = client_of(url).completions.create(model="tiny", prompt=prompts, max_tokens=4, temperature=0, n=2)
    assert [c.index for c in out.choices] == list(range(6))
    for c in out.choices:
        assert c.text == llm.tokenizer.decode(expected(llm, prompts[c.index // 2], 4))


def test_stop_string_and_stop_token_end_the_completion(served):
    url, fake, llm = served
    prompt = [50, 60, 70]
    tokens = expected(llm, prompt, 20)
    full = llm.tokenizer.decode(tokens)
    client = client_of(url)
    cut = next(i for i in range(3, len(full)) if full[i].strip())  # a visible character to stop at
    out = client.completions.create(model="tiny", prompt=prompt, max_tokens=20, temperature=0, stop=[full[cut:cut + 2]])
    assert out.choices[0].finish_reason == "stop" and out.choices[0].text == full[:full.index(full[cut:cut + 2])]
    out = client.completions.create(model="tiny", prompt=prompt, max_tokens=20, temperature=0,
                                    extra_body={"stop_token_ids": [tokens[4]]})
    k = tokens.index(tokens[4])
    assert out.choices[0].finish_reason == "stop" and out.usage.completion_tokens == k + 1


@pytest.mark.parametrize("body, status, words, param", [
    ({"prompt": "x", "temperature": "hot"}, 400, ["temperature", "hot"], "temperature"),
    ({"prompt": "x", "max_tokens": 0}, 400, ["max_tokens", "at least 1"], "max_tokens"),
    ({"prompt": "x", "top_p": 0}, 400, ["top_p", "(0, 1]"], "top_p"),
    ({"prompt": "x", "n": 65}, 400, ["n", "[1, 64]"], "n"),
    ({"prompt": "x", "seed": -3}, 400, ["seed"], "seed"),
    ({"prompt": "x", "stop": [""]}, 400, ["stop"], "stop"),
    ({"prompt": "x", "presence_penalty": 2.5}, 400, ["presence_penalty", "[-2, 2]"], "presence_penalty"),
    ({"prompt": "x", "repetition_penalty": "1"}, 400, ["repetition_penalty", "number"], "repetition_penalty"),
    ({"prompt": "x", "min_tokens": 20}, 400, ["min_tokens", "max_tokens (16)"], "min_tokens"),
    ({"prompt": "x", "min_p": 0.2}, 400, ["min_p", "does not compute"], "min_p"),
    ({"prompt": "x", "logprobs": 21}, 400, ["logprobs", "[0, 20]"], "logprobs"),
    ({"prompt": "x", "colour": 1}, 400, ["unknown field 'colour'", "max_tokens"], "colour"),
    ({"prompt": []}, 400, ["prompt"], "prompt"),
    ({"prompt": [1, True]}, 400, ["prompt"], "prompt"),
    ({"prompt": [600]}, 400, ["token id 600", "512"], "prompt"),
    ({"max_tokens": 3}, 400, ["'prompt' is missing"], "prompt"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, ["only allowed when 'stream'"],
     "stream_options"),
    ({"prompt": "x", "model": "gpt-4"}, 404, ["'gpt-4' does not exist", "tiny"], "model"),
    ({"prompt": [5] * 250, "max_tokens": 10}, 400, ["250 tokens", "max_tokens (10)", "context (256"],
     "max_tokens"),
    ({"prompt": [5] * 256}, 400, ["256 tokens", "shorten"], "prompt"),
    ([1, 2], 400, ["JSON list", "object"], None),
])
def test_bad_completion_requests_get_the_error_object(served, body, status, words, param):
    url, fake, llm = served
    assert_error(httpx.post(url + "/v1/completions", json=body), status, *words, param=param)
    assert fake.submitted == 0  # refused before anything reached the device


@pytest.mark.parametrize("body, words, param", [
    ({"messages": []}, ["messages"], "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, ["messages[0].role", "wizard"], "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, ["text"], "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, ["tools"], "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "max_completion_tokens": 2}, ["not both"],
     "max_tokens"),
])
def test_bad_chat_requests_get_the_error_object(served, body, words, param):
    url, fake, llm = served
    assert_error(httpx.post(url + "/v1/chat/completions", json=body), 400, *words, param=param)


def test_malformed_json_oversized_bodies_and_unknown_routes(served):
    url, fake, llm = served
    assert_error(httpx.post(url + "/v1/completions", content=b"{\"prompt\": ", headers={
        "content-type": "application/json"}), 400, "not valid JSON")
    assert_error(httpx.post(url + "/v1/completions", json={"prompt": "x" * 5000}), 413, "4096",
                 "--max-body-bytes")
    assert_error(httpx.get(url + "/v1/engines"), 404, "/v1/completions")
    assert_error(httpx.get(url + "/v1/completions"), 405)


def test_full_request_table_answers_503_with_retry_after_and_loses_nothing(served):
    url, fake, llm = served
    with httpx.Client(base_url=url, timeout=60) as client:
        streams = [client.stream("POST", "/v1/completions", json={
            "prompt": [100 + i], "max_tokens": 120, "temperature": 0, "stream": True, "ignore_eos": True})
            for i in range(8)]
        responses = [s.__enter__() for s in streams]
        refused = client.post("/v1/completions", json={"prompt": [7], "max_tokens": 2})
        assert_error(refused, 503, "request limit", "retry")
        assert refused.headers["retry-after"] == "1"
        for i, (s, r) in enumerate(zip(streams, responses)):
            chunks = list(serve_support.events(r))
            s.__exit__(None, None, None)
            text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
            assert text == llm.tokenizer.decode(expected(llm, [100 + i], 120, ignore_eos=True))
        ok = client.post("/v1/completions", json={"prompt": [7], "max_tokens": 2})
        assert ok.status_code == 200


def test_a_client_leaving_mid_stream_cancels_its_request_and_frees_its_pages(served):
    url, fake, llm = served
    with httpx.Client(base_url=url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json={"prompt": [9, 9], "max_tokens": 200,
                                                            "temperature": 0, "stream": True}) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: "))
        # The connection is closed: the server must cancel the request on the device.
        deadline = __import__("time").monotonic() + 10
        while (fake.live or not fake.cancelled) and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.01)
    assert fake.cancelled and not fake.live
    assert fake.free_pages() == fake.pool_pages
    assert 'baton:request_success_total{finished_reason="abort",model_name="tiny"} 1.0' in \
        httpx.get(url + "/metrics").text


def test_a_client_leaving_a_whole_response_cancels_its_request(served):
    url, fake, llm = served
    import time

    fake.step_s = 0.005  # 240 steps: over a second
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json={"prompt": [8], "max_tokens": 240, "ignore_eos": True,
                                                  "n": 2}, timeout=0.05)
    deadline = time.monotonic() + 10
    while fake.live and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fake.cancelled) == 2 and not fake.live and fake.free_pages() == fake.pool_pages


def test_api_key_is_required_on_v1_when_set(monkeypatch, tmp_path):
    directory = tiny_tokenizer.write(tmp_path / "model", "byte-level")
    fake = fake_native.FakeNative(llm_module._native())
    monkeypatch.setattr(llm_module, "_native", lambda: fake)
    engine = AsyncLLM(baton.LLM(directory, max_requests=4, load_progress=False))
    server = serve_support.ThreadServer(build_app(engine, "tiny", api_key="s3cret"))
    try:
        assert_error(httpx.post(server.url + "/v1/completions", json={"prompt": "x"}), 401, "API key",
                     param=None)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
        models = openai.OpenAI(base_url=server.url + "/v1", api_key="s3cret").models.list()
        assert [m.id for m in models.data] == ["tiny"]
        assert httpx.get(server.url + "/health").status_code == 200  # not under /v1
    finally:
        server.stop()
        engine.close()


def test_metrics_count_what_was_served(served):
    url, fake, llm = served
    client = client_of(url)
    for k in range(3):
        client.completions.create(model="tiny", prompt=[k + 1], max_tokens=4, temperature=0)
    httpx.post(url + "/v1/completions", json={"prompt": "x", "top_p": 3})
    text = httpx.get(url + "/metrics").text
    assert 'baton:time_to_first_token_seconds_count{model_name="tiny"} 3.0' in text
    assert 'baton:generation_tokens_total{model_name="tiny"} 12.0' in text
    assert 'baton:request_success_total{finished_reason="length",model_name="tiny"} 3.0' in text
    assert 'baton:request_refused_total{model_name="tiny",status="400"} 1.0' in text
    assert f"baton:kv_cache_pages_free {float(fake.pool_pages)}" in text
    assert "baton:num_requests_running 0.0" in text and "baton:num_requests_waiting 0.0" in text


def test_offline_api_speaks_vllms_names(served):
    url, fake, llm = served
    outs = llm.generate([[1, 2], "Pack my box"], sampling_params=baton.SamplingParams(max_tokens=3, n=2,
                                                                                     temperature=0.5, seed=3))
    assert [len(o.outputs) for o in outs] == [2, 2]
    assert outs[1].prompt == "Pack my box" and outs[0].prompt is None
    for o in outs:
        assert [c.index for c in o.outputs] == [0, 1]
        assert o.text == o.outputs[0].text and o.token_ids == o.outputs[0].token_ids
        for c in o.outputs:
            assert c.token_ids == expected(llm, o.prompt_token_ids, 3, 0.5, 3, 3 + c.index)
            assert c.finish_reason == "length" and c.logprobs is None


def test_protocol_fits_max_tokens_the_client_did_not_give():
    parsed = protocol.parse_chat({"messages": [{"role": "user", "content": "hi"}]}, protocol.Defaults())
    assert parsed.sampling.max_tokens == 1024 and not parsed.max_tokens_given
    fitted = protocol.check_length(1000, parsed, 1200, 4096, "messages")
    assert fitted.max_tokens == 200
    pool = protocol.check_length(10, parsed, 8192, 512, "messages")
    assert pool.max_tokens == 502
    with pytest.raises(protocol.ApiError, match="KV pool"):
        protocol.check_length(600, parsed, 8192, 512, "messages")


def test_protocol_reads_the_checkpoints_generation_defaults():
    d = protocol.Defaults.from_generation_config({"temperature": 0.6, "top_p": 0.9, "do_sample": True})
    assert (d.temperature, d.top_p, d.top_k) == (0.6, 0.9, 0)
    assert protocol.Defaults.from_generation_config({"do_sample": False, "temperature": 0.6}).temperature == 0.0
    parsed = protocol.parse_completion({"prompt": "x", "top_k": -1}, d)
    assert (parsed.sampling.temperature, parsed.sampling.top_p, parsed.sampling.top_k) == (0.6, 0.9, 0)
    assert parsed.sampling.max_tokens == 16


def test_random_bodies_never_break_the_server(served, rng):
    """Random and malformed bodies: each gets a 200 or a 4xx error object, and the server stays whole."""
    url, fake, llm = served
    values = [None, True, -1, 0, 1, 3.5, "x", "", [], [1, 2], ["a"], {}, {"include_usage": True}, 1e308, 2 ** 70]
    fields = ["prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "stream",
              "stream_options", "echo", "model", "logprobs", "ignore_eos", "stop_token_ids", "bogus"]
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(300):
            body = {f: rng.choice(values) for f in rng.sample(fields, rng.randint(0, 6))}
            if rng.random() < 0.7:
                body["prompt"] = [rng.randrange(512) for _ in range(rng.randint(1, 5))]
            if rng.random() < 0.5 and isinstance(body.get("max_tokens"), int):
                body["max_tokens"] = min(max(body["max_tokens"], 1), 8)
            raw = json.dumps(body).encode()
            if rng.random() < 0.1:
                raw = raw[:rng.randrange(len(raw) + 1)]
            r = client.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
            assert r.status_code in (200, 400, 404), (body, r.status_code, r.text)
            if r.status_code != 200:
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}
            else:
                r.read()
        deadline = __import__("time").monotonic() + 10
        while fake.live and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.01)
        assert client.get("/health").status_code == 200
    assert not fake.live and fake.free_pages() == fake.pool_pages


def test_an_event_is_one_line_whatever_the_text_holds():
    text = "a\nb\rc\u2028d\u2029e\x85f\x1cg\x0bh\x0ci"
    event = protocol.sse(protocol.completion_object("cmpl-1", "tiny", [protocol.completion_choice(0, text, None)],
                                                    None, chunk=True)).decode()
    lines = event.splitlines()
    assert lines[0].startswith("data: ") and lines[1:] == [""] and event.endswith("\n\n")
    assert json.loads(lines[0][6:])["choices"][0]["text"] == text


def test_serve_command_refuses_clearly_without_a_gpu(tmp_path):
    import subprocess
    import sys

    if llm_module._native().device_count() > 0:
        pytest.skip("a GPU is visible: tests/python/test_serve_gpu.py starts the server")
    directory = tiny_tokenizer.write(tmp_path / "model", "byte-level")
    ran = subprocess.run([sys.executable, "-m", "baton", "serve", "--model", str(directory), "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and "no CUDA GPU is visible" in ran.stderr, ran.stderr
    usage = subprocess.run([sys.executable, "-m", "baton", "serve", "--help"], capture_output=True, text=True,
                           timeout=120)
    for flag in ("--host", "--port", "--api-key", "--max-requests", "--shutdown-timeout", "--max-body-bytes"):
        assert flag in usage.stdout


def test_streamed_chat_with_n_gives_each_choice_its_role_text_and_end(served):
    url, fake, llm = served
    messages = [{"role": "user", "content": "Say something."}]
    ids = llm.tokenizer.encode(llm.tokenizer.apply_chat_template(messages), add_special_tokens=False)
    with httpx.Client(base_url=url) as client:
        chunks = stream_completion(client, "/v1/chat/completions", {
            "messages": messages, "max_tokens": 7, "temperature": 0.9, "seed": 4, "n": 3, "stream": True,
            "stream_options": {"include_usage": True}})
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"]["completion_tokens"] == sum(
        len(expected(llm, ids, 7, 0.9, 4, 4 + i)) for i in range(3))
    by_choice = {i: [c["choices"][0] for c in chunks[:-2] if c["choices"][0]["index"] == i] for i in range(3)}
    for i, parts in by_choice.items():
        assert parts[0]["delta"] == {"role": "assistant", "content": ""}
        assert parts[-1]["delta"] == {} and parts[-1]["finish_reason"] in ("length", "stop")
        text = "".join(p["delta"].get("content", "") for p in parts)
        assert text == llm.tokenizer.decode(expected(llm, ids, 7, 0.9, 4, 4 + i))


def test_echo_puts_the_prompt_before_the_completion(served):
    url, fake, llm = served
    prompt = "Pack my box"
    body = {"prompt": prompt, "max_tokens": 5, "temperature": 0, "echo": True}
    whole = httpx.post(url + "/v1/completions", json=body).json()
    completion = llm.tokenizer.decode(expected(llm, llm.encode(prompt), 5))
    assert whole["choices"][0]["text"] == prompt + completion
    with httpx.Client(base_url=url) as client:
        chunks = stream_completion(client, "/v1/completions", dict(body, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == prompt + completion


def test_continuous_usage_stats_count_as_the_stream_goes(served):
    url, fake, llm = served
    with httpx.Client(base_url=url) as client:
        chunks = stream_completion(client, "/v1/completions", {
            "prompt": [3, 4], "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == 6 and all(c["usage"]["prompt_tokens"] == 2 for c in chunks[:-1])


def test_async_llm_generate_streams_one_prompt_and_refuses_n(served):
    import asyncio

    url, fake, llm = served
    engine = AsyncLLM(llm)

    async def main():
        deltas = [d async for d in engine.generate([21, 22], baton.SamplingParams(max_tokens=6, ignore_eos=True))]
        with pytest.raises(ValueError, match="n is 2"):
            async for _ in engine.generate([1], baton.SamplingParams(n=2)):
                pass
        return deltas

    deltas = asyncio.run(main())
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"
    assert [t for d in deltas for t in d.token_ids] == expected(llm, [21, 22], 6, ignore_eos=True)
    engine.stop()  # the served fixture's engine owns the LLM


def test_penalties_min_tokens_and_logprobs_reach_the_device_request(served):
    url, fake, llm = served
    body = {"prompt": [5, 6], "max_tokens": 8, "presence_penalty": 0.5, "frequency_penalty": -1.25,
            "repetition_penalty": 1.3, "min_tokens": 3, "n": 2, "seed": 9, "temperature": 0.7}
    assert httpx.post(url + "/v1/completions", json=body).status_code == 200
    assert [r[8:] for r in fake.last_submitted] == [(0.5, -1.25, pytest.approx(1.3), 3, -1)] * 2
    assert [r[6:8] for r in fake.last_submitted] == [(9, 9), (9, 10)]  # seed, sequence key seed + i
    assert httpx.post(url + "/v1/completions", json={"prompt": [5], "max_tokens": 4, "logprobs": 0}).status_code == 200
    assert [r[8:] for r in fake.last_submitted] == [(0.0, 0.0, 1.0, 0, 0)]  # off unless asked; logprobs 0 asked
