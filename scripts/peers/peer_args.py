"""What the PyTorch peer scripts share that needs no torch: their error type, how main() reports it, their list flags.

Kept apart from gpt_fast_decoder.py (which imports torch) so that --help and input errors work on a machine
without torch, and so that every peer raises and catches the same PeerError.
"""
from __future__ import annotations

import sys
from typing import Callable


class PeerError(RuntimeError):
    """A problem with the inputs or the checks; the message says what to fix."""


def exit_status(run: Callable[[], int]) -> int:
    """run()'s exit status; a PeerError's message on stderr and 2 instead (the peers' main() returns this)."""
    try:
        return run()
    except PeerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def parse_list(text: str, name: str) -> list[int]:
    """'1024,8192' -> [1024, 8192]; anything but positive integers is an error naming the flag."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PeerError(f"--{name}: {text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise PeerError(f"--{name}: {text!r}: give one or more positive integers")
    return values
