"""Text in and out: a checkpoint's tokenizer, its chat template, incremental detokenization and stop strings.

Baton's runtime works on token ids; this module turns text into ids and ids back into text on the host, with
the checkpoint's own `tokenizer.json` (through the `tokenizers` package) and the chat template of its
`tokenizer_config.json` (or `chat_template.jinja`), rendered the way transformers renders it.

Streaming text is produced by `Detokenizer`: the text of all tokens so far is exactly `TextCodec.decode` of
them, and pieces are only emitted once they end on a whole character (a token may carry half of a UTF-8
sequence). `StopMatcher` finds stop strings in that text, holding back any tail that could still become one,
so a streamed piece never has to be taken back.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

_REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that do not (yet) form a character


class TextCodec:
    """A checkpoint's tokenizer and chat template.

    Make one with `TextCodec.from_dir(model_dir)`; it needs `tokenizer.json` there.
    """

    def __init__(self, tokenizer: Any, config: Optional[Dict[str, Any]] = None,
                 chat_template: Optional[str] = None) -> None:
        self._tokenizer = tokenizer
        self._config = dict(config or {})
        self._chat_template = chat_template

    @classmethod
    def from_dir(cls, model_dir: Union[str, "pathlib.Path"]) -> "TextCodec":
        """Loads tokenizer.json, tokenizer_config.json (optional) and the chat template (optional)."""
        import tokenizers  # here, so that importing baton needs no tokenizers

        model_dir = pathlib.Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: Baton reads text with the checkpoint's "
                                    "tokenizer.json (save it with tokenizer.save_pretrained), or pass "
                                    "token ids instead of text")
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
        config: Dict[str, Any] = {}
        config_path = model_dir / "tokenizer_config.json"
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise ValueError(f"{config_path} is not valid JSON ({error}); fix or remove it") from None
        template = _chat_template(config, model_dir)
        return cls(tokenizer, config, template)

    @property
    def vocab_size(self) -> int:
        """Token ids the tokenizer knows, added tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def special_token(self, name: str) -> Optional[str]:
        """tokenizer_config.json's bos_token, eos_token, ... as text (None when absent)."""
        value = self._config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        return value if isinstance(value, str) else None

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of `text`, with the tokenizer's own special tokens (e.g. BOS) unless told not to."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a string, not {type(text).__name__}")
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of `ids`."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def has_chat_template(self) -> bool:
        return self._chat_template is not None

    def apply_chat_template(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                            **variables: Any) -> str:
        """Renders `messages` ([{"role": ..., "content": ...}]) with the checkpoint's chat template, as
        transformers does (a sandboxed Jinja environment, trim_blocks and lstrip_blocks, raise_exception and
        strftime_now). The result is text to `encode` with add_special_tokens=False: the template writes
        the special tokens itself."""
        if self._chat_template is None:
            raise ValueError("this checkpoint has no chat template (tokenizer_config.json's chat_template or "
                             "chat_template.jinja): pass the prompt as plain text instead")
        context = {name: self.special_token(name) for name in
                   ("bos_token", "eos_token", "unk_token", "pad_token")}
        context.update(variables)
        return _compile(self._chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt, **context)

    def detokenizer(self, skip_special_tokens: bool = True) -> "Detokenizer":
        """A new incremental detokenizer over this tokenizer."""
        return Detokenizer(self, skip_special_tokens)


class Detokenizer:
    """Text of a growing list of token ids, one piece per `add`, each piece ending on a whole character.

    The pieces joined, after `finish`, equal `TextCodec.decode` of all the ids. Each `add` decodes only the
    tokens since the last emitted piece, plus that piece's tokens as context (a decoder may treat a call's
    first token differently, e.g. drop its leading space), so the cost per token does not grow with length.
    """

    def __init__(self, codec: TextCodec, skip_special_tokens: bool = True) -> None:
        self._codec = codec
        self._skip = skip_special_tokens
        self.ids: List[int] = []
        self._prefix = 0  # context tokens start here
        self._read = 0    # tokens before this are emitted

    def add(self, ids: Sequence[int]) -> str:
        """Appends `ids`; returns the new text that is complete (may be empty)."""
        self.ids.extend(int(i) for i in ids)
        return self._emit(final=False)

    def finish(self) -> str:
        """The rest of the text, incomplete characters included (as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self._read == len(self.ids):
            return ""
        prefix_text = self._codec.decode(self.ids[self._prefix:self._read], self._skip)
        text = self._codec.decode(self.ids[self._prefix:], self._skip)
        if not final and (text.endswith(_REPLACEMENT) or len(text) <= len(prefix_text)):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return text[len(prefix_text):]


def first_stop(text: str, stops: Sequence[str], start: int = 0) -> Optional[int]:
    """Where `text` is cut by the first stop string to appear in it as it grows (the match that ends first;
    of two ending together, the longer), looking from `start`; None when none appears."""
    best: Optional[Tuple[int, int]] = None
    for stop in stops:
        i = text.find(stop, start)
        if i >= 0 and (best is None or (i + len(stop), i) < best):
            best = (i + len(stop), i)
    return None if best is None else best[1]


class StopMatcher:
    """Finds the first stop string in streamed text (`first_stop`: the one completed first).

    `feed(piece)` returns the text that is safe to show and whether a stop string was found; text that
    could still be the start of a stop string is held back until the next piece settles it, and the text
    from a stop string on is never returned.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        self._stops: Tuple[str, ...] = tuple(stops)
        self._text = ""
        self._shown = 0
        self.stopped = False
        self.matched: Optional[str] = None  # the stop string found

    @property
    def text(self) -> str:
        """Everything shown so far."""
        return self._text[:self._shown]

    def feed(self, piece: str) -> Tuple[str, bool]:
        if self.stopped:
            return "", True
        self._text += piece
        start = self._shown
        match = first_stop(self._text, self._stops, start)
        if match is not None:
            end = match
            self.stopped = True
            # Of the stops found at the cut, the one that ends first (first_stop's choice).
            self.matched = min((stop for stop in self._stops if self._text.startswith(stop, match)), key=len)
        else:
            end = len(self._text) - self._held_back(start)
        shown = self._text[start:end]
        self._shown = end
        return shown, self.stopped

    def finish(self) -> str:
        """What was held back, once no more text will come."""
        if self.stopped:
            return ""
        rest = self._text[self._shown:]
        self._shown = len(self._text)
        return rest

    def _held_back(self, start: int) -> int:
        # The longest tail of the unshown text that is a proper prefix of a stop string.
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(self._text) - start), longest, -1):
                if self._text.endswith(stop[:n]):
                    longest = n
                    break
        return longest


def _chat_template(config: Dict[str, Any], model_dir: pathlib.Path) -> Optional[str]:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if isinstance(template, str):
        return template
    path = model_dir / "chat_template.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _compile(template: str) -> Any:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, indent: Optional[int] = None) -> str:
        return json.dumps(value, ensure_ascii=False, indent=indent)

    def strftime_now(format: str) -> str:
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)
