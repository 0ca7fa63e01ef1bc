"""Baton from Python: a Hugging Face checkpoint served by a decode loop that the GPU runs itself.

    from baton import LLM, SamplingParams
    llm = LLM("/models/Llama-3.2-1B-Instruct")
    print(llm.generate("The capital of France is", SamplingParams(max_tokens=32))[0].outputs[0].text)

Public classes:
    LLM: loads a checkpoint and serves requests (generate, stream, submit); `baton.llm`.
    Request, RequestOutput, CompletionOutput, StreamDelta: a submitted request, its result (vLLM's shape: one
        CompletionOutput per completion), and what one step added.
    Logprob: one token's log-probability, rank and text (vLLM's; `baton.logprobs`): CompletionOutput.logprobs
        holds one {token_id: Logprob} per generated token when SamplingParams.logprobs asks.
    AsyncLLM: the LLM for asyncio code (`baton.async_llm`); the HTTP server is `baton.serving`.
    SamplingParams: how a request's tokens are chosen and when it stops (`baton.sampling`).
    TextCodec: a checkpoint's tokenizer and chat template; Detokenizer and StopMatcher stream text from
        token ids (`baton.text`).
    Errors (`baton.errors`): BatonError and its kinds, each carrying the runtime's message.

Importing baton needs no GPU: the native module loads when the first LLM or SamplingParams is made (the
option defaults and the device's limits are its), and `tokenizers` and `jinja2` when text is first used. The
command line is `python -m baton generate|serve|bench` (`baton.cli`).
"""

from baton.errors import (BatonError, DeviceError, InvalidArgumentError, NoGPUError, NotFoundError,
                          ResourceExhaustedError)
from baton.llm import LLM, CompletionOutput, Request, RequestOutput, StreamDelta
from baton.logprobs import Logprob
from baton.sampling import SamplingParams
from baton.text import Detokenizer, StopMatcher, TextCodec


def __getattr__(name: str):
    # MAX_STOP_TOKENS comes from the native module (baton.sampling), loaded when first asked for.
    if name == "MAX_STOP_TOKENS":
        from baton import sampling

        return sampling.MAX_STOP_TOKENS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["LLM", "Request", "RequestOutput", "CompletionOutput", "StreamDelta", "SamplingParams", "MAX_STOP_TOKENS",
           "Logprob", "TextCodec",
           "Detokenizer", "StopMatcher", "BatonError", "InvalidArgumentError", "NotFoundError",
           "ResourceExhaustedError", "DeviceError", "NoGPUError"]
