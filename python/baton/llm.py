"""LLM: a Hugging Face checkpoint served by Baton's device-driven decode loop.

    from baton import LLM, SamplingParams
    llm = LLM("/models/Llama-3.2-1B-Instruct")
    print(llm.generate(["The capital of France is"], SamplingParams(max_tokens=32))[0].outputs[0].text)

The GPU runs the loop: requests go into its work queue, its scheduler admits them into free batch slots, reads
prompts in chunks and decodes (continuous batching on the device), and each token reaches the host as its step
ends. Requests may be submitted from any thread while others run; waiting releases the GIL.

The names follow vLLM's offline API where they collide (generate(prompts, sampling_params), RequestOutput.outputs
[i].text / .token_ids / .finish_reason); baton.async_llm.AsyncLLM serves the same requests to asyncio code.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from baton import errors
from baton import sampling as sampling_module
from baton.logprobs import TokenLogprobs, cumulative, token_logprobs
from baton.sampling import SamplingParams
from baton.text import Detokenizer, StopMatcher, TextCodec

Prompt = Union[str, Sequence[int]]

# How long one poll of the native server waits for tokens: short, so a thread that submits while another
# waits is never held up for long.
_POLL_S = 0.002


@dataclasses.dataclass
class CompletionOutput:
    """One completion of a prompt (vLLM's CompletionOutput).

    Attributes:
        index: which of the prompt's n completions.
        text: the generated text, ending before the first stop string.
        token_ids: the generated tokens, up to and including a stop token (cut after a stop string's token).
        finish_reason: "stop" (a stop token or string), "length" (max_tokens) or "cancelled" (Request.cancel);
            "error" for a request that raised (its logprobs were lost).
        stop_reason: the stop string or stop token id that ended it (None otherwise).
        logprobs: with SamplingParams.logprobs = N, one dict {token_id: Logprob} per token of token_ids (the
            top N and the chosen token: N or N + 1 entries; baton.logprobs); None otherwise.
        cumulative_logprob: the sum of the chosen tokens' log-probabilities (None without logprobs).
    """

    index: int
    text: str
    token_ids: List[int]
    finish_reason: str
    stop_reason: Union[str, int, None] = None
    logprobs: Optional[List[TokenLogprobs]] = None
    cumulative_logprob: Optional[float] = None


@dataclasses.dataclass
class RequestOutput:
    """A finished prompt (vLLM's RequestOutput): its n completions in `outputs`; `text`, `token_ids` and
    `finish_reason` are the first completion's.

    Attributes:
        request_id: the first completion's request id (the native server's).
        prompt: the prompt as given when it was text (None for token ids).
        prompt_token_ids: the prompt as the model read it.
        outputs: the completions, by index.
    """

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> List[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str:
        return self.outputs[0].finish_reason


@dataclasses.dataclass
class StreamDelta:
    """What one step added to a streamed request: new token ids and the text they completed (and, with
    SamplingParams.logprobs, one {token_id: Logprob} dict per new token)."""

    token_ids: List[int]
    text: str
    finished: bool
    finish_reason: Optional[str] = None
    logprobs: Optional[List[TokenLogprobs]] = None


class Request:
    """A submitted request (one completion of one prompt). Iterate it for StreamDelta as the device produces
    tokens, or call result()."""

    def __init__(self, llm: "LLM", prompt_ids: List[int], sampling: SamplingParams, stop_ids: Sequence[int],
                 index: int = 0, prompt: Optional[str] = None):
        self._llm = llm
        self.prompt = prompt
        self.prompt_token_ids = prompt_ids
        self.sampling = sampling
        self.index = index
        self._stop_ids = frozenset(stop_ids)
        self.token_ids: List[int] = []
        # One {token_id: Logprob} per token of token_ids when the request asked for logprobs.
        self.logprobs: Optional[List[TokenLogprobs]] = [] if sampling.logprobs is not None else None
        self._pending: List[int] = []  # delivered by the pump, not yet consumed
        self._pending_logprobs: List[Any] = []  # the native records of _pending's tokens (with logprobs)
        # Set when the device could not deliver the logprobs (or AsyncLLM's pump failed): poll() raises it.
        self._error: Optional[Exception] = None
        self._device_done = False
        self._finish_reason: Optional[str] = None
        self.stop_reason: Union[str, int, None] = None
        self._text_parts: List[str] = []
        self._detok: Optional[Detokenizer] = (llm._codec.detokenizer(sampling.skip_special_tokens)
                                              if llm._codec is not None else None)
        self._stops = StopMatcher(sampling.stop) if sampling.stop else None
        self.id: int = -1
        # Called by the thread that delivered new tokens or the end (under LLM._lock; it must not block):
        # AsyncLLM wakes the request's waiter with it.
        self.on_event: Optional[Callable[[], None]] = None

    @property
    def finished(self) -> bool:
        return self._finish_reason is not None

    def _deliver(self, tokens: List[int], finished: bool, logprobs: Any = None) -> None:  # under LLM._lock
        if isinstance(logprobs, str) and self._error is None:
            # The records were overwritten before the host read them (it fell more than stream_window tokens
            # behind): the request cannot be answered as asked, so it ends with the native message (its later
            # events carry tokens without records: they are dropped with it).
            self._error = errors.BatonError(logprobs)
        if self._finish_reason is None and self._error is None:
            self._pending.extend(tokens)
            if logprobs is not None:
                self._pending_logprobs.extend(logprobs)
        self._device_done = self._device_done or finished
        if self.on_event is not None:
            self.on_event()

    def poll(self) -> StreamDelta:
        """Without waiting: the tokens that arrived since the last call, the text they complete, and whether
        the request finished (LLM.wait brings new tokens in)."""
        with self._llm._lock:
            tokens, self._pending = self._pending, []
            records, self._pending_logprobs = self._pending_logprobs, []
            device_done = self._device_done
            error = self._error
        if error is not None:
            if not self.finished:
                if device_done:  # AsyncLLM's failed pump: the device is gone, nothing to cancel
                    self._finish_reason = "error"
                else:
                    self._finish("error")  # the device stops it at its next token
            raise error
        if self.finished:
            return StreamDelta([], "", True, self._finish_reason, [] if self.logprobs is not None else None)
        kept: List[int] = []
        text = ""
        for token in tokens:
            kept.append(token)
            piece = self._detok.add([token]) if self._detok is not None else ""
            if self._stops is not None:
                piece, hit = self._stops.feed(piece)
                text += piece
                if hit:
                    self.stop_reason = self._stops.matched
                    self._finish("stop")
                    break
            else:
                text += piece
        self.token_ids.extend(kept)
        logprobs = None
        if self.logprobs is not None:  # the kept tokens' (a stop string drops the rest, tokens and records)
            logprobs = [token_logprobs(t, r, self._llm._token_text) for t, r in zip(kept, records)]
            self.logprobs.extend(logprobs)
        if not self.finished and device_done:
            tail = self._detok.finish() if self._detok is not None else ""
            if self._stops is not None:
                piece, hit = self._stops.feed(tail)
                text += piece if hit else piece + self._stops.finish()
                if hit:
                    self.stop_reason = self._stops.matched
            else:
                text += tail
            # The device ends a request at a stop token or at max_tokens.
            last = self.token_ids[-1] if self.token_ids else None
            if self.stop_reason is None and last in self._stop_ids:
                self.stop_reason = last
            self._finish_reason = "stop" if self.stop_reason is not None else "length"
        self._text_parts.append(text)
        return StreamDelta(kept, text, self.finished, self._finish_reason, logprobs)

    def _finish(self, reason: str) -> None:
        # A stop string, cancel() or an error ends the request here, and the device at its next token
        # (DecoderModel::Cancel); tokens it made meanwhile are dropped.
        self._finish_reason = reason
        self._llm._server.cancel(self.id)

    def cancel(self) -> None:
        """Ends the request now: no more tokens are returned (finish_reason "cancelled"), and the device stops
        generating it at its next step."""
        if not self.finished:
            self._finish("cancelled")

    def __iter__(self) -> Iterator[StreamDelta]:
        while True:
            delta = self.poll()
            if delta.token_ids or delta.text or delta.finished:
                yield delta
            if delta.finished:
                return
            self._llm._pump_until(self)

    @property
    def text(self) -> str:
        """The text returned so far."""
        return "".join(self._text_parts)

    def output(self) -> CompletionOutput:
        """This completion as it stands (final once finished)."""
        logprobs = list(self.logprobs) if self.logprobs is not None else None
        return CompletionOutput(self.index, self.text, list(self.token_ids), self._finish_reason or "length",
                                self.stop_reason, logprobs,
                                cumulative(logprobs, self.token_ids) if logprobs is not None else None)

    def result(self) -> RequestOutput:
        """Waits for the request to finish (the GIL released) and returns it. Raises BatonError when the
        device could not deliver the logprobs it asked for (the message says why)."""
        for _ in self:
            pass
        return RequestOutput(str(self.id), self.prompt, self.prompt_token_ids, [self.output()])


def defaults() -> Dict[str, Any]:
    """The options' defaults, as the C++ library's ServerOptions{} holds them (baton._baton.defaults())."""
    return dict(_native().defaults())


class LLM:
    """A checkpoint on the GPU with Baton's decode loop running.

    Every option left None takes the library's default: defaults(), the C++ ServerOptions{}'s values
    (include/baton/decoder_model.h documents each).

    Args:
        model: a Hugging Face model directory (config.json, model.safetensors or its index and shards, and
            tokenizer.json for text prompts): LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM.
        max_batch: sequences decoded together (KV-cache slots).
        max_context: tokens one sequence may hold (prompt + generated); 0: what the checkpoint and the GPU's
            memory allow.
        max_tokens_per_step: rows one step holds (decoding tokens plus prompt chunks).
        max_tokens_without_decodes: rows a step holds when no sequence decodes (prompts read alone, in fewer and
            larger steps); 0, or any value up to max_tokens_per_step, keeps max_tokens_per_step for them.
        max_chunk_tokens: most prompt tokens one sequence reads per step (0: the budget).
        max_requests: requests in flight at once (queued or running); more are refused until some finish.
        dtype: "auto" (the checkpoint's), "bfloat16" or "float16".
        gemm: "auto", "gemv" (Baton's own kernels at every size: tokens independent of the batch) or
            "cublaslt".
        engine: "conditional", "tail-launch" or "dynamic-parallelism".
        stream_window: generated tokens per request kept in mapped host memory for streaming.
        max_logprobs: the most top alternatives a request's SamplingParams.logprobs may ask for (at most 20;
            0: log-probabilities off, and their buffers not allocated); a request asking more is refused.
        load_progress: draw a progress bar on stderr while the weights load (None: when stderr is a terminal).
        tensor_parallel_size: GPUs the model is split across (vLLM's argument): GPUs 0..n-1 of this host, a
            size that divides the model's key/value heads. Each GPU holds its slices of the weights and its share
            of the KV cache and runs its own device scheduler; rank 0's decides every step and the others follow
            it over peer memory (baton::LockstepGroup), so one Python process drives every GPU from one thread:
            nothing a step does waits for the host, so no worker processes are needed.

    Raises:
        InvalidArgumentError: an option out of range or a checkpoint Baton cannot serve (the message names
            the option or file and the fix), checked before any GPU work.
        NotFoundError: a missing checkpoint file.
        NoGPUError: no CUDA GPU is visible.
    """

    def __init__(self, model: Union[str, os.PathLike], *, max_batch: Optional[int] = None,
                 max_context: Optional[int] = None, max_tokens_per_step: Optional[int] = None,
                 max_tokens_without_decodes: Optional[int] = None, max_chunk_tokens: Optional[int] = None,
                 max_requests: Optional[int] = None, dtype: Optional[str] = None, gemm: Optional[str] = None,
                 engine: Optional[str] = None, stream_window: Optional[int] = None,
                 max_logprobs: Optional[int] = None, load_progress: Optional[bool] = None,
                 tensor_parallel_size: Optional[int] = None) -> None:
        native = _native()
        self.model_dir = pathlib.Path(model)
        given = dict(max_batch=max_batch, max_context=max_context, max_tokens_per_step=max_tokens_per_step,
                     max_tokens_without_decodes=max_tokens_without_decodes, max_chunk_tokens=max_chunk_tokens,
                     max_requests=max_requests, dtype=dtype, gemm=gemm, engine=engine,
                     stream_window=stream_window, max_logprobs=max_logprobs,
                     tensor_parallel_size=tensor_parallel_size)
        options = dict(checkpoint=str(self.model_dir), **defaults())
        options.update({name: value for name, value in given.items() if value is not None})
        for name, value in options.items():
            if name not in ("checkpoint", "dtype", "gemm", "engine") and (
                    isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32):
                raise errors.InvalidArgumentError(f"LLM option {name} is {value!r}; pass an integer in [0, 2**32)")
        native.validate_options(**options)
        if not self.model_dir.is_dir():
            raise errors.NotFoundError(f"LLM model {str(self.model_dir)!r} is not a directory: pass a Hugging "
                                       "Face model directory (config.json, model.safetensors, tokenizer.json)")
        if native.device_count() == 0:
            raise errors.NoGPUError("no CUDA GPU is visible to this process: Baton's decode loop runs on an "
                                    "NVIDIA GPU (built for sm_90, H100/H200, unless BATON_CUDA_ARCHITECTURES "
                                    "said otherwise); check nvidia-smi and CUDA_VISIBLE_DEVICES")
        self._codec = TextCodec.from_dir(self.model_dir) if (self.model_dir / "tokenizer.json").exists() else None
        self.max_logprobs: int = options["max_logprobs"]
        self._token_texts: Dict[int, str] = {}  # token id -> its text alone (Logprob.decoded_token)
        self._lock = threading.Lock()       # the live requests and their pending tokens
        self._pump_lock = threading.Lock()  # one thread polls the server at a time
        self._live: Dict[int, Request] = {}
        self._early: Dict[int, List[Any]] = {}  # events polled before their submitter registered the id
        self._next_seed = 0
        if load_progress is None:
            load_progress = sys.stderr.isatty()
        from baton.progress import loading_bar

        self._server = native.Server.create(
            **options, load_progress=loading_bar(f"loading {self.model_dir.name}") if load_progress else None)
        self.info: Dict[str, Any] = dict(self._server.info())

    # Text.

    @property
    def tokenizer(self) -> TextCodec:
        """The checkpoint's tokenizer (tokenizer.json) and chat template."""
        if self._codec is None:
            raise errors.InvalidArgumentError(f"{self.model_dir} has no tokenizer.json: pass prompts as token "
                                              "ids, or add the checkpoint's tokenizer.json")
        return self._codec

    def _token_text(self, token: int) -> Optional[str]:
        """A token id decoded alone, special tokens kept (as vLLM decodes Logprob.decoded_token); None without
        a tokenizer. Cached: logprobs decode N + 1 tokens per generated token."""
        if self._codec is None:
            return None
        text = self._token_texts.get(token)
        if text is None:
            text = self._token_texts[token] = self._codec.decode([token], skip_special_tokens=False)
        return text

    def encode(self, prompt: Prompt, chat: bool = False) -> List[int]:
        """A prompt's token ids: a string through the tokenizer (as a user turn of the chat template when
        chat is True), a sequence of ids as they are."""
        if isinstance(prompt, str):
            if chat:
                return self.tokenizer.encode(
                    self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}]),
                    add_special_tokens=False)
            return self.tokenizer.encode(prompt)
        ids = [int(t) for t in prompt]
        if not ids:
            raise errors.InvalidArgumentError("a prompt of token ids is empty: pass at least one token")
        return ids

    # Requests.

    def submit(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
               chat: bool = False) -> Request:
        """Queues one request and returns it at once; iterate it to stream, or call result().

        Raises InvalidArgumentError for a request the model cannot run (naming the field; logprobs above
        max_logprobs) and ResourceExhaustedError when max_requests are already in flight (nothing is lost:
        retry later).
        """
        if sampling_params is not None and sampling_params.n != 1:
            raise errors.InvalidArgumentError(f"submit makes one request; SamplingParams.n is "
                                              f"{sampling_params.n}: use submit_many or generate for n > 1")
        return self.submit_many([prompt], sampling_params, chat)[0]

    def submit_many(self, prompts: Sequence[Prompt], sampling_params: Optional[SamplingParams] = None,
                    chat: bool = False) -> List[Request]:
        """Queues several requests at once, all or none (the device may admit them in the same step):
        sampling_params.n per prompt, prompt by prompt (completion i of a prompt samples with sequence key
        seed + i)."""
        sampling = sampling_params or SamplingParams()
        asked, most = sampling.logprobs, self.max_logprobs
        if asked is not None and (most == 0 or asked > most):
            served = f"at most max_logprobs ({most}) top alternatives" if most else \
                "no log-probabilities (max_logprobs is 0)"
            fix = "ask for fewer" if most else "leave logprobs at None"
            raise errors.InvalidArgumentError(f"SamplingParams.logprobs is {asked}; this LLM returns {served}: {fix}, "
                                              f"or make the LLM with max_logprobs={max(asked, 1)} or more")
        stop_ids = list(sampling.stop_token_ids)
        if not sampling.ignore_eos:
            stop_ids += [t for t in self.info["eos_token_ids"] if t not in stop_ids]
        max_stops = sampling_module.MAX_STOP_TOKENS
        if len(stop_ids) > max_stops:
            raise errors.InvalidArgumentError(
                f"{len(stop_ids)} stop token ids with the checkpoint's end-of-sequence ids "
                f"{self.info['eos_token_ids']}; the device checks at most {max_stops}: pass fewer "
                "stop_token_ids, or ignore_eos=True")
        requests = []
        for p in prompts:
            ids = self.encode(p, chat)
            text = p if isinstance(p, str) else None
            requests += [Request(self, ids, sampling, stop_ids, i, text) for i in range(sampling.n)]
        with self._lock:
            if sampling.seed is not None:
                seeds = [sampling.seed] * len(prompts)
            else:  # a different sampling stream per prompt, reproducible by submission order
                seeds = list(range(self._next_seed, self._next_seed + len(prompts) * sampling.n, sampling.n))
                self._next_seed += len(prompts) * sampling.n
        ids = self._server.submit([(r.prompt_token_ids, sampling.max_tokens, stop_ids, float(sampling.temperature),
                                    sampling.top_k, float(sampling.top_p), seeds[k // sampling.n],
                                    seeds[k // sampling.n] + r.index, float(sampling.presence_penalty),
                                    float(sampling.frequency_penalty), float(sampling.repetition_penalty),
                                    sampling.min_tokens, -1 if sampling.logprobs is None else sampling.logprobs)
                                   for k, r in enumerate(requests)])
        with self._lock:
            for request, request_id in zip(requests, ids):
                request.id = request_id
                self._live[request_id] = request
                for tokens, finished, logprobs in self._early.pop(request_id, ()):
                    request._deliver(tokens, finished, logprobs)
                    if finished:
                        del self._live[request_id]
        return requests

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 chat: bool = False) -> List[RequestOutput]:
        """Runs every prompt (a string, a list of token ids, or a list of either) and returns their outputs
        in order, each with sampling_params.n completions (one SamplingParams for all prompts, or one per
        prompt). They are submitted together (up to max_requests in flight; the rest as earlier ones
        finish) and batched continuously on the device."""
        if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts and
                                        isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(sampling_params, Sequence):
            per_prompt = list(sampling_params)
            if len(per_prompt) != len(prompts):
                raise errors.InvalidArgumentError(
                    f"generate got {len(per_prompt)} SamplingParams for {len(prompts)} prompts: pass one, or one "
                    "per prompt")
        else:
            per_prompt = [sampling_params or SamplingParams()] * len(prompts)
        groups: List[List[Request]] = []
        limit = self.info["max_requests"]
        while len(groups) < len(prompts) or any(not r.finished for g in groups for r in g):
            if len(groups) < len(prompts):
                # Prompts sharing the next one's SamplingParams, as many as the free entries hold.
                room = limit - len(self._live)
                sampling = per_prompt[len(groups)]
                count = 0
                while (len(groups) + count < len(prompts) and per_prompt[len(groups) + count] is sampling and
                       (count + 1) * sampling.n <= room):
                    count += 1
                if count > 0:
                    try:
                        made = self.submit_many(prompts[len(groups):len(groups) + count], sampling, chat)
                        groups += [made[i * sampling.n:(i + 1) * sampling.n] for i in range(count)]
                    except errors.ResourceExhaustedError:
                        pass  # another thread's requests hold the entries: retry once some finish
                elif sampling.n > limit:
                    raise errors.InvalidArgumentError(
                        f"SamplingParams.n is {sampling.n}, more than max_requests ({limit}) in flight at once: "
                        "lower n or raise max_requests")
            try:
                for group in groups:
                    for request in group:
                        if not request.finished:
                            request.poll()
            except errors.BatonError:  # a request's logprobs were lost: the others end too, and their pages return
                for request in (r for g in groups for r in g):
                    request.cancel()
                raise
            self.wait(_POLL_S)
        outputs = []
        for group in groups:
            first = group[0].result()
            first.outputs = [r.result().outputs[0] for r in group]
            outputs.append(first)
        return outputs

    def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None, chat: bool = False
               ) -> Iterator[StreamDelta]:
        """Submits one prompt and yields its tokens and text as the device produces them."""
        return iter(self.submit(prompt, sampling_params, chat))

    def stats(self) -> Dict[str, int]:
        """The runtime's counters: requests submitted, admitted, completed; steps run; the KV pool's pages
        free and reserved by admitted requests (a snapshot)."""
        return dict(self._server.stats())

    def close(self) -> None:
        """Stops the engine (requests still running are given up); further calls raise BatonError."""
        self._server.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Waiting: whichever thread waits polls the server and hands events to their requests.

    def wait(self, timeout_s: float = _POLL_S) -> None:
        """Waits up to timeout_s (the GIL released) for tokens of any request and hands them to their
        requests (Request.poll returns them). Any thread may call it; one polls the device at a time."""
        if not self._pump_lock.acquire(timeout=timeout_s):
            return
        try:
            events = self._server.poll(timeout_s)
        finally:
            self._pump_lock.release()
        with self._lock:
            # logprobs: None (not asked), one record per token, or the native message when they were lost.
            for request_id, tokens, finished, logprobs in events:
                request = self._live.get(request_id)
                if request is None:
                    self._early.setdefault(request_id, []).append((tokens, finished, logprobs))
                else:
                    request._deliver(tokens, finished, logprobs)
                    if finished:
                        del self._live[request_id]

    def _pump_until(self, request: Request) -> None:
        """Polls until the request has something new (or a poll's time passed)."""
        with self._lock:
            ready = bool(request._pending) or request._device_done
        if not ready:
            self.wait(_POLL_S)



def _native():
    """The native module, imported on first use so that importing baton needs no GPU and no CUDA."""
    try:
        from baton import _baton
    except ImportError as e:
        raise errors.BatonError(
            f"baton's native module did not load ({e}): install the package with `pip install .` from the "
            "repository (it builds baton._baton), with the CUDA 13 runtime's libraries on the loader path") from e
    if not getattr(_native, "installed", False):
        errors.install(_baton)
        _native.installed = True
    return _baton
