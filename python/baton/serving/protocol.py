"""The OpenAI wire format: request bodies checked and turned into Baton's SamplingParams, and the response and
error objects. Pure functions of their arguments (no engine, no GPU): the CPU tests drive them directly.

Every refusal is an ApiError that renders as OpenAI's error object, {"error": {"message", "type", "param",
"code"}}, its message naming the field, the value and what is accepted. The fields follow OpenAI's API and
vLLM's extensions (top_k, stop_token_ids, ignore_eos, skip_special_tokens, repetition_penalty, min_tokens); the
fields Baton does not compute yet (prompt_logprobs, min_p, logit_bias, ...) are accepted at their "off" value
(null, 0) and refused otherwise, and an unknown field is refused by name.

Log-probabilities (SamplingParams.logprobs says what they are): /v1/completions' `logprobs` (0 to 20, vLLM's
bound; OpenAI's is 5) gives OpenAI's legacy object {tokens, token_logprobs, top_logprobs, text_offset};
/v1/chat/completions' `logprobs: true` and `top_logprobs` (0 to 20) give {content: [{token, logprob, bytes,
top_logprobs}]}. A token's string is its id decoded alone (as vLLM does; bytes are its UTF-8), and a logprob
that is not finite is written as -9999.0 (vLLM's floor: JSON has no -Infinity).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from baton import sampling as sampling_module
from baton.logprobs import TokenLogprobs, chosen_and_top
from baton.sampling import MAX_N, SamplingParams

# Completions per prompt (n) and stop strings per request: bounds on the host work one request may ask for.
MAX_STOP_STRINGS = 16
SEED_LIMIT = 1 << 64


class ApiError(Exception):
    """A refusal: HTTP status, OpenAI error object, extra headers (Retry-After for 503)."""

    TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
             413: "invalid_request_error", 503: "server_error", 500: "server_error"}

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


def bad(field: Optional[str], message: str) -> ApiError:
    return ApiError(400, message, field)


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What the server fills in: the checkpoint's generation_config.json sampling values (vLLM does the same),
    else OpenAI's (temperature 1, top_p 1); max_tokens for completions (OpenAI: 16) and, for chat (OpenAI: the
    rest of the context), at most chat_max_tokens: Baton reserves a request's KV pages for its prompt and
    max_tokens when it is admitted, so an unbounded default would hold the pool."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    completion_max_tokens: int = 16
    chat_max_tokens: int = 1024

    @classmethod
    def from_generation_config(cls, config: Mapping[str, Any], **others: Any) -> "Defaults":
        values: Dict[str, Any] = {}
        if not config.get("do_sample", True):
            values["temperature"] = 0.0
        elif isinstance(config.get("temperature"), (int, float)):
            values["temperature"] = float(config["temperature"])
        if isinstance(config.get("top_p"), (int, float)) and 0 < config["top_p"] <= 1:
            values["top_p"] = float(config["top_p"])
        if isinstance(config.get("top_k"), int) and config["top_k"] >= 0:
            values["top_k"] = int(config["top_k"])
        return cls(**values, **others)


# Fields Baton reads (besides the endpoint's own), fields it accepts at their "off" value, fields it ignores.
_SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "stop_token_ids",
                    "ignore_eos", "skip_special_tokens", "stream", "stream_options", "presence_penalty",
                    "frequency_penalty", "repetition_penalty", "min_tokens", "logprobs")
_OFF = {"min_p": (0, 0.0, None),
        "logit_bias": (None, {}), "best_of": (None, 1), "prompt_logprobs": (None,)}
_IGNORED = ("user", "metadata", "store", "service_tier")
_COMPLETION_FIELDS = ("model", "prompt", "echo", "suffix") + _SAMPLING_FIELDS
_CHAT_FIELDS = ("model", "messages", "max_completion_tokens", "add_generation_prompt", "tools", "tool_choice",
                "functions", "function_call", "parallel_tool_calls", "response_format",
                "top_logprobs") + _SAMPLING_FIELDS
# A logprob that JSON cannot carry (-inf, NaN) is written as this, as vLLM writes it.
LOGPROB_FLOOR = -9999.0


@dataclasses.dataclass
class GenerationRequest:
    """A checked request: its prompts (text or token ids; chat messages already rendered to text), the
    sampling for each, and how to answer."""

    model: Optional[str]
    prompts: List[Union[str, List[int]]]
    sampling: SamplingParams
    max_tokens_given: bool
    stream: bool
    include_usage: bool
    max_tokens_field: str = "max_tokens"
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (vLLM's): usage in every chunk
    echo: bool = False
    chat_messages: Optional[List[Dict[str, str]]] = None
    add_generation_prompt: bool = True
    logprobs_field: str = "logprobs"  # the field that asked for sampling.logprobs (chat: top_logprobs if given)


def _get(body: Mapping[str, Any], name: str, kinds: Tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise bad(name, f"'{name}' is {json.dumps(value)}; expected {what}")
    if not isinstance(value, kinds):
        raise bad(name, f"'{name}' is {json.dumps(value)[:80]}; expected {what}")
    return value


def _check_fields(body: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for name, value in body.items():
        if name in allowed or name in _IGNORED:
            continue
        if name in _OFF:
            if value in _OFF[name]:
                continue
            raise bad(name, f"'{name}' is {json.dumps(value)[:80]}: Baton does not compute {name} yet; leave it "
                            f"out (or {json.dumps(_OFF[name][0])})")
        raise bad(name, f"unknown field '{name}'; this endpoint takes {', '.join(sorted(allowed))}")


def _sampling(body: Mapping[str, Any], defaults: Defaults, max_tokens_field: str,
              default_max_tokens: int, logprobs: Optional[int]) -> Tuple[SamplingParams, bool]:
    max_tokens = _get(body, max_tokens_field, (int,), "an integer >= 1")
    if max_tokens is not None and max_tokens < 1:
        raise bad(max_tokens_field, f"'{max_tokens_field}' is {max_tokens}; it must be at least 1")
    temperature = _get(body, "temperature", (int, float), "a number >= 0")
    if temperature is not None and (not math.isfinite(temperature) or temperature < 0):
        raise bad("temperature", f"'temperature' is {temperature}; it must be >= 0 (0: greedy)")
    top_p = _get(body, "top_p", (int, float), "a number in (0, 1]")
    if top_p is not None and not (0 < top_p <= 1):
        raise bad("top_p", f"'top_p' is {top_p}; it must lie in (0, 1]")
    top_k = _get(body, "top_k", (int,), "an integer (-1 or 0: off)")
    if top_k is not None and top_k < -1:
        raise bad("top_k", f"'top_k' is {top_k}; it must be -1 or 0 (off) or a count of tokens")
    n = _get(body, "n", (int,), f"an integer in [1, {MAX_N}]")
    if n is not None and not 1 <= n <= MAX_N:
        raise bad("n", f"'n' is {n}; it must lie in [1, {MAX_N}]")
    seed = _get(body, "seed", (int,), "an integer in [0, 2**64)")
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise bad("seed", f"'seed' is {seed}; it must lie in [0, 2**64)")
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise bad("stop", f"'stop' is {json.dumps(stop)[:80]}; expected a non-empty string or a list of them")
        if len(stop) > MAX_STOP_STRINGS:
            raise bad("stop", f"'stop' holds {len(stop)} strings; at most {MAX_STOP_STRINGS}")
    stop_ids = _get(body, "stop_token_ids", (list,), "a list of token ids")
    if stop_ids is not None and not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                        for t in stop_ids):
        raise bad("stop_token_ids", f"'stop_token_ids' is {json.dumps(stop_ids)[:80]}; expected token ids >= 0")
    flags = {name: _get(body, name, (bool,), "true or false") for name in ("ignore_eos", "skip_special_tokens")}
    penalties = {name: _get(body, name, (int, float), what) for name, what in (
        ("presence_penalty", "a number in [-2, 2]"), ("frequency_penalty", "a number in [-2, 2]"),
        ("repetition_penalty", "a number > 0"))}
    min_tokens = _get(body, "min_tokens", (int,), "an integer >= 0")
    try:
        sampling = SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else default_max_tokens,
            temperature=float(temperature if temperature is not None else defaults.temperature),
            top_p=float(top_p if top_p is not None else defaults.top_p),
            top_k=top_k if top_k is not None else defaults.top_k,
            seed=seed, stop=stop, stop_token_ids=stop_ids or (), n=n or 1,
            ignore_eos=bool(flags["ignore_eos"]),
            skip_special_tokens=flags["skip_special_tokens"] is not False,
            presence_penalty=float(penalties["presence_penalty"] or 0.0),
            frequency_penalty=float(penalties["frequency_penalty"] or 0.0),
            repetition_penalty=float(penalties["repetition_penalty"] if penalties["repetition_penalty"] is not None
                                     else 1.0),
            min_tokens=min_tokens or 0, logprobs=logprobs)
    except (TypeError, ValueError) as e:  # a limit of the device's (top_k past the vocabulary, stop ids)
        text = str(e)
        field = None
        if text.startswith("SamplingParams."):
            field = text.split(".", 1)[1].split(" ", 1)[0].split("[", 1)[0]
        raise bad(field, text.replace("SamplingParams.", "", 1)) from None
    return sampling, max_tokens is not None


def _stream_flags(body: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    """stream, include_usage, continuous_usage_stats."""
    stream = bool(_get(body, "stream", (bool,), "true or false"))
    options = _get(body, "stream_options", (dict,), "an object")
    include_usage = continuous = False
    if options is not None:
        if not stream:
            raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true")
        for name in options:
            if name not in ("include_usage", "continuous_usage_stats"):
                raise bad("stream_options", f"unknown field 'stream_options.{name}'; it takes include_usage and "
                                            "continuous_usage_stats")
        include_usage = bool(_get(options, "include_usage", (bool,), "true or false"))
        continuous = bool(_get(options, "continuous_usage_stats", (bool,), "true or false"))
    return stream, include_usage, continuous


def _top_count(body: Mapping[str, Any], name: str) -> Optional[int]:
    """An integer field counting top alternatives (completions' logprobs, chat's top_logprobs), or None."""
    most = sampling_module.MAX_LOGPROBS  # the device's limit (20)
    count = _get(body, name, (int,), f"an integer in [0, {most}]")
    if count is not None and not 0 <= count <= most:
        raise bad(name, f"'{name}' is {count}; it must lie in [0, {most}] (top alternatives per token)")
    return count


def _model(body: Mapping[str, Any]) -> Optional[str]:
    return _get(body, "model", (str,), "the served model's name (GET /v1/models lists it)")


def parse_completion(body: Any, defaults: Defaults) -> GenerationRequest:
    """POST /v1/completions: prompt is a string, a list of strings, a list of token ids, or a list of those."""
    if not isinstance(body, dict):
        raise bad(None, f"the body is a JSON {type(body).__name__}; expected an object")
    _check_fields(body, _COMPLETION_FIELDS)
    prompt = body.get("prompt")
    if prompt is None:
        raise bad("prompt", "'prompt' is missing: pass a string, a list of strings, or token ids")
    if isinstance(prompt, str):
        prompts: List[Union[str, List[int]]] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                     for t in prompt):
        prompts = [list(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif isinstance(prompt, list) and prompt and all(
            isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
            for p in prompt):
        prompts = [list(p) for p in prompt]
    else:
        raise bad("prompt", f"'prompt' is {json.dumps(prompt)[:80]}; expected a non-empty string, a list of "
                            "strings, a list of token ids, or a list of lists of token ids")
    for i, p in enumerate(prompts):
        if isinstance(p, str) and not p:
            raise bad("prompt", f"'prompt' {i} is empty: pass at least one character")
        if isinstance(p, list) and any(t < 0 for t in p):
            raise bad("prompt", f"'prompt' {i} holds a negative token id")
    if body.get("suffix") not in (None, ""):
        raise bad("suffix", "'suffix' (fill in the middle) is not supported: leave it out")
    echo = _get(body, "echo", (bool,), "true or false") or False
    # OpenAI's legacy field counts alternatives; false (off) is taken too, as Baton took it before.
    logprobs = None if body.get("logprobs") is False else _top_count(body, "logprobs")
    if echo and logprobs is not None:
        raise bad("logprobs", "'echo' with 'logprobs' would need the prompt's log-probabilities, which Baton does "
                              "not compute yet: drop 'echo' or 'logprobs'")
    sampling, given = _sampling(body, defaults, "max_tokens", defaults.completion_max_tokens, logprobs)
    stream, include_usage, continuous = _stream_flags(body)
    return GenerationRequest(_model(body), prompts, sampling, given, stream, include_usage, echo=echo,
                             continuous_usage=continuous)


_ROLES = ("system", "developer", "user", "assistant", "tool")


def _message_text(i: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"messages[{i}].content[{k}]",
                          f"'messages[{i}].content[{k}]' is {json.dumps(part)[:80]}; Baton serves text: expected "
                          '{"type": "text", "text": "..."}')
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"messages[{i}].content", f"'messages[{i}].content' is {json.dumps(content)[:80]}; expected a "
                                        "string or a list of text parts")


def parse_chat(body: Any, defaults: Defaults) -> GenerationRequest:
    """POST /v1/chat/completions: messages rendered later through the checkpoint's chat template."""
    if not isinstance(body, dict):
        raise bad(None, f"the body is a JSON {type(body).__name__}; expected an object")
    _check_fields(body, _CHAT_FIELDS)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    rendered = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad(f"messages[{i}]", f"'messages[{i}]' is {json.dumps(message)[:80]}; expected an object")
        role = message.get("role")
        if role not in _ROLES:
            raise bad(f"messages[{i}].role", f"'messages[{i}].role' is {json.dumps(role)}; expected one of "
                                             f"{', '.join(_ROLES)}")
        for name in message:
            if name not in ("role", "content", "name"):
                raise bad(f"messages[{i}].{name}", f"'messages[{i}].{name}' is not supported (Baton serves text "
                                                   "messages: role, content, name)")
        rendered.append({"role": role, "content": _message_text(i, message.get("content", ""))})
    for name in ("tools", "functions"):
        if body.get(name) not in (None, []):
            raise bad(name, f"'{name}' (tool calls) is not supported: leave it out")
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none"):
            raise bad(name, f"'{name}' is not supported: leave it out")
    format_ = body.get("response_format")
    if format_ not in (None, {"type": "text"}):
        raise bad("response_format", "'response_format' other than {\"type\": \"text\"} is not supported")
    if body.get("max_completion_tokens") is not None and body.get("max_tokens") is not None:
        raise bad("max_tokens", "pass 'max_completion_tokens' or 'max_tokens', not both")
    field = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    wanted = _get(body, "logprobs", (bool,), "true or false")
    top = _top_count(body, "top_logprobs")
    if top is not None and not wanted:
        raise bad("top_logprobs", f"'top_logprobs' is {top} but 'logprobs' is not true: set \"logprobs\": true "
                                  "to get log-probabilities (top_logprobs counts the alternatives)")
    sampling, given = _sampling(body, defaults, field, defaults.chat_max_tokens, (top or 0) if wanted else None)
    stream, include_usage, continuous = _stream_flags(body)
    add = _get(body, "add_generation_prompt", (bool,), "true or false")
    return GenerationRequest(_model(body), [], sampling, given, stream, include_usage, max_tokens_field=field,
                             chat_messages=rendered, add_generation_prompt=add is not False,
                             continuous_usage=continuous,
                             logprobs_field="top_logprobs" if top is not None else "logprobs")


