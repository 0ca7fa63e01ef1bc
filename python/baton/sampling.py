"""How a request's tokens are chosen and when its generation ends.

The fields follow the API that vLLM, SGLang, TensorRT-LLM and transformers share. Everything is checked when
the object is made, so a bad value is refused before anything reaches the GPU, with a message that names the
field, the value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence, Tuple, Union

_SEED_LIMIT = 1 << 64
MAX_N = 64  # completions per prompt (each its own device request)


def _limits() -> dict:
    """The device's limits, from the native module (include/baton/decoder_model.h: kMaxStopTokens;
    baton/decoder_config.h: kDecoderMaxVocab, kMaxLogprobs), read once."""
    if not hasattr(_limits, "value"):
        from baton.llm import _native

        _limits.value = dict(_native().limits())
    return _limits.value


def __getattr__(name: str):  # MAX_STOP_TOKENS, MAX_VOCAB, MAX_LOGPROBS: the native module's, when first asked for
    if name == "MAX_STOP_TOKENS":
        return _limits()["max_stop_tokens"]
    if name == "MAX_VOCAB":
        return _limits()["max_vocab"]
    if name == "MAX_LOGPROBS":  # top alternatives per token (vLLM's default max_logprobs, OpenAI's top_logprobs)
        return _limits()["max_logprobs"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# vLLM's names for what Baton does not compute yet, with the value that means "off": a request may name them at
# that value (code written for vLLM often does); any other value is refused, naming the field.
NOT_YET = {
    "prompt_logprobs": None,
    "min_p": 0.0,
    "logit_bias": None,
    "bad_words": None,
    "allowed_token_ids": None,
    "best_of": None,
}

# What SamplingParams takes, in order (the dataclass fields below).
SUPPORTED = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "ignore_eos", "n",
             "skip_special_tokens", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens",
             "logprobs")


@dataclasses.dataclass(frozen=True, init=False)
class SamplingParams:
    """Sampling and stopping for one request; the names are vLLM's.

    Attributes:
        max_tokens: tokens to generate at most (>= 1).
        temperature: 0 picks the most likely token (greedy); above 0 samples from softmax(logits / temperature).
        top_p: nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1: off).
        top_k: keep the k most likely tokens (0 or -1: off).
        seed: the sampling key. Baton's sampling is deterministic: the same seed, request and token index give
            the same token on every engine. None: a seed chosen per request by the caller of generate().
        stop: strings that end the generation, matched on the detokenized text; the text stops before the
            first match (it is not included).
        stop_token_ids: token ids that end the generation (the token is generated, and kept in the ids).
        ignore_eos: do not stop at the checkpoint's end-of-sequence tokens.
        n: completions per prompt, each its own request on the device (child i samples with sequence key
            seed + i: different tokens unless greedy).
        skip_special_tokens: leave special tokens out of the text (the ids keep them).
        presence_penalty, frequency_penalty: OpenAI's, in [-2, 2]: a token generated n > 0 times loses
            frequency_penalty * n + presence_penalty from its logit (0: off).
        repetition_penalty: transformers', > 0: a token of the prompt or generated has its logit divided by it
            when positive, multiplied when not (1: off). Applied before the two above, as vLLM does; all three
            on the device, before temperature, top-k and top-p.
        min_tokens: the stop tokens (stop_token_ids and end-of-sequence) cannot be generated before this many
            tokens (at most max_tokens); stop strings still end the text.
        logprobs: None (off), or 0 to MAX_LOGPROBS (20; and at most the LLM's max_logprobs): each generated
            token's log-probability and this many top alternatives (CompletionOutput.logprobs: per token a
            dict {token_id: Logprob} of the top `logprobs` tokens and the chosen one). They are vLLM's default
            "raw" logprobs: the log-softmax, in float32, of the model's own logits, before the penalties,
            min_tokens, temperature, top-k and top-p, computed on the device by the step that chose the token.

    vLLM's other fields (NOT_YET: prompt_logprobs, min_p, logit_bias, ...) are accepted at their "off" value
    and refused with ValueError otherwise; an unknown name raises TypeError naming it and listing these.
    """

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: Optional[int]
    stop: Tuple[str, ...]
    stop_token_ids: Tuple[int, ...]
    ignore_eos: bool
    n: int
    skip_special_tokens: bool
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    min_tokens: int
    logprobs: Optional[int]

    def __init__(self, max_tokens: int = 16, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                 seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                 stop_token_ids: Sequence[int] = (), ignore_eos: bool = False, n: int = 1,
                 skip_special_tokens: bool = True, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, min_tokens: int = 0, logprobs: Optional[int] = None,
                 **others: Any) -> None:
        for name, value in others.items():
            if name not in NOT_YET:
                raise TypeError(f"SamplingParams has no field {name!r}; Baton supports {', '.join(SUPPORTED)} "
                                f"(and {', '.join(NOT_YET)} at their off values)")
            if value != NOT_YET[name] and not (name == "best_of" and value == n):
                raise ValueError(f"SamplingParams.{name} is {value!r}: Baton does not compute {name} on the "
                                 f"device yet; leave it at {NOT_YET[name]!r}. Supported: {', '.join(SUPPORTED)}")
        fields = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                      stop=stop, stop_token_ids=stop_token_ids, ignore_eos=ignore_eos, n=n,
                      skip_special_tokens=skip_special_tokens, presence_penalty=presence_penalty,
                      frequency_penalty=frequency_penalty, repetition_penalty=repetition_penalty,
                      min_tokens=min_tokens, logprobs=logprobs)
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        _check_int("max_tokens", self.max_tokens, 1, None, "at least 1")
        _check_float("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature is {self.temperature!r}; use 0 for greedy or a "
                             "positive temperature")
        _check_float("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p is {self.top_p!r}; it must lie in (0, 1] (1: off)")
        max_vocab = _limits()["max_vocab"]
        _check_int("top_k", self.top_k, -1, max_vocab, f"0 or -1 (off) to {max_vocab}")
        if self.top_k == -1:  # vLLM's "off"
            object.__setattr__(self, "top_k", 0)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, _SEED_LIMIT - 1, "in [0, 2**64) or None")
        _check_int("n", self.n, 1, MAX_N, f"1 to {MAX_N}")
        for name in ("presence_penalty", "frequency_penalty"):
            _check_float(name, getattr(self, name))
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"SamplingParams.{name} is {getattr(self, name)!r}; it must lie in [-2, 2] (0: off)")
        _check_float("repetition_penalty", self.repetition_penalty)
        if not self.repetition_penalty > 0:
            raise ValueError(f"SamplingParams.repetition_penalty is {self.repetition_penalty!r}; it must be > 0 "
                             "(1: off)")
        _check_int("min_tokens", self.min_tokens, 0, self.max_tokens, f"0 to max_tokens ({self.max_tokens})")
        if self.logprobs is not None:
            most = _limits()["max_logprobs"]
            _check_int("logprobs", self.logprobs, 0, most, f"None (off) or 0 to {most} (top alternatives per token)")
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        ids = self.stop_token_ids
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise TypeError(f"SamplingParams.stop_token_ids is {ids!r}; pass a list of token ids")
        for i, token in enumerate(ids):
            _check_int(f"stop_token_ids[{i}]", token, 0, max_vocab - 1, f"a token id in [0, {max_vocab})")
        ids = tuple(dict.fromkeys(int(t) for t in ids))  # in order, once each
        max_stops = _limits()["max_stop_tokens"]
        if len(ids) > max_stops:
            raise ValueError(f"SamplingParams.stop_token_ids holds {len(ids)} distinct ids; the device checks "
                             f"at most {max_stops} per request (with the checkpoint's end-of-sequence "
                             "ids): use stop strings for the rest")
        object.__setattr__(self, "stop_token_ids", ids)
        for name in ("ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"SamplingParams.{name} is {getattr(self, name)!r}; pass True or False")

    def replace(self, **changes: Any) -> "SamplingParams":
        """A copy with some fields changed (checked again)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields.update(changes)
        return SamplingParams(**fields)

    @property
    def greedy(self) -> bool:
        """True when the most likely token is always taken."""
        return self.temperature == 0.0


def _check_int(field: str, value: object, low: int, high: Optional[int], accepted: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SamplingParams.{field} is {value!r}; pass an integer, {accepted}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"SamplingParams.{field} is {value}; it must be {accepted}")


def _check_float(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"SamplingParams.{field} is {value!r}; pass a number")
    if not math.isfinite(value):
        raise ValueError(f"SamplingParams.{field} is {value!r}; pass a finite number")


def _stop_strings(stop: Union[str, Sequence[str], None]) -> Tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, Sequence):
        raise TypeError(f"SamplingParams.stop is {stop!r}; pass a string or a list of strings")
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise TypeError(f"SamplingParams.stop[{i}] is {s!r}; pass strings")
        if not s:
            raise ValueError(f"SamplingParams.stop[{i}] is empty; an empty stop string would match at once")
    return tuple(dict.fromkeys(stop))
