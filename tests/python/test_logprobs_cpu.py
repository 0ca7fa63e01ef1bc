"""Log-probabilities without a GPU: the real LLM, AsyncLLM and HTTP server over the fake native server
(fake_native.py), whose logprobs follow logprobs_rule, so each test computes what it must get.

What is asserted: vLLM's per-token dicts ({token_id: Logprob}, the chosen token first, ranks 1..N, rank None for a
chosen token outside the top N) stay aligned with token_ids, a stop string included, and sum to
cumulative_logprob; streamed deltas carry exactly their tokens' logprobs; /v1/completions and
/v1/chat/completions answer OpenAI's logprobs objects (through the official client), streamed or not, the same
numbers; bad values get 400 naming the field, a request above max_logprobs is refused naming it, and logprobs
the device lost end the request with a BatonError (through HTTP a 500 error object, or an error event).
"""

import asyncio

import httpx
import pytest

import baton
import fake_native
import serve_support
from baton import errors, llm as llm_module
from baton.async_llm import AsyncLLM
from baton.logprobs import Logprob
from baton.serving import protocol
from baton.serving.app import build_app
from serve_support import assert_error, stream_completion
from test_serve_cpu import client_of, expected, served  # noqa: F401 (the fixture)

import tiny_tokenizer


def text_of(llm, token):
    return llm.tokenizer.decode([token], skip_special_tokens=False)


def expected_entries(llm, tokens, n):
    """vLLM's dicts for the fake model's tokens: the chosen token first, then the top n by rank."""
    out = []
    for k, token in enumerate(tokens):
        chosen, top = fake_native.logprobs_rule(token, k, n)
        ranks = {t: (r + 1, lp) for r, (t, lp) in enumerate(top)}
        rank, value = ranks.get(token, (None, chosen))
        entry = {token: Logprob(value, rank, text_of(llm, token))}
        entry.update({t: Logprob(lp, r, text_of(llm, t)) for t, (r, lp) in ranks.items() if t != token})
        out.append(entry)
    return out


def test_llm_logprobs_are_vllms_dicts_aligned_with_the_tokens(served):  # noqa: F811
    url, fake, llm = served
    for n in (0, 1, 3, 20):
        outs = llm.generate([[7, 8, 9], "Pack my box"],
                            baton.SamplingParams(max_tokens=9, temperature=0.7, seed=5, n=2, logprobs=n))
        for o in outs:
            for c in o.outputs:
                tokens = expected(llm, o.prompt_token_ids, 9, 0.7, 5, 5 + c.index)
                assert c.token_ids == tokens and len(c.logprobs) == len(tokens)
                assert c.logprobs == expected_entries(llm, tokens, n)
                for k, (token, entry) in enumerate(zip(tokens, c.logprobs)):
                    assert next(iter(entry)) == token  # the chosen token first, as vLLM orders it
                    among_top = k % 2 == 0 and n > 0  # the rule's: even tokens rank first
                    assert len(entry) == (n if among_top else n + 1)
                    assert entry[token].rank == (1 if among_top else None)
                    assert sorted(p.rank for p in entry.values() if p.rank is not None) == list(range(1, n + 1))
                assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for e, t in zip(c.logprobs, tokens)))
    plain = llm.generate([[7, 8, 9]], baton.SamplingParams(max_tokens=3))[0].outputs[0]
    assert plain.logprobs is None and plain.cumulative_logprob is None
    assert [r[12] for r in fake.last_submitted] == [-1]  # the native field: -1 when not asked


def test_a_stop_string_keeps_the_logprobs_of_the_kept_tokens(served):  # noqa: F811
    url, fake, llm = served
    prompt = [50, 60, 70]
    tokens = expected(llm, prompt, 20, ignore_eos=True)
    full = llm.tokenizer.decode(tokens)
    cut = next(i for i in range(len(full) // 2, len(full)) if full[i].strip())  # a visible character mid-way
    out = llm.generate([prompt], baton.SamplingParams(max_tokens=20, ignore_eos=True, stop=[full[cut:cut + 2]],
                                                      logprobs=2))[0]
    c = out.outputs[0]
    kept = len(c.token_ids)
    assert c.finish_reason == "stop" and 0 < kept < len(tokens) and c.token_ids == tokens[:kept]
    # The device made more tokens than were kept (the stop string cancels it at its next one): their logprobs go
    # with them.
    assert c.logprobs == expected_entries(llm, tokens[:kept], 2)
    assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for e, t in zip(c.logprobs, c.token_ids)))


def test_streamed_deltas_carry_their_tokens_logprobs(served):  # noqa: F811
    url, fake, llm = served
    sampling = baton.SamplingParams(max_tokens=12, ignore_eos=True, logprobs=4)
    request = llm.submit([21, 22], sampling)
    deltas = list(request)
    assert all(len(d.logprobs) == len(d.token_ids) for d in deltas)
    whole = request.result().outputs[0]
    assert [e for d in deltas for e in d.logprobs] == whole.logprobs == expected_entries(llm, whole.token_ids, 4)
    engine = AsyncLLM(llm)

    async def main():
        return [d async for d in engine.generate([21, 22], sampling)]

    streamed = asyncio.run(main())
    engine.stop()  # the served fixture's engine owns the LLM
    assert [t for d in streamed for t in d.token_ids] == whole.token_ids
    assert [e for d in streamed for e in d.logprobs] == whole.logprobs


