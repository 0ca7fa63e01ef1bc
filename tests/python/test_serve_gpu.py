"""The HTTP server on a GPU (skipped without one): `python -m baton serve` started as a user starts it, on
127.0.0.1, over the tiny checkpoint of test_llm_gpu.py, driven by the official openai client and httpx.

What is asserted: the server's tokens equal the in-process LLM's for the same requests (gemm="gemv": tokens
do not depend on the batch), streamed text equals the whole text, a seed reproduces its sample, stop strings
cut where they say; 1,000 concurrent streaming clients each complete exactly once with the text they get
alone; 10,000 random and malformed requests leave the server healthy with every KV page back in the pool; a
client leaving mid-stream gets its pages back; SIGTERM ends the process cleanly within its deadline.
"""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

import baton
from test_llm_gpu import OPTIONS, _gpu_count, checkpoint  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU visible")

ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")


def start_server(checkpoint, *extra):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    process = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--model", str(checkpoint), "--port", str(port),
         "--max-batch", str(OPTIONS["max_batch"]), "--max-tokens-per-step", str(OPTIONS["max_tokens_per_step"]),
         "--max-requests", str(OPTIONS["max_requests"]), "--gemm", OPTIONS["gemm"], *extra],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, process.stdout.read()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not answer /health in 120 s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def server(checkpoint):  # noqa: F811
    process, url = start_server(checkpoint)
    yield url
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, process.stdout.read()


@pytest.fixture(scope="module")
def local(checkpoint):  # noqa: F811
    with baton.LLM(checkpoint, **OPTIONS) as llm:
        yield llm


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def metric(url, name):
    text = httpx.get(url + "/metrics").text
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert match, (name, text[:2000])
    return float(match.group(1))


def longest(url, prompt_tokens):
    """The most tokens a request may ask for after a prompt (the served context)."""
    return httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"] - prompt_tokens