def check_length(prompt_tokens: int, request: GenerationRequest, max_context: int, pool_tokens: int,
                 field: str) -> SamplingParams:
    """The request's sampling with max_tokens fitted (or the refusal): prompt and max_tokens must fit the
    context and the KV pool. A max_tokens the client did not give shrinks to what fits, as OpenAI's does."""
    sampling = request.sampling
    limit = min(max_context, pool_tokens)
    what = (f"the context ({max_context} tokens)" if max_context <= pool_tokens
            else f"the KV pool ({pool_tokens} tokens)")
    if prompt_tokens >= limit:
        raise bad(field, f"the prompt is {prompt_tokens} tokens; {what} leaves no room to generate: shorten "
                         f"it below {limit} tokens")
    if prompt_tokens + sampling.max_tokens > limit:
        if request.max_tokens_given:
            raise bad(request.max_tokens_field, f"the prompt ({prompt_tokens} tokens) and max_tokens "
                                                f"({sampling.max_tokens}) exceed {what}: ask for at most "
                                                f"{limit - prompt_tokens}")
        if limit - prompt_tokens < sampling.min_tokens:
            raise bad("min_tokens", f"min_tokens is {sampling.min_tokens}, but after the prompt ({prompt_tokens} "
                                    f"tokens) {what} leaves {limit - prompt_tokens}")
        sampling = sampling.replace(max_tokens=limit - prompt_tokens)
    return sampling


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> Dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_object(request_id: str, model: str, choices: List[Dict[str, Any]],
                      usage_: Optional[Dict[str, int]], chunk: bool = False,
                      created: Optional[int] = None) -> Dict[str, Any]:
    """A text_completion (also each streamed chunk: OpenAI's stream uses the same object)."""
    body: Dict[str, Any] = {"id": request_id, "object": "text_completion", "created": created or int(time.time()),
                            "model": model, "choices": choices}
    if not chunk or usage_ is not None:
        body["usage"] = usage_
    elif chunk:
        body["usage"] = None
    return body


