"""Where the README's numbers come from, and the check that they do.

A Block reads its inputs through json()/text()/code()/given(). Every number
those hold comes back as a tracked int or float: formatting one (f"{x:.1f}",
str(x)) records the printed text. A value computed from inputs (a ratio, a
sum, a unit change) must go through derive(), which tracks it too; plain
arithmetic on tracked values gives untracked ones. check() then scans the
rendered block: every number it states must be one a tracked value printed,
or appear as written inside an input's text (a JSON string or key, a text
file), or it names the sentence and the number. A number typed into a
template therefore fails unless an input states it.
"""
import collections
import fnmatch
import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "results"

sys.path.insert(0, str(ROOT / "scripts"))
import results_index  # noqa: E402  (scripts/results_index.py: the index of results/ this package reads)

# A number as printed: 1,234 / -2.5 / 2.10e-2 / 12 (a sign only after a space,
# '(' or '|', so "2-layer" is 2), not inside a word (H200, b1, sm_90).
_NUM = re.compile(r"(?:(?<=[\s(|])[-−])?(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
# Numbers inside input text (strings, keys, text files).
_RAW = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Exempt from the check: dates, cited files, commit ids.
_EXEMPT = [re.compile(p) for p in (
    r"\d{4}-\d{2}-\d{2}(?:T[\d:]+Z)?",
    r"(?:results|docs|scripts|samples|include|src|tests)/[\w./*-]+",
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",
)]


def _norm(text):
    return text.replace(",", "").replace("−", "-").lstrip("+")


def _tracked(base):
    """A `base` (int or float) read from an input or derived from inputs: printing it is recorded."""

    class Tracked(base):
        def __new__(cls, value, block):
            obj = base.__new__(cls, value)
            obj._block = block
            return obj

        def __format__(self, spec):
            return self._block._emit(base.__format__(self, spec) if spec else base.__repr__(self))

        def __str__(self):
            return self.__format__("")

    Tracked.__name__ = Tracked.__qualname__ = "T" + base.__name__.capitalize()
    return Tracked


TInt = _tracked(int)
TFloat = _tracked(float)


def relative(path):
    """A path from the repository root (absolute outside it: --results elsewhere)."""
    path = pathlib.Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


class NumberCheckError(Exception):
    pass


class Block:
    """One generated README block: its inputs, what it printed, its citations."""

    def __init__(self, name):
        self.name = name
        self.files = []
        self.emitted = collections.Counter()  # printed text of tracked values
        self.written = set()  # numbers as written inside input text
        self.exempt = []  # literal strings the check skips (model names)
        self.heading = ""  # appended to the block's headings (" on the H100" when several GPUs)

    def _emit(self, text):
        self.emitted[_norm(text)] += 1
        return text

    def _cite(self, path):
        rel = relative(path)
        if rel not in self.files:
            self.files.append(rel)
        return rel

    def _strings(self, text):
        self.written.update(_RAW.findall(text))

    def _track(self, obj):
        if isinstance(obj, bool) or obj is None:
            return obj
        if isinstance(obj, int):
            return TInt(obj, self)
        if isinstance(obj, float):
            return TFloat(obj, self) if math.isfinite(obj) else obj
        if isinstance(obj, str):
            self._strings(obj)
            return obj
        if isinstance(obj, dict):
            for k in obj:
                self._strings(str(k))
            return {k: self._track(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._track(v) for v in obj)
        return obj

    def json(self, path):
        path = pathlib.Path(path)
        self._cite(path)
        return self._track(json.loads(path.read_text()))

    def text(self, path):
        path = pathlib.Path(path)
        body = path.read_text()
        self._cite(path)
        self._strings(body)
        return body

    def code(self, rel, pattern):
        """A constant of the committed code: group 1 of `pattern` in ROOT/rel."""
        m = re.search(pattern, (ROOT / rel).read_text())
        if not m:
            raise NumberCheckError(f"{self.name}: {rel} no longer matches {pattern!r}")
        self._cite(ROOT / rel)
        text = m.group(1)
        return self._track(int(text) if text.isdigit() else float(text))

    def given(self, values):
        """An input parsed elsewhere (a config dict), tracked."""
        return self._track(values)

    def derive(self, value):
        """A value computed from this block's inputs, tracked."""
        return self._track(value)

    def check(self, text):
        """(sentence, number) for each number no tracked value printed and no input writes."""
        masked = text
        for literal in self.exempt:
            masked = masked.replace(literal, " " * len(literal))
        for pattern in _EXEMPT:
            masked = pattern.sub(lambda m: " " * len(m.group(0)), masked)
        left = collections.Counter(self.emitted)
        problems = []
        for m in _NUM.finditer(masked):
            token = _norm(m.group(0))
            if left[token] > 0:
                left[token] -= 1
            elif token.lstrip("-") not in self.written:
                problems.append((_sentence(text, m.start()), m.group(0)))
        return problems


def _sentence(text, pos):
    start = max(text.rfind("\n", 0, pos), text.rfind(". ", 0, pos)) + 1
    ends = [i for i in (text.find("\n", pos), text.find(". ", pos)) if i >= 0]
    return text[start:min(ends) if ends else len(text)].strip()


# --- result files: prefixes, GPUs, newest runs ------------------------------

# What a run's prefix holds (results/<prefix>-<suffix>); REQUIRED make it complete.
SUFFIXES = {
    "decode": "decode-loop.json",
    "gemv": "decode-loop-gemv.json",
    "soak": "decode-loop-soak.json",
    "soak_conditional": "decode-loop-soak-conditional.json",
    "launch": "launch_comparison.json",
    "queue": "queue-contention.json",
    "prep": "graph-prep.json",
    "suite": "gpu-suite.json",
    "sanitizers": "sanitizers.txt",
}
REQUIRED = ("decode", "launch", "queue", "prep", "suite", "sanitizers")
_PREFIX = re.compile(r"^(?P<gpu>[a-z]\d+(?:x\d+)?)-(?P<date>\d{4}-\d{2}-\d{2})")
_NAME_DATE = re.compile(r"^[a-z]\d+(?:x\d+)?-(\d{4}-\d{2}-\d{2}[a-z]?)-")


def gpu_of(prefix):
    m = _PREFIX.match(prefix)
    if not m:
        raise ValueError(f"'{prefix}' is not <gpu>-<yyyy-mm-dd>[tag] (e.g. h200-2026-11-23-split)")
    return m.group("gpu"), m.group("date")


def _run_time(paths):
    """The newest 'date' field of these JSON files (ISO strings sort)."""
    times = []
    for p in paths:
        if p.suffix == ".json":
            try:
                times.append(str(json.loads(p.read_text()).get("date", "")))
            except (ValueError, AttributeError, OSError):
                pass
    return max(times, default="")


# --- which files are current: results/README.md, the index scripts/results_index.py writes ---------------------

def index():
    """RESULTS as its index lists it (current files, archived ones); SystemExit, naming the difference, while the
    index is out of date with the folder. Read on every call: the self-test swaps RESULTS and rewrites files."""
    return results_index.read(RESULTS)


def current(glob="*"):
    """The current results files whose names match `glob`, by name."""
    return sorted((p for p in index().current if fnmatch.fnmatchcase(p.name, glob)), key=lambda p: p.name)


def archived(glob="*"):
    """The archived (superseded) results files whose names match `glob`, by name."""
    return sorted((p for p in index().archived if fnmatch.fnmatchcase(p.name, glob)), key=lambda p: p.name)


def order(path):
    """Newer sorts later: the date in the name (2026-11-22 < 2026-11-22b), the file's 'date' field, the name."""
    m = _NAME_DATE.match(path.name)
    return (m.group(1) if m else "", _run_time([path]), path.name)


def gpus(glob):
    """The GPUs with a current file matching `glob`."""
    return sorted({gpu_of(p.name)[0] for p in current(glob) if _PREFIX.match(p.name)})


def has(prefix, part):
    """Whether the run `prefix` has a current `part` file."""
    name = f"{prefix}-{SUFFIXES[part]}"
    return any(p.name == name for p in index().current)


def path_of(prefix, part):
    """Where the run's `part` file is: results/ if current, results/archive/ if superseded (else results/, absent)."""
    name = f"{prefix}-{SUFFIXES[part]}"
    idx = index()
    return next((p for p in idx.current + idx.archived if p.name == name), RESULTS / name)


def prefixes(part, with_archived=False):
    """Every prefix with a current `part` file (and an archived one if `with_archived`)."""
    suffix = "-" + SUFFIXES[part]
    found = []
    for p in current("*" + suffix) + (archived("*" + suffix) if with_archived else []):
        prefix = p.name[: -len(suffix)]
        if _PREFIX.match(prefix):
            found.append(prefix)
    return found


def newest(gpu, part, complete=False):
    """The newest prefix of `gpu` with a current `part` (and every REQUIRED part current if `complete`)."""
    best, best_time = None, ""
    for prefix in prefixes(part):
        if gpu_of(prefix)[0] != gpu:
            continue
        if complete and not all(has(prefix, r) for r in REQUIRED):
            continue
        t = _run_time([path_of(prefix, k) for k in SUFFIXES if has(prefix, k)])
        if best is None or (t, prefix) > (best_time, best):
            best, best_time = prefix, t
    return best


def newest_complete_prefixes():
    gpus_ = sorted({gpu_of(p)[0] for p in prefixes("decode")})
    return [p for p in (newest(g, "decode", complete=True) for g in gpus_) if p]


def newest_file(gpu, glob, with_archived=False):
    """The newest results/<gpu>-<glob> file the index lists as current (or archived too), by order()."""
    files = current(f"{gpu}-{glob}") + (archived(f"{gpu}-{glob}") if with_archived else [])
    return max(files, key=order, default=None)


def require(found, block, glob, writer, doc="README.md"):
    """`found` (a block's input files), or the refusal every block gives when its markers are in `doc` and
    results/ holds no file of its kind: commit one (made by `writer`) or remove the markers."""
    if not found:
        raise SystemExit(f"{doc} has the {block} block's markers but results/ holds no {glob}: commit one "
                         f"({writer}) or remove the markers")
    return found
