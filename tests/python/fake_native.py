"""A stand-in for the native module's Server on a machine without a GPU, so that the CPU tests run the real
Python layers above it (LLM, AsyncLLM, the HTTP server) end to end. It keeps the native contract
(include/baton/server.h): submit is all-or-none and refuses with ResourceExhaustedError when the request table
is full, a request's tokens arrive in order across polls, its last event has finished=True, cancel ends it at its
next token, and every request's KV pages return to the pool when it ends.

Its "model" is a rule the tests can compute themselves: token k of a request is
(sum(prompt) * 31 + 7 * k + (seed if sampled else 0)) % vocab, and its logprobs (a request that asked for N) are
logprobs_rule(token, k, N). One step per poll: up to max_batch requests (admitted in submission order) each get
one token. Like the native server, poll returns (id, tokens, finished, logprobs): logprobs None without them,
else one (chosen logprob, [(id, logprob)] best first) per token (None in an event without tokens), or a message
(str) when a request's records were lost, which lose_logprobs_at (a count of generated tokens) makes happen: that
event's tokens come without theirs, its later events carry None, and the request runs on.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from baton import errors

VOCAB = 512
LOST = ("the log-probabilities of request {id}'s tokens from {k} were overwritten before the host read them (it "
        "fell more than stream_window tokens behind): raise stream_window or read more often")


def rule(prompt: List[int], k: int, temperature: float, seed: int, sequence: int) -> int:
    return (sum(prompt) * 31 + 7 * k + ((seed * 1009 + sequence) if temperature > 0 else 0)) % VOCAB


def logprobs_rule(token: int, k: int, n: int) -> Tuple[float, List[Tuple[int, float]]]:
    """Token k's (chosen logprob, top n best first). At even k the chosen token ranks first; at odd k it is not
    among the top n (its logprob below theirs). Multiples of 1/8: exact in float32, as the device's are."""
    base = -0.125 * (1 + k % 5)
    others = [t for t in ((token + 1 + 37 * j) % VOCAB for j in range(n + 1)) if t != token][:n]
    if k % 2 == 0:
        top = ([(token, base)] + [(t, base - 0.5 * (j + 1)) for j, t in enumerate(others)])[:n]
        return base, top
    return base - 0.5 * n - 1.0, [(t, base - 0.5 * j) for j, t in enumerate(others)]