def completion_choice(index: int, text: str, finish_reason: Optional[str],
                      logprobs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def chat_object(request_id: str, model: str, choices: List[Dict[str, Any]], usage_: Optional[Dict[str, int]],
                created: Optional[int] = None) -> Dict[str, Any]:
    return {"id": request_id, "object": "chat.completion", "created": created or int(time.time()), "model": model,
            "choices": choices, "usage": usage_}


def chat_choice(index: int, text: str, finish_reason: str, logprobs: Optional[Dict[str, Any]] = None
                ) -> Dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish_reason}


def chat_chunk(request_id: str, model: str, created: int, choices: List[Dict[str, Any]],
               usage_: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices, "usage": usage_}


def chat_delta(index: int, delta: Dict[str, Any], finish_reason: Optional[str],
               logprobs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


def _token_string(token: int, text: Optional[str]) -> str:
    # Without a tokenizer there is no text: vLLM's spelling for a token shown as its id.
    return text if text is not None else f"token_id:{token}"


def completion_logprobs(token_ids: Sequence[int], entries: Sequence[TokenLogprobs],
                        text_offset: int) -> Tuple[Dict[str, Any], int]:
    """OpenAI's legacy logprobs object for these tokens, and the text offset after them. top_logprobs holds, per
    token, the top N and the chosen token ({token string: logprob}, as vLLM fills it); text_offset[i] is
    `text_offset` plus the lengths of the earlier tokens' strings (vLLM's rule: a token decoded alone may differ
    from its share of the text, e.g. half of a character)."""
    out: Dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token, entry in zip(token_ids, entries):
        chosen = entry[int(token)]
        text = _token_string(token, chosen.decoded_token)
        out["tokens"].append(text)
        out["token_logprobs"].append(_finite(chosen.logprob))
        out["top_logprobs"].append({_token_string(t, p.decoded_token): _finite(p.logprob) for t, p in entry.items()})
        out["text_offset"].append(text_offset)
        text_offset += len(text)
    return out, text_offset


def chat_logprobs(token_ids: Sequence[int], entries: Sequence[TokenLogprobs]) -> Dict[str, Any]:
    """OpenAI's chat logprobs object for these tokens: per token its string, logprob, UTF-8 bytes and the top N
    in rank order (exactly top_logprobs of them)."""
    def item(token: int, text: Optional[str], logprob: float) -> Dict[str, Any]:
        string = _token_string(token, text)
        return {"token": string, "logprob": _finite(logprob), "bytes": list(string.encode("utf-8"))}

    content = []
    for token, entry in zip(token_ids, entries):
        chosen, top = chosen_and_top(token, entry)
        content.append(dict(item(token, chosen.decoded_token, chosen.logprob),
                            top_logprobs=[item(t, p.decoded_token, p.logprob) for t, p in top]))
    return {"content": content}


def sse(obj: Any) -> bytes:
    """One server-sent event; `[DONE]` ends OpenAI's streams. The JSON is ASCII: text may hold U+0085, U+2028
    or U+2029, which JSON leaves unescaped and clients that split lines with str.splitlines (httpx's
    iter_lines) would cut an event at."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def parse_body(raw: bytes) -> Any:
    """The body as JSON, or a 400 naming where it failed to parse."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(None, f"the body is not valid JSON ({e}): send a JSON object") from None
