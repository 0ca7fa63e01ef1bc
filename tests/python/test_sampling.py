"""SamplingParams: defaults, and each bad field refused with its name, its value and what is accepted."""

import math

import pytest

from baton import MAX_STOP_TOKENS, SamplingParams


def test_defaults_are_greedy_with_no_stops():
    p = SamplingParams()
    assert p.greedy and p.max_tokens == 16 and p.stop == () and p.stop_token_ids == ()


def test_stops_are_normalized_in_order_once_each():
    p = SamplingParams(stop="\n\n", stop_token_ids=[7, 3, 7])
    assert p.stop == ("\n\n",)
    assert p.stop_token_ids == (7, 3)
    assert SamplingParams(stop=["b", "a", "b"]).stop == ("b", "a")


@pytest.mark.parametrize("kwargs, kind, words", [
    ({"max_tokens": 0}, ValueError, ["max_tokens", "0", "at least 1"]),
    ({"max_tokens": 2.5}, TypeError, ["max_tokens", "integer"]),
    ({"max_tokens": True}, TypeError, ["max_tokens"]),
    ({"temperature": -0.5}, ValueError, ["temperature", "-0.5", "0 for greedy"]),
    ({"temperature": math.nan}, ValueError, ["temperature", "finite"]),
    ({"temperature": "hot"}, TypeError, ["temperature", "number"]),
    ({"top_p": 0.0}, ValueError, ["top_p", "(0, 1]"]),
    ({"top_p": 1.5}, ValueError, ["top_p", "1.5"]),
    ({"top_k": -2}, ValueError, ["top_k", "0 or -1 (off)"]),
    ({"n": 0}, ValueError, ["n", "1 to 64"]),
    ({"presence_penalty": 2.5}, ValueError, ["presence_penalty", "2.5", "[-2, 2]"]),
    ({"frequency_penalty": math.inf}, ValueError, ["frequency_penalty", "finite"]),
    ({"repetition_penalty": 0.0}, ValueError, ["repetition_penalty", "> 0"]),
    ({"min_tokens": 17}, ValueError, ["min_tokens", "max_tokens (16)"]),
    ({"logprobs": 21}, ValueError, ["logprobs", "21", "None (off) or 0 to 20"]),
    ({"logprobs": -1}, ValueError, ["logprobs", "-1", "0 to 20"]),
    ({"logprobs": 2.0}, TypeError, ["logprobs", "integer"]),
    ({"logprobs": True}, TypeError, ["logprobs"]),
    ({"prompt_logprobs": 1}, ValueError, ["prompt_logprobs", "does not compute", "leave it at None"]),
    ({"min_p": 0.1}, ValueError, ["min_p", "leave it at 0.0"]),
    ({"best_of": 2}, ValueError, ["best_of"]),
    ({"temprature": 0.5}, TypeError, ["no field 'temprature'", "temperature", "max_tokens"]),
    ({"top_k": (1 << 18) + 1}, ValueError, ["top_k"]),
    ({"seed": -1}, ValueError, ["seed", "2**64"]),
    ({"seed": 1 << 64}, ValueError, ["seed"]),
    ({"stop": [""]}, ValueError, ["stop[0]", "empty"]),
    ({"stop": ["ok", 3]}, TypeError, ["stop[1]", "strings"]),
    ({"stop": 5}, TypeError, ["stop", "string"]),
    ({"stop_token_ids": "12"}, TypeError, ["stop_token_ids", "list"]),
    ({"stop_token_ids": [1, -2]}, ValueError, ["stop_token_ids[1]", "-2"]),
    ({"stop_token_ids": list(range(MAX_STOP_TOKENS + 1))}, ValueError,
     ["stop_token_ids", str(MAX_STOP_TOKENS + 1), "stop strings"]),
    ({"ignore_eos": 1}, TypeError, ["ignore_eos"]),
])
def test_bad_fields_are_refused_naming_the_field_and_the_fix(kwargs, kind, words):
    with pytest.raises(kind) as error:
        SamplingParams(**kwargs)
    for word in words:
        assert word in str(error.value), (word, str(error.value))


def test_limits_themselves_are_accepted():
    SamplingParams(max_tokens=1, temperature=0.0, top_p=1.0, top_k=1 << 18, seed=(1 << 64) - 1,
                   stop_token_ids=list(range(MAX_STOP_TOKENS)))


def test_vllm_names_at_their_off_values_are_accepted():
    p = SamplingParams(top_k=-1, logprobs=None, min_p=0.0, best_of=1, prompt_logprobs=None)
    assert p.top_k == 0 and p.n == 1 and p.logprobs is None


def test_logprobs_from_0_to_20_are_accepted():
    from baton import sampling

    assert sampling.MAX_LOGPROBS == 20  # the native module's (kMaxLogprobs)
    assert [SamplingParams(logprobs=n).logprobs for n in (0, 5, 20)] == [0, 5, 20]
    assert SamplingParams(logprobs=3).replace(max_tokens=4).logprobs == 3


def test_replace_checks_again():
    p = SamplingParams(max_tokens=8, stop="x")
    assert p.replace(max_tokens=3) == SamplingParams(max_tokens=3, stop="x")
    with pytest.raises(ValueError, match="max_tokens"):
        p.replace(max_tokens=0)