def test_completions_logprobs_are_openais_object_streamed_or_not(served):  # noqa: F811
    url, fake, llm = served
    prompt = [31, 32, 33]
    client = client_of(url)
    out = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0, logprobs=3,
                                    extra_body={"ignore_eos": True})
    tokens = expected(llm, prompt, 8, ignore_eos=True)
    entries = expected_entries(llm, tokens, 3)
    lp = out.choices[0].logprobs
    strings = [text_of(llm, t) for t in tokens]
    assert lp.tokens == strings
    assert lp.token_logprobs == [e[t].logprob for e, t in zip(entries, tokens)]
    assert lp.top_logprobs == [{p.decoded_token: p.logprob for p in e.values()} for e in entries]
    assert lp.text_offset == [sum(len(s) for s in strings[:i]) for i in range(len(strings))]
    with httpx.Client(base_url=url) as http:
        chunks = stream_completion(http, "/v1/completions", {
            "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3, "ignore_eos": True,
            "stream": True})
    assert chunks[-1] == "[DONE]"
    parts = [c["choices"][0]["logprobs"] for c in chunks[:-1]]
    for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert [x for part in parts for x in part[name]] == getattr(lp, name), name
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == out.choices[0].text
    plain = client.completions.create(model="tiny", prompt=prompt, max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_chat_logprobs_are_openais_object_streamed_or_not(served):  # noqa: F811
    url, fake, llm = served
    messages = [{"role": "user", "content": "Say something."}]
    ids = llm.tokenizer.encode(llm.tokenizer.apply_chat_template(messages), add_special_tokens=False)
    client = client_of(url)
    out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=7, temperature=0,
                                         logprobs=True, top_logprobs=2)
    tokens = expected(llm, ids, 7)
    content = out.choices[0].logprobs.content
    assert len(content) == len(tokens)
    for k, (token, item) in enumerate(zip(tokens, content)):
        chosen, top = fake_native.logprobs_rule(token, k, 2)
        assert (item.token, item.logprob) == (text_of(llm, token), chosen)
        assert item.bytes == list(text_of(llm, token).encode())
        assert [(t.token, t.logprob, t.bytes) for t in item.top_logprobs] == [
            (text_of(llm, t), lp, list(text_of(llm, t).encode())) for t, lp in top]
        assert [t.logprob for t in item.top_logprobs] == sorted((t.logprob for t in item.top_logprobs), reverse=True)
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=7, temperature=0,
                                            logprobs=True, top_logprobs=2, stream=True)
    streamed = [item for chunk in stream for choice in chunk.choices if choice.logprobs
                for item in choice.logprobs.content]
    assert [i.model_dump() for i in streamed] == [i.model_dump() for i in content]
    only = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, temperature=0,
                                          logprobs=True)
    assert only.choices[0].logprobs.content and all(i.top_logprobs == [] for i in only.choices[0].logprobs.content)
    plain = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    assert plain.choices[0].logprobs is None


CHAT = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("path, body, words, param", [
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, ["'logprobs' is 21", "[0, 20]"], "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": -1}, ["'logprobs' is -1", "[0, 20]"], "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": True}, ["'logprobs' is true", "integer"], "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": "3"}, ["'logprobs'", "integer"], "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": 2, "echo": True}, ["'echo'", "'logprobs'"], "logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 1}, ["prompt_logprobs", "does not compute"],
     "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "top_logprobs": 2}, ["unknown field 'top_logprobs'"], "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, ["'top_logprobs'", "'logprobs'", "true"],
     "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": False, "top_logprobs": 0}, ["'top_logprobs'"],
     "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21},
     ["'top_logprobs' is 21", "[0, 20]"], "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": 1}, ["'logprobs' is 1", "true or false"], "logprobs"),
])
def test_bad_logprobs_fields_get_400_naming_the_field(served, path, body, words, param):  # noqa: F811
    url, fake, llm = served
    assert_error(httpx.post(url + path, json=body), 400, *words, param=param)
    assert fake.submitted == 0


def test_off_values_are_still_accepted(served):  # noqa: F811
    url, fake, llm = served
    for path, body in (("/v1/completions", {"prompt": "x", "logprobs": None, "max_tokens": 1}),
                       ("/v1/completions", {"prompt": "x", "logprobs": False, "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": CHAT, "logprobs": False, "max_tokens": 1})):
        r = httpx.post(url + path, json=body)
        assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None, r.text


