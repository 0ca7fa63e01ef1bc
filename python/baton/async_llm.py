"""AsyncLLM: the LLM for asyncio code (the HTTP server, baton.server), vLLM's AsyncLLM in shape.

    llm = AsyncLLM(LLM(model_dir))
    async for delta in llm.generate(prompt_ids, SamplingParams(max_tokens=64)):
        print(delta.text, end="")

One thread (the pump) polls the native server for every request's tokens, the GIL released while it waits, and
wakes each request's waiter on its event loop (loop.call_soon_threadsafe); the loop never blocks on the GPU.
Leaving an `async for` early (the client went away: the task is cancelled, or the generator is closed) cancels
the request on the device, whose pages return to the pool when it ends at its next step.
"""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Dict, List, Optional, Sequence

from baton.llm import LLM, Prompt, Request, StreamDelta
from baton.sampling import SamplingParams

# How long the pump waits for tokens per poll; it also bounds how late it notices close().
_PUMP_POLL_S = 0.002


class AsyncLLM:
    """Streams an LLM's requests to asyncio tasks. Thread-safe like LLM; every coroutine runs on the loop that
    calls it."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self._work = threading.Condition()  # notified when requests are submitted, and by close()
        self._closed = False
        self.error: Optional[Exception] = None  # the failure that stopped the pump
        self._pump = threading.Thread(target=self._pump_loop, name="baton-pump", daemon=True)
        self._pump.start()

    @property
    def info(self) -> Dict:
        return self.llm.info

    def submit(self, prompts: Sequence[Prompt], sampling_params: SamplingParams,
               chat: bool = False) -> List[Request]:
        """Queues prompts × sampling_params.n requests at once, all or none (LLM.submit_many); raises what it
        raises (ResourceExhaustedError when the request table is full: nothing was queued)."""
        if self.error is not None:
            raise self.error
        loop = asyncio.get_running_loop()
        requests = self.llm.submit_many(prompts, sampling_params, chat)
        with self._work:
            self._work.notify()
        for request in requests:
            event = asyncio.Event()
            request._async_event = event  # type: ignore[attr-defined]
            request.on_event = lambda e=event: loop.call_soon_threadsafe(e.set)
            # Tokens delivered before on_event was set are picked up by the first poll of stream().
        return requests

    async def stream(self, request: Request) -> AsyncIterator[StreamDelta]:
        """Yields what each step added to `request` (its tokens' logprobs too, when it asked) until it
        finishes. Cancelled or closed early, it cancels the request on the device. Raises what ended it
        otherwise: the pump's failure, or BatonError when the request's logprobs were lost."""
        event: asyncio.Event = request._async_event  # type: ignore[attr-defined]
        try:
            while True:
                event.clear()
                delta = request.poll()  # raises the request's error (Request._error)
                if delta.token_ids or delta.text or delta.finished:
                    yield delta
                if delta.finished:
                    return
                await event.wait()
        finally:
            if not request.finished and self.error is None:
                # The pump still hands the device's end to the request (it is live until then).
                request.cancel()

    async def generate(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                       chat: bool = False) -> AsyncIterator[StreamDelta]:
        """Submits one prompt (n must be 1) and streams it."""
        sampling = sampling_params or SamplingParams()
        if sampling.n != 1:
            raise ValueError(f"AsyncLLM.generate streams one completion; SamplingParams.n is {sampling.n}: "
                             "use submit and stream each request")
        request = self.submit([prompt], sampling, chat)[0]
        async for delta in self.stream(request):
            yield delta

    def _pump_loop(self) -> None:
        while True:
            with self._work:
                while not self._closed and not self.llm._live:
                    self._work.wait()
                if self._closed:
                    return
            try:
                self.llm.wait(_PUMP_POLL_S)
            except Exception as e:  # a device failure: every waiter sees it as its request's end
                self._fail(e)
                return

    def _fail(self, error: Exception) -> None:
        self.error = error
        with self.llm._lock:
            for request in self.llm._live.values():
                request._error = error
                request._deliver([], True)

    def stop(self) -> None:
        """Stops the pump; the LLM keeps running (its own waits poll it)."""
        with self._work:
            self._closed = True
            self._work.notify()
        self._pump.join()

    def close(self) -> None:
        """Stops the pump and the engine (requests still running are given up)."""
        self.stop()
        self.llm.close()
