"""Log-probabilities of generated tokens in vLLM's shape: per token a dict {token_id: Logprob}.

The device computes them in the step that chose the token (SamplingParams.logprobs says what they are): the
chosen token's log-probability and the best N alternatives', N = SamplingParams.logprobs. The native server
hands them over per token as (chosen_logprob, [(token_id, logprob), ...] best first); `token_logprobs` turns
one into vLLM's dict, and `chosen_and_top` turns the dict back for the OpenAI objects the HTTP server writes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# The native server's record of one token: (chosen logprob, [(token id, logprob)] best first).
NativeLogprobs = Tuple[float, Sequence[Tuple[int, float]]]
TokenLogprobs = Dict[int, "Logprob"]


@dataclasses.dataclass
class Logprob:
    """One token's log-probability (vLLM's Logprob).

    Attributes:
        logprob: the natural log of its probability under the model's raw logits (float32 on the device).
        rank: 1 for the most likely token, 2 for the next, ...; None for the chosen token when it is not among
            the top N the request asked for (the device does not compute its rank; vLLM would).
        decoded_token: the token id decoded alone by the tokenizer (special tokens kept); None without a
            tokenizer.
    """

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


def token_logprobs(token: int, record: NativeLogprobs, decode: Callable[[int], Optional[str]]) -> TokenLogprobs:
    """vLLM's dict for one generated token: the chosen token first (as vLLM orders it), then the top N by rank;
    N or N + 1 entries (the chosen token appears once, with its rank when it is among the top)."""
    chosen, top = record
    ranks = {int(t): (i + 1, float(lp)) for i, (t, lp) in enumerate(top)}
    token = int(token)
    rank, value = ranks.get(token, (None, float(chosen)))
    out: TokenLogprobs = {token: Logprob(value, rank, decode(token))}
    for t, (r, lp) in ranks.items():
        if t != token:
            out[t] = Logprob(lp, r, decode(t))
    return out


def chosen_and_top(token: int, entry: TokenLogprobs) -> Tuple[Logprob, List[Tuple[int, Logprob]]]:
    """The chosen token's Logprob and the top N [(token id, Logprob)] in rank order, from vLLM's dict."""
    top = sorted(((t, p) for t, p in entry.items() if p.rank is not None), key=lambda item: item[1].rank)
    return entry[int(token)], top


def cumulative(entries: Sequence[TokenLogprobs], tokens: Sequence[int]) -> float:
    """The sum of the chosen tokens' log-probabilities (vLLM's cumulative_logprob)."""
    return float(sum(entry[int(t)].logprob for entry, t in zip(entries, tokens)))