def pool_is_whole(url, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metric(url, "baton:kv_cache_pages_reserved") == 0 and metric(url, "baton:kv_cache_pages_used") == 0 \
                and metric(url, "baton:num_requests_running") == 0:
            return True
        time.sleep(0.05)
    return False


def test_server_tokens_equal_the_in_process_llms(server, local, rng):
    prompts = [[rng.randrange(8, local.info["vocab_size"]) for _ in range(rng.randint(1, 60))] for _ in range(6)]
    want = local.generate(prompts, baton.SamplingParams(max_tokens=20))
    out = client(server).completions.create(model="model", prompt=prompts, max_tokens=20, temperature=0)
    assert [c.text for c in out.choices] == [w.text for w in want]
    assert out.usage.completion_tokens == sum(len(w.token_ids) for w in want)
    stream = client(server).completions.create(model="model", prompt=prompts[0], max_tokens=20, temperature=0,
                                               stream=True)
    assert "".join(c.choices[0].text for c in stream) == want[0].text


def test_chat_stream_equals_chat_and_seed_reproduces(server, local):
    messages = [{"role": "user", "content": "Write about GPUs."}]
    c = client(server)
    whole = c.chat.completions.create(model="model", messages=messages, max_tokens=24, temperature=0)
    ids = local.tokenizer.encode(local.tokenizer.apply_chat_template(messages), add_special_tokens=False)
    assert whole.choices[0].message.content == local.generate([ids], baton.SamplingParams(max_tokens=24))[0].text
    streamed = c.chat.completions.create(model="model", messages=messages, max_tokens=24, temperature=0,
                                         stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == \
        whole.choices[0].message.content
    sampled = [c.chat.completions.create(model="model", messages=messages, max_tokens=24, temperature=1.0,
                                         seed=seed).choices[0].message.content for seed in (5, 5, 6)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    assert sampled[0] == local.generate([ids], baton.SamplingParams(max_tokens=24, temperature=1.0,
                                                                     seed=5))[0].text


def test_stop_string_cuts_the_text(server, local):
    want = local.generate([[40, 41, 42]], baton.SamplingParams(max_tokens=30, ignore_eos=True))[0].text
    stop = want[len(want) // 2:len(want) // 2 + 2]
    out = client(server).completions.create(model="model", prompt=[40, 41, 42], max_tokens=30, temperature=0,
                                            stop=[stop], extra_body={"ignore_eos": True})
    assert out.choices[0].finish_reason == "stop" and out.choices[0].text == want[:want.index(stop)]


def test_1000_concurrent_streaming_clients_each_complete_once_as_alone(checkpoint, rng):  # noqa: F811
    # Steps of at most max_batch rows (a prompt token per step) run Baton's GEMV for every row, so a
    # request's tokens do not depend on what else its steps hold (README, "Tokens and chunking").
    process, server = start_server(checkpoint, "--max-tokens-per-step", "8", "--max-chunk-tokens", "1")
    with baton.LLM(checkpoint, **dict(OPTIONS, max_tokens_per_step=8, max_chunk_tokens=1)) as local:
        prompts = [[rng.randrange(8, local.info["vocab_size"]) for _ in range(rng.randint(1, 40))]
                   for _ in range(1000)]
        lengths = [rng.randint(1, 24) for _ in prompts]
        picked = rng.sample(range(len(prompts)), 40)
        want = {i: local.generate([prompts[i]], baton.SamplingParams(max_tokens=lengths[i], ignore_eos=True))[0]
                .text for i in picked}

    async def main():
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=server, timeout=300, limits=limits) as http:
            async def one(i):
                text, reasons, done = [], [], 0
                async with http.stream("POST", "/v1/completions", json={
                        "prompt": prompts[i], "max_tokens": lengths[i], "temperature": 0, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True}}) as r:
                    assert r.status_code == 200, await r.aread()
                    async for line in r.aiter_lines():
                        if line == "data: [DONE]":
                            done += 1
                        elif line.startswith("data: "):
                            chunk = json.loads(line[6:])
                            for choice in chunk["choices"]:
                                text.append(choice["text"])
                                if choice["finish_reason"]:
                                    reasons.append(choice["finish_reason"])
                            usage = chunk.get("usage") or None
                return "".join(text), reasons, done, usage

            return await asyncio.gather(*(one(i) for i in range(len(prompts))))

    try:
        results = asyncio.run(main())
        for i, (text, reasons, done, usage) in enumerate(results):
            assert reasons == ["length"] and done == 1, (i, reasons, done)
            assert usage["completion_tokens"] == lengths[i]
            if i in want:  # a sample, run alone, gives the same text
                assert text == want[i], i
        assert metric(server, "baton:request_success_total") == 1000
        assert pool_is_whole(server)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


def test_10000_random_and_malformed_requests_leave_the_server_whole(server, rng):
    values = [None, True, -1, 0, 1, 3.5, "x", "", [], [1, 2], ["a"], {}, {"include_usage": True}, 2 ** 70]
    fields = ["prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "stream",
              "stream_options", "echo", "model", "ignore_eos", "stop_token_ids", "bogus", "messages"]
    bodies = []
    for _ in range(10000):
        body = {f: rng.choice(values) for f in rng.sample(fields, rng.randint(0, 5))}
        if rng.random() < 0.6:
            body["prompt"] = [rng.randrange(600) for _ in range(rng.randint(1, 30))]
            body["max_tokens"] = rng.choice([1, 4, 0, -2, "8", 5000])
        if rng.random() < 0.2:  # a good one among them
            body = {"prompt": [rng.randrange(8, 500) for _ in range(rng.randint(1, 30))],
                    "max_tokens": rng.randint(1, 4), "stream": rng.random() < 0.5}
        raw = json.dumps(body).encode()
        if rng.random() < 0.1:
            raw = raw[:rng.randrange(len(raw) + 1)]
        path = "/v1/completions" if rng.random() < 0.8 or "prompt" in body else "/v1/chat/completions"
        bodies.append((path, raw))

    async def main():
        statuses = {}
        async with httpx.AsyncClient(base_url=server, timeout=300) as http:
            gate = asyncio.Semaphore(128)

            async def one(path, raw):
                async with gate:
                    async with http.stream("POST", path, content=raw,
                                           headers={"content-type": "application/json"}) as r:
                        await r.aread()
                        if r.status_code != 200:
                            assert set(json.loads(await r.aread())["error"]) == {"message", "type", "param", "code"}
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

            await asyncio.gather(*(one(p, b) for p, b in bodies))
        return statuses

    statuses = asyncio.run(main())
    print("statuses", statuses)
    assert set(statuses) <= {200, 400, 404, 503} and statuses.get(200, 0) > 1500, statuses
    assert httpx.get(server + "/health").status_code == 200
    assert pool_is_whole(server)


def test_a_client_leaving_mid_stream_returns_its_pages(server):
    with httpx.Client(base_url=server, timeout=60) as http:
        with http.stream("POST", "/v1/completions", json={"prompt": [9, 10], "max_tokens": longest(server, 2),
                                                          "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert '"text"' in first, first
            reserved = metric(server, "baton:kv_cache_pages_reserved")
            assert reserved > 0, httpx.get(server + "/metrics").text
    assert pool_is_whole(server)


def test_sigterm_finishes_what_runs_and_exits_cleanly(checkpoint):  # noqa: F811
    process, url = start_server(checkpoint, "--shutdown-timeout", "3")
    with httpx.Client(base_url=url, timeout=60) as http:
        with http.stream("POST", "/v1/completions", json={"prompt": [3], "max_tokens": longest(url, 1),
                                                          "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            start = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                for _ in lines:
                    pass
            except httpx.HTTPError:
                pass  # uvicorn cut the stream at the deadline
        assert process.wait(30) == 0
        assert time.monotonic() - start < 20
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=2)