def serve_fake(monkeypatch, directory, **llm_options):
    fake = fake_native.FakeNative(llm_module._native(), max_batch=4)
    monkeypatch.setattr(llm_module, "_native", lambda: fake)
    llm = baton.LLM(directory, max_requests=8, load_progress=False, **llm_options)
    app = build_app(AsyncLLM(llm), "tiny", model_path=str(directory), api_key=None, max_body_bytes=4096)
    return serve_support.ThreadServer(app), app, fake, llm


def test_a_request_above_max_logprobs_is_refused_naming_it(monkeypatch, tmp_path):
    directory = tiny_tokenizer.write(tmp_path / "model", "byte-level")
    server, app, fake, llm = serve_fake(monkeypatch, directory, max_logprobs=2)
    try:
        assert llm.max_logprobs == 2
        with pytest.raises(errors.InvalidArgumentError, match=r"logprobs is 3; .* max_logprobs \(2\).*max_logprobs=3"):
            llm.generate([[1, 2]], baton.SamplingParams(logprobs=3))
        assert llm.generate([[1, 2]], baton.SamplingParams(max_tokens=2, logprobs=2))[0].outputs[0].logprobs
        assert_error(httpx.post(server.url + "/v1/completions", json={"prompt": "x", "logprobs": 3}), 400,
                     "'logprobs' asks for 3", "at most 2", "--max-logprobs 2", param="logprobs")
        assert_error(httpx.post(server.url + "/v1/chat/completions", json={
            "messages": CHAT, "logprobs": True, "top_logprobs": 5}), 400, "'top_logprobs' asks for 5", "at most 2",
            param="top_logprobs")
        assert fake.servers[0].submitted == 1
    finally:
        server.stop()
        app.state.engine.close()
    off = baton.LLM(directory, max_requests=8, load_progress=False, max_logprobs=0)
    with pytest.raises(errors.InvalidArgumentError, match=r"no log-probabilities \(max_logprobs is 0\).*None"):
        off.submit([1], baton.SamplingParams(logprobs=0))
    with pytest.raises(errors.InvalidArgumentError, match="max_logprobs"):
        baton.LLM(directory, max_requests=8, load_progress=False, max_logprobs=21)
    # The native server refuses too, naming the option, should a request reach it.
    with pytest.raises(errors.InvalidArgumentError, match="max_logprobs"):
        off._server.submit([([1], 2, [], 0.0, 0, 1.0, 0, 0, 0.0, 0.0, 1.0, 0, 0)])
    off.close()


def test_lost_logprobs_end_the_request_with_the_native_message(served):  # noqa: F811
    url, fake, llm = served
    fake.lose_logprobs_at = 3
    sampling = baton.SamplingParams(max_tokens=40, ignore_eos=True, logprobs=1)
    with pytest.raises(errors.BatonError, match="overwritten.*stream_window"):
        llm.generate([[1, 2], [3, 4]], sampling)
    request = llm.submit([5, 6], sampling)
    with pytest.raises(errors.BatonError, match="overwritten"):
        request.result()
    with pytest.raises(errors.BatonError, match="overwritten"):  # and again, for a caller that asks again
        request.result()
    assert_error(httpx.post(url + "/v1/completions", json={"prompt": [1], "max_tokens": 40, "logprobs": 1,
                                                           "ignore_eos": True}), 500, "request failed", "overwritten")
    with httpx.Client(base_url=url) as http:
        for path, body in (("/v1/completions", {"prompt": [1]}),
                           ("/v1/chat/completions", {"messages": CHAT, "logprobs": True})):
            chunks = stream_completion(http, path, dict(body, max_tokens=40, ignore_eos=True, stream=True,
                                                        logprobs=body.get("logprobs", 1)))
            assert "overwritten" in chunks[-1]["error"]["message"] and chunks[-1]["error"]["type"] == "server_error"
    fake.lose_logprobs_at = None
    # The requests were cancelled on the device: nothing runs, every page is back, and the server still serves.
    for _ in range(2000):
        if not fake.live and not llm._live:
            break
        llm.wait(0.005)
    assert not fake.live and not llm._live and fake.free_pages() == fake.pool_pages
    assert httpx.get(url + "/health").status_code == 200
    assert llm.generate([[1, 2]], sampling)[0].outputs[0].logprobs is not None


def test_protocol_writes_what_json_can_carry():
    entry = {5: Logprob(float("-inf"), None, None), 9: Logprob(-0.5, 1, "é")}
    lp, end = protocol.completion_logprobs([5], [entry], 10)
    assert lp == {"tokens": ["token_id:5"], "token_logprobs": [-9999.0],
                  "top_logprobs": [{"token_id:5": -9999.0, "é": -0.5}], "text_offset": [10]}
    assert end == 10 + len("token_id:5")
    chat = protocol.chat_logprobs([5], [entry])
    assert chat == {"content": [{"token": "token_id:5", "logprob": -9999.0, "bytes": list(b"token_id:5"),
                                 "top_logprobs": [{"token": "é", "logprob": -0.5, "bytes": [0xC3, 0xA9]}]}]}
