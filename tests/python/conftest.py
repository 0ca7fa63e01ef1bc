"""Fixtures: the small tokenizers that test checkpoints carry (scripts/checkpoints/tiny_tokenizer.py).

The tests import the installed package (scripts/pytest.sh installs it from the tree first), never python/
itself: the native module exists only in the installed copy.
"""

import os
import pathlib
import random
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "checkpoints"))

import tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="session", params=["byte-level", "metaspace"])
def codec(request, tmp_path_factory):
    from baton import TextCodec

    directory = tmp_path_factory.mktemp(request.param)
    tiny_tokenizer.write(directory, request.param)
    return TextCodec.from_dir(directory)


@pytest.fixture
def rng():
    """A fresh seed per test (BATON_TEST_SEED repeats one), printed so that a failure can be replayed."""
    seed = int(os.environ.get("BATON_TEST_SEED", random.SystemRandom().randrange(1 << 32)))
    print(f"seed {seed} (BATON_TEST_SEED={seed} repeats it)")
    return random.Random(seed)


CORPUS = tiny_tokenizer.CORPUS
