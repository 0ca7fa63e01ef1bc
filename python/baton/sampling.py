"""How a request's tokens are chosen and when its generation ends.

The fields follow the API that vLLM, SGLang, TensorRT-LLM and transformers share. Everything is checked when
the object is made, so a bad value is refused before anything reaches the GPU, with a message that names the
field, the value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence, Tuple, Union

_SEED_LIMIT = 1 << 64


def _limits() -> dict:
    """The device's limits, from the native module (include/baton/decoder_model.h: kMaxStopTokens;
    baton/decoder_config.h: kDecoderMaxVocab), read once."""
    if not hasattr(_limits, "value"):
        from baton.llm import _native

        _limits.value = dict(_native().limits())
    return _limits.value


def __getattr__(name: str):  # MAX_STOP_TOKENS and MAX_VOCAB, from the native module when first asked for
    if name == "MAX_STOP_TOKENS":
        return _limits()["max_stop_tokens"]
    if name == "MAX_VOCAB":
        return _limits()["max_vocab"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Sampling and stopping for one request.

    Attributes:
        max_tokens: tokens to generate at most (>= 1).
        temperature: 0 picks the most likely token (greedy); above 0 samples from softmax(logits / temperature).
        top_p: nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1: off).
        top_k: keep the k most likely tokens (0: off).
        seed: the sampling key. Baton's sampling is deterministic: the same seed, request and token index give
            the same token on every engine. None: a seed chosen per request by the caller of generate().
        stop: strings that end the generation, matched on the detokenized text; the text stops before the
            first match (it is not included).
        stop_token_ids: token ids that end the generation (the token is generated, and kept in the ids).
        ignore_eos: do not stop at the checkpoint's end-of-sequence tokens.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    stop: Union[str, Sequence[str], None] = None
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        _check_int("max_tokens", self.max_tokens, 1, None, "at least 1")
        _check_float("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature is {self.temperature!r}; use 0 for greedy or a "
                             "positive temperature")
        _check_float("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p is {self.top_p!r}; it must lie in (0, 1] (1: off)")
        max_vocab = _limits()["max_vocab"]
        _check_int("top_k", self.top_k, 0, max_vocab, f"0 (off) to {max_vocab}")
        if self.seed is not None:
            _check_int("seed", self.seed, 0, _SEED_LIMIT - 1, "in [0, 2**64) or None")
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
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"SamplingParams.ignore_eos is {self.ignore_eos!r}; pass True or False")

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
