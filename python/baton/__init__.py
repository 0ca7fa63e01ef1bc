"""Baton from Python.

Public classes:
    SamplingParams: how a request's tokens are chosen and when it stops (`baton.sampling`).
    TextCodec: a checkpoint's tokenizer and chat template; Detokenizer and StopMatcher stream text from
        token ids (`baton.text`).

Importing baton needs no GPU and no tokenizer: `tokenizers` and `jinja2` load when text is first used.
"""

from baton.sampling import MAX_STOP_TOKENS, SamplingParams
from baton.text import Detokenizer, StopMatcher, TextCodec

__all__ = ["MAX_STOP_TOKENS", "SamplingParams", "TextCodec", "Detokenizer", "StopMatcher"]
