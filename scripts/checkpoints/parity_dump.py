"""The parity dump decode_loop --parity_out=PREFIX writes, read and validated.

  PREFIX.json        {"checkpoint", "dtype": "bf16"|"fp16", "vocab", "logits_file",
                      "runs": [{"batch", "driver", "sequences": [{"entry", "prompt",
                      "generated", "logits_row"}]}]}
  PREFIX.logits.f32  float32 little-endian rows of `vocab` values; row k holds the
                     logits of the step that produced a sequence's last generated
                     token (position len(prompt) + len(generated) - 2). A sequence
                     that ended before its run's last step (prompts split into
                     staggered chunks) has "logits_row": null: tokens only.
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The dtypes Baton serves and dumps.
DTYPES = ("bf16", "fp16")


class ParityError(RuntimeError):
    """A problem with the inputs (dump, checkpoint, Baton run); the message says what to fix."""


@dataclass
class Sequence:
    entry: int
    prompt: list[int]
    generated: list[int]
    logits_row: int | None  # None: the sequence ended before the run's last step (tokens only)

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(self.prompt) + tuple(self.generated)


@dataclass
class Run:
    batch: int
    driver: str
    sequences: list[Sequence]


@dataclass
class Dump:
    path: pathlib.Path
    checkpoint: pathlib.Path
    dtype: str
    vocab: int
    logits: np.ndarray  # [rows, vocab] float32, memory-mapped
    runs: list[Run] = field(default_factory=list)


def _field(obj: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in obj:
        raise ParityError(f"{where}: missing \"{key}\"")
    if not isinstance(obj[key], kind):
        raise ParityError(f"{where}: \"{key}\" should be {kind}, is {type(obj[key]).__name__}")
    return obj[key]


def read_dump(prefix: str | pathlib.Path) -> Dump:
    """Reads and validates PREFIX.json and its logits file, naming the first thing wrong."""
    prefix = pathlib.Path(prefix)
    json_path = prefix if prefix.suffix == ".json" else prefix.with_name(prefix.name + ".json")
    if not json_path.is_file():
        raise ParityError(f"no parity dump at {json_path} (did decode_loop run with --parity_out={prefix}?)")
    try:
        meta = json.loads(json_path.read_text())
    except json.JSONDecodeError as error:
        raise ParityError(f"{json_path} is not valid JSON: {error}") from error
    where = str(json_path)
    dtype = _field(meta, "dtype", where, str)
    if dtype not in DTYPES:
        raise ParityError(f"{where}: dtype {dtype!r}, expected one of {list(DTYPES)}")
    vocab = _field(meta, "vocab", where, int)
    logits_file = pathlib.Path(_field(meta, "logits_file", where, str))
    if not logits_file.is_absolute() and not logits_file.exists():
        logits_file = json_path.parent / logits_file  # relative to the dump, if not to the working directory
    if not logits_file.is_file():
        raise ParityError(f"{where}: logits_file {logits_file} does not exist")
    size = logits_file.stat().st_size
    if vocab <= 0 or size % (4 * vocab) != 0:
        raise ParityError(f"{logits_file}: {size} bytes is not a whole number of float32 rows of vocab {vocab}")
    rows = size // (4 * vocab)
    logits = np.memmap(logits_file, dtype="<f4", mode="r", shape=(rows, vocab)) if rows else np.zeros((0, vocab))
    dump = Dump(json_path, pathlib.Path(_field(meta, "checkpoint", where, str)), dtype, vocab, logits)
    for r, run in enumerate(_field(meta, "runs", where, list)):
        rwhere = f"{where}: runs[{r}]"
        sequences = []
        for s, seq in enumerate(_field(run, "sequences", rwhere, list)):
            swhere = f"{rwhere}.sequences[{s}]"
            sequence = Sequence(_field(seq, "entry", swhere, int), _field(seq, "prompt", swhere, list),
                                _field(seq, "generated", swhere, list),
                                _field(seq, "logits_row", swhere, (int, type(None))))
            if not sequence.prompt or not sequence.generated:
                raise ParityError(f"{swhere}: empty prompt or no generated tokens")
            bad = [t for t in sequence.prompt + sequence.generated if not isinstance(t, int) or not 0 <= t < vocab]
            if bad:
                raise ParityError(f"{swhere}: token {bad[0]!r} outside [0, {vocab})")
            if sequence.logits_row is not None and not 0 <= sequence.logits_row < rows:
                raise ParityError(f"{swhere}: logits_row {sequence.logits_row} outside the file's {rows} rows")
            sequences.append(sequence)
        dump.runs.append(Run(_field(run, "batch", rwhere, int), _field(run, "driver", rwhere, str), sequences))
    if not dump.runs:
        raise ParityError(f"{where}: no runs")
    return dump


def write_dump(prefix: pathlib.Path, checkpoint: pathlib.Path, dtype: str, vocab: int,
               runs: list[tuple[int, str, list[tuple[int, list[int], list[int], np.ndarray]]]]) -> None:
    """Writes a dump in Baton's format (the self-test's fabricated Baton)."""
    rows: list[np.ndarray] = []
    meta_runs = []
    for batch, driver, sequences in runs:
        seqs = []
        for entry, prompt, generated, last_logits in sequences:
            seqs.append({"entry": entry, "prompt": prompt, "generated": generated, "logits_row": len(rows)})
            rows.append(np.asarray(last_logits, dtype="<f4"))
        meta_runs.append({"batch": batch, "driver": driver, "sequences": seqs})
    logits_path = prefix.with_name(prefix.name + ".logits.f32")
    np.stack(rows).astype("<f4").tofile(logits_path)
    meta = {"checkpoint": str(checkpoint), "dtype": dtype, "vocab": vocab, "logits_file": str(logits_path),
            "runs": meta_runs}
    prefix.with_name(prefix.name + ".json").write_text(json.dumps(meta) + "\n")