class FakeServer:
    def __init__(self, max_requests: int = 64, max_batch: int = 8, max_context: int = 256, page_tokens: int = 16,
                 pool_pages: int = 256, eos: int = 4, max_logprobs: int = 20) -> None:
        self.max_requests, self.max_batch, self.max_context = max_requests, max_batch, max_context
        self.max_logprobs = max_logprobs
        self.lose_logprobs_at: Optional[int] = None
        self.page_tokens, self.pool_pages, self.eos = page_tokens, pool_pages, eos
        self.lock = threading.Lock()
        self.next_id = 1
        self.live: Dict[int, Dict[str, Any]] = {}  # id -> request, in submission order
        self.cancelled: List[int] = []
        self.finished: List[int] = []
        self.steps = self.submitted = self.admitted = self.completed = 0
        self.closed = False
        self.step_s = 0.0005  # how long one poll (one step) takes at least

    def info(self) -> Dict[str, Any]:
        return {"source": "fake", "architecture": "LlamaForCausalLM", "eos_token_ids": [self.eos],
                "context_limit": "fake", "vocab_size": VOCAB, "max_context": self.max_context, "layers": 1,
                "hidden_size": 64, "dtype": "bfloat16", "max_batch": self.max_batch, "max_tokens_per_step": 64,
                "max_tokens_without_decodes": 64, "max_requests": self.max_requests,
                "max_logprobs": self.max_logprobs, "engine": "fake",
                "weight_bytes": 0, "kv_page_tokens": self.page_tokens, "kv_pool_pages": self.pool_pages}

    def submit(self, requests: List[Tuple]) -> List[int]:
        with self.lock:
            if self.closed:
                raise errors.BatonError("Server::Submit: the server was closed")
            for i, (prompt, max_new, stops, *_rest, logprobs) in enumerate(requests):
                if len(prompt) + max_new > self.max_context:
                    raise errors.InvalidArgumentError(f"request {i} of {len(requests)}: prompt of {len(prompt)} "
                                                      f"tokens and max_new_tokens {max_new} exceed max_context "
                                                      f"{self.max_context}")
                if logprobs >= 0 and (self.max_logprobs == 0 or logprobs > self.max_logprobs):
                    raise errors.InvalidArgumentError(f"request {i} of {len(requests)}: logprobs {logprobs} above "
                                                      f"max_logprobs {self.max_logprobs}")
            if len(self.live) + len(requests) > self.max_requests:
                raise errors.ResourceExhaustedError(f"{len(requests)} requests submitted, "
                                                    f"{self.max_requests - len(self.live)} entries free")
            ids = []
            self.last_submitted = list(requests)
            # The penalties and min_tokens (fields 8 to 11) change logits this rule does not have; logprobs
            # (field 12) are the rule's raw ones, which they do not change either.
            for (prompt, max_new, stops, temperature, top_k, top_p, seed, sequence, _presence, _frequency,
                 _repetition, _min_tokens, logprobs) in requests:
                rid = self.next_id
                self.next_id += 1
                self.live[rid] = dict(prompt=list(prompt), max_new=max_new, stops=set(stops),
                                      temperature=temperature, seed=seed, sequence=sequence, tokens=[],
                                      sent=0, cancel=False, admitted=False, done=False, logprobs=logprobs,
                                      lost=False)
                ids.append(rid)
            self.submitted += len(requests)
            return ids

    def pages(self, r: Dict[str, Any]) -> int:
        return -(-(len(r["prompt"]) + r["max_new"]) // self.page_tokens)

    def poll(self, timeout_s: float) -> List[Tuple[int, List[int], bool, Any]]:
        time.sleep(self.step_s)
        with self.lock:
            if self.closed:
                raise errors.BatonError("Server::Poll: the server was closed")
            running = [rid for rid, r in self.live.items() if r["admitted"]]
            for rid, r in self.live.items():  # admission in order while slots and pages last
                if not r["admitted"] and len(running) < self.max_batch and self.pages(r) <= self.free_pages():
                    r["admitted"] = True
                    self.admitted += 1
                    running.append(rid)
            events = []
            if running:
                self.steps += 1
            for rid in running:
                r = self.live[rid]
                if r["cancel"]:
                    r["done"] = True
                else:
                    token = rule(r["prompt"], len(r["tokens"]), r["temperature"], r["seed"], r["sequence"])
                    r["tokens"].append(token)
                    r["done"] = token in r["stops"] or len(r["tokens"]) >= r["max_new"]
                events.append((rid, r["tokens"][r["sent"]:], r["done"], self.logprobs(rid, r)))
                r["sent"] = len(r["tokens"])
                if r["done"]:
                    del self.live[rid]
                    self.finished.append(rid)
                    self.completed += 1
            return events

    def logprobs(self, rid: int, r: Dict[str, Any]) -> Any:
        """The event's logprobs: None, one record per new token, or the message when they were lost (once)."""
        if r["logprobs"] < 0 or r["lost"] or len(r["tokens"]) == r["sent"]:
            return None
        if self.lose_logprobs_at is not None and len(r["tokens"]) > self.lose_logprobs_at:
            r["lost"] = True
            return LOST.format(id=rid, k=r["sent"])
        return [logprobs_rule(t, k, r["logprobs"]) for k, t in enumerate(r["tokens"]) if k >= r["sent"]]

    def free_pages(self) -> int:
        return self.pool_pages - sum(self.pages(r) for r in self.live.values() if r["admitted"])

    def cancel(self, rid: int) -> None:
        with self.lock:
            if rid in self.live:
                self.live[rid]["cancel"] = True
                self.cancelled.append(rid)

    def pending(self) -> int:
        return len(self.live)

    def stats(self) -> Dict[str, int]:
        with self.lock:
            return {"submitted": self.submitted, "steps": self.steps, "admitted": self.admitted,
                    "completed": self.completed, "engine_launches": 1, "free_pages": self.free_pages(),
                    "reserved_pages": self.pool_pages - self.free_pages()}

    def close(self) -> None:
        with self.lock:
            self.closed = True


class FakeNative:
    """The native module with its Server replaced (defaults, limits and option checks are the real ones)."""

    def __init__(self, real: Any, **server_options: Any) -> None:
        self.real, self.server_options = real, server_options
        self.servers: List[FakeServer] = []
        self.created: List[Dict[str, Any]] = []  # the options each Server.create got
        native = self

        class Server:
            @staticmethod
            def create(**options: Any) -> FakeServer:
                native.created.append(dict(options))
                progress = options.get("load_progress")
                if progress is not None:
                    progress(1 << 20, 1 << 20)
                server = FakeServer(**{"max_requests": options["max_requests"],
                                       "max_logprobs": options["max_logprobs"], **native.server_options})
                native.servers.append(server)
                return server

        self.Server = Server

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def device_count(self) -> int:
        return 1
