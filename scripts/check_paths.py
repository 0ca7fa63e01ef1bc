#!/usr/bin/env python3
"""Fails when the tree names a repository path that does not exist.

Reads every text file git knows (tracked, plus untracked files that are not
ignored) and finds each mention of a path in the repository:

  * a token that starts with one of the tree's top-level folders
    (`src/`, `include/`, `tests/`, `docs/`, `.ci/`, ...; the list is read from
    the tree), optionally after `./`; it is resolved from the repository root;
  * a `baton/<header>` include (`#include <baton/engine.h>`, or a comment
    naming `baton/engine.h`), resolved under include/;
  * an include-like `<layer>/<file>` form with a file extension
    (`kernels/gemv_body.cuh`, `runtime/loop_state.h`), resolved under the src/
    folder of that layer (the name given to baton_layer() in
    src/<folder>/CMakeLists.txt, or the folder's own name); the same for the
    subfolders of tests/ and samples/, which add themselves to the include
    path (`support/gpu_test.h`, `common/init.h`). As the compiler would, such
    a form may also be next to the mentioning file or under its top folder.

A mention passes when it names a file or a folder of the tree. Also accepted:
  * a `:line` or `:line:col` suffix (it is not part of the token);
  * a unit named by its stem (`src/model/checkpoint_config` for
    checkpoint_config.{h,cc});
  * brace alternatives (`src/kernels/decode_kernels.{h,cu}`): each must exist;
  * a pattern: a token with `*`, `?`, a `<placeholder>` or an f-string
    `{name}` (`results/h100-*`, `results/<gpu>-<date>-parity.json`). A pattern
    whose only wildcards are `*`/`?` must match some path of the tree; one
    with placeholders needs only its literal folders to exist. Write a
    placeholder as `<date>`, not `DATE`: an all-capitals word is not taken as
    one (it would let `results/README.md` pass unchecked);
  * in CMake code (not its `#` comments), a path relative to the folder of
    the CMakeLists.txt or .cmake file, as CMake reads it;
  * a path broken over two lines after a `-` or `_` is joined first.

A path of an older commit is written as git's `<commit>:<path>`
(`a4f8d25:src/dynamic_parallelism/`) and checked against that commit (passed
unchecked where the clone lacks the commit). In Markdown, a relative link
target (`[text](../src/runtime/runtime.cc)`) is resolved from the file's folder.

Prints each dangling mention as `file:line: path` and exits 1 if there is any;
otherwise prints a count and exits 0 (77 outside a git work tree).
`--self-test` plants missing paths in a scratch repository and checks that
exactly those are flagged (and that the accepted forms pass).

Paths relative to another folder are not resolved from that folder: write
them from the repository root. ALLOWED below lists the true exceptions.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
import time

SKIPPED = 77  # ctest's SKIP_RETURN_CODE: not run from a git work tree

# True exceptions: (file, path) pairs, or (file, None) for a whole file.
ALLOWED = {
    # A diff against commit 2ce96f8 (scripts/timeline/README.md says so): its
    # paths are that commit's tree, not this one's.
    ("scripts/timeline/kernel_timeline.patch", None),
    # The checker's own self-test plants missing paths (and its docstring
    # shows the accepted forms).
    ("scripts/check_paths.py", None),
    # The results index quotes each record's own description, written against
    # the tree of the record's day; its links to the records themselves are
    # checked by scripts/results_index.py --check.
    ("results/README.md", None),
    # Made-up __FILE__ values that the test feeds to the path trimmer of
    # include/baton/status.h; they are test data, not references.
    ("tests/foundation/status_test.cc", "src/runtime/foo.cc"),
    ("tests/foundation/status_test.cc", "src/kernels/g.cc"),
}

# Which files are text worth reading: source, headers, CMake, scripts,
# Markdown. Generated data (results/*.json, sanitizer logs) is left out.
TEXT_SUFFIXES = (
    ".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".py", ".sh",
    ".cmake", ".in", ".md", ".toml", ".cfg", ".yml", ".yaml", ".patch",
)
TEXT_NAMES = {"CMakeLists.txt"}

HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inc")
# A file extension, as a layer-form mention must end with one.
SOURCE_EXT = re.compile(r"\.(h|hh|hpp|c|cc|cpp|cu|cuh|py|sh|cmake|md|txt|json|inc|in)$")

# The characters of a path token. `<word>` placeholders and `{a,b}`/`{name}`
# groups are taken whole; anything else (space, quote, `:`, `)`, `,`) ends it.
_BODY = r"(?:[A-Za-z0-9_.+\-/*?]|<[A-Za-z0-9_.\-]+>|\{[A-Za-z0-9_.\-,]*\})*"
# Not in the middle of a word or of a longer path (`python/src/x` is one
# python/ path, `/usr/include/absl` none, `${dir}/cmake/x` none).
_START = r"(?<![A-Za-z0-9_.\-/$}@~\\])(?:\./)?"
LINE_COMMENT = re.compile(r"^\s*(?://+|#+|\*+|>+|--)?\s*")


def git_files(root):
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, check=True, capture_output=True).stdout
    names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
    # A tracked file deleted in the working tree is not there any more.
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def include_roots(root, files):
    """Maps each include-like first word to the folders it may be under.

    A layer's name (given to baton_layer() in src/<folder>/CMakeLists.txt) and
    each src/ folder's name go to that src/ folder; each subfolder of tests/
    and samples/ (both on their targets' include paths) to itself.
    """
    roots = {}
    for name in files:
        parts = name.split("/")
        if len(parts) >= 3 and parts[0] in ("src", "tests", "samples"):
            roots.setdefault(parts[1], set()).add("%s/%s" % (parts[0], parts[1]))
    for name in files:
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "src" and parts[2] == "CMakeLists.txt":
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                m = re.search(r"^\s*baton_layer\(\s*([A-Za-z0-9_]+)", f.read(), re.M)
            if m:
                roots.setdefault(m.group(1), set()).add("src/" + parts[1])
    return roots


def is_text(root, name):
    base = os.path.basename(name)
    if base in TEXT_NAMES or name.endswith(TEXT_SUFFIXES):
        return True
    if "." in base.lstrip("."):
        return False
    with open(os.path.join(root, name), "rb") as f:  # a script without a suffix
        return f.read(2) == b"#!"


def expand_braces(token):
    """`a.{h,cu}` -> [`a.h`, `a.cu`]; `{name}` groups stay (they are patterns)."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(token[:m.start()] + alt + token[m.end():]))
    return out


class Tree:
    def __init__(self, root, files):
        self.files = set(files)
        self.dirs = set()
        for name in files:
            parts = name.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.stems = set()
        for name in files:
            base = os.path.basename(name)
            if "." in base.lstrip("."):  # both `a` and `a.cmake` for a.cmake.in
                here = os.path.dirname(name)
                self.stems.add(os.path.join(here, base.split(".")[0]))
                self.stems.add(os.path.join(here, os.path.splitext(base)[0]))
        self.all = sorted(self.files | self.dirs)
        self.includes = include_roots(root, files)
        self.top = sorted(d for d in self.dirs if "/" not in d)

    def exists(self, path):
        path = path.rstrip("/")
        return path in self.files or path in self.dirs or path in self.stems

    def matches(self, pattern):
        pattern = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(p, pattern) for p in self.all)


def pattern_kind(path):
    """None for a plain path, 'glob' for `*`/`?` only, 'placeholder' otherwise."""
    if re.search(r"<[^<>]+>|\{[^{},]*\}", path):
        return "placeholder"
    if "*" in path or "?" in path:
        return "glob"
    return None


def path_ok(tree, path):
    kind = pattern_kind(path)
    if kind is None:
        return tree.exists(path)
    if kind == "glob":
        return tree.matches(path)
    # A placeholder pattern: its literal folders must exist.
    literal = []
    for part in path.split("/")[:-1]:
        if pattern_kind(part):
            break
        literal.append(part)
    return not literal or tree.exists("/".join(literal))


def clean(token):
    token = token.rstrip(".-")
    return token[2:] if token.startswith("./") else token


def is_cmake(name):
    return os.path.basename(name) == "CMakeLists.txt" or name.endswith((".cmake", ".cmake.in"))


# `a1cad1d:src/host/` names a path of an older commit (git's <rev>:<path>).
OLD_COMMIT = re.compile(r"(?<![0-9A-Za-z])([0-9a-f]{7,40}):$")
# A Markdown link's target: `[text](target)` or `[text](target "title")`.
MD_LINK = re.compile(r"\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


class Checker:
    def __init__(self, root):
        self.root = root
        files = git_files(root)
        self.files = files
        self.tree = Tree(root, files)

        def words(names):
            return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

        self.patterns = [
            ("root", re.compile(_START + r"((?:%s)/%s)" % (words(self.tree.top), _BODY))),
            ("baton", re.compile(_START + r"(baton/%s)" % _BODY)),
        ]
        if self.tree.includes:
            self.patterns.append(
                ("include", re.compile(_START + r"((?:%s)/%s)" % (words(self.tree.includes), _BODY))))

    def candidates(self, name, kind, token, cmake_code):
        """The tree paths a token may name."""
        here = os.path.dirname(name)
        if kind == "root":
            out = [token]
            if cmake_code and here:  # CMake reads it from the file's folder
                out.append(os.path.normpath(os.path.join(here, token)))
            return out
        if kind == "baton":
            return ["include/" + token]
        if kind == "link":  # relative to the Markdown file
            return [os.path.normpath(os.path.join(here, token))]
        first, _, rest = token.partition("/")
        out = ["%s/%s" % (folder, rest) for folder in sorted(self.tree.includes[first])]
        if here:
            out.append(os.path.normpath(os.path.join(here, token)))
        out.append(name.split("/")[0] + "/" + token)
        return out

    def mentions(self, name, lines):
        """Yields (line number, kind, token, old commit or None, CMake code?)."""
        cmake = is_cmake(name)
        markdown = name.endswith(".md")
        for number, line in enumerate(lines, 1):
            taken = set()  # start offsets; the first pattern that matches wins
            for kind, pattern in self.patterns:
                for m in pattern.finditer(line):
                    if m.start(1) in taken:
                        continue
                    taken.add(m.start(1))
                    token = m.group(1)
                    # A path broken over two lines after `-` or `_`.
                    if (token.endswith(("-", "_")) and not line[m.end():].strip()
                            and number < len(lines)):
                        nxt = LINE_COMMENT.sub("", lines[number], count=1)
                        token += re.match(_BODY, nxt).group(0)
                    token = clean(token)
                    if kind == "baton" and not token.endswith(HEADER_SUFFIXES):
                        continue
                    if kind == "include" and not all(SOURCE_EXT.search(t)
                                                     for t in expand_braces(token)):
                        continue
                    if kind == "root" and "/" not in token.rstrip("/"):
                        continue  # a bare `src/` or `docs/`: the folder is there
                    old = OLD_COMMIT.search(line[:m.start(1)])
                    before = line[:m.start()]
                    cmake_code = cmake and "#" not in before
                    yield number, kind, token, old.group(1) if old else None, cmake_code
            if markdown:
                for m in MD_LINK.finditer(line):
                    target = re.split(r"[#?]", m.group(1))[0]
                    if not target or target.startswith("/") or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
                        continue  # an anchor, an absolute path or a URL
                    yield number, "link", target, None, False

    def old_paths_missing(self, wanted):
        """Of (commit, path) pairs, those whose commit is here and lacks the path."""
        wanted = sorted(wanted)
        if not wanted:
            return set()
        query = [c for c, _ in wanted] + ["%s:%s" % (c, p.rstrip("/")) for c, p in wanted]
        out = subprocess.run(["git", "cat-file", "--batch-check=%(objecttype)"], cwd=self.root,
                             input="\n".join(query) + "\n", capture_output=True, text=True,
                             check=True).stdout.splitlines()
        n = len(wanted)
        # Where the commit itself is absent (a shallow clone), nothing can be said.
        return {w for i, w in enumerate(wanted)
                if out[i] == "commit" and out[n + i].endswith("missing")}

    def check(self):
        dangling, seen, count, old = [], set(), 0, {}
        for name in self.files:
            if (name, None) in ALLOWED or not is_text(self.root, name):
                continue
            with open(os.path.join(self.root, name), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            for number, kind, token, commit, cmake_code in self.mentions(name, lines):
                if (name, token) in ALLOWED:
                    continue
                count += 1
                for path in expand_braces(token):
                    if commit:
                        if kind == "root" and not pattern_kind(path):
                            old.setdefault((commit, path), []).append((name, number, path))
                        continue
                    if not any(path_ok(self.tree, c)
                               for c in self.candidates(name, kind, path, cmake_code)):
                        if (name, number, path) not in seen:
                            seen.add((name, number, path))
                            dangling.append((name, number, path))
        for commit, path in self.old_paths_missing(old):
            for name, number, _ in old[(commit, path)]:
                dangling.append((name, number, "%s:%s" % (commit, path)))
        dangling.sort(key=lambda d: (d[0], d[1]))
        return dangling, count


def run(root, quiet=False):
    start = time.monotonic()
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root,
                            capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        print("check_paths: %s is not a git work tree; nothing checked" % root, file=sys.stderr)
        return SKIPPED
    checker = Checker(root)
    dangling, count = checker.check()
    for name, number, path in dangling:
        print("%s:%d: %s" % (name, number, path))
    took = time.monotonic() - start
    if dangling:
        print("check_paths: %d of %d path mentions in %d files name nothing in the tree (%.2f s)"
              % (len(dangling), count, len(checker.files), took), file=sys.stderr)
        return 1
    if not quiet:
        print("check_paths: all %d path mentions in %d files exist (%.2f s)"
              % (count, len(checker.files), took))
    return 0


def self_test():
    """Plants dangling paths (and accepted forms) in a scratch repository."""
    old_files = {"src/old/gone.cc": ""}
    files = {
        "src/kernels/CMakeLists.txt": "baton_layer(kernels)\n",
        "src/host/CMakeLists.txt": "baton_layer(runtime\n  SOURCES loop.cc)\n",
        "src/host/loop.cc": "",
        "src/kernels/body.cuh": "",
        "include/baton/engine.h": "",
        "results/h100-2026-01-01-run.json": "",
        "docs/a.md": "[ok](../src/host/loop.cc#L3) [web](https://x.org/src/gone) [bad](b.md)\n",
        "tests/support/harness.h": "",
        "tests/t.cc": "#include \"kernels/body.cuh\"\n#include \"support/harness.h\"\n",
        "tests/CMakeLists.txt": "add_executable(t t.cc support/harness.h)  # support/gone.h\n",
        "scripts/ok.py": "\n".join([
            "# src/host/loop.cc:12:3 and ./src/kernels/body.cuh, src/host/, src/host/loop",
            "# #include <baton/engine.h>, `runtime/loop.cc`, \"kernels/body.cuh\"",
            "# results/h100-*, results/<gpu>-<date>-run.json, results/{prefix}-*",
            "# docs/a.md. python/src/module.cc /usr/include/absl ${dir}/cmake/x host/device",
            "# results/h100-2026-01-01-",
            "#     run.json",
            "# {old}:src/old/gone.cc, deadbeef:src/whatever.cc",
            "",
        ]),
        "scripts/bad.py": "\n".join([
            "# src/kernels/gone.cuh",
            "# see src/dynamic_parallelism/ and results/h200-*",
            "# baton/gone.h and \"kernels/gone.cuh\"",
            "# src/host/loop.{cc,h} and results/archive/<gpu>-<date>.json",
            "# {old}:src/never.cc, results/h100-DATE-run.json",
            "",
        ]),
    }
    with tempfile.TemporaryDirectory() as root:
        def write(tree):
            for name, text in tree.items():
                os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
                with open(os.path.join(root, name), "w") as f:
                    f.write(text)

        def git(*args):
            return subprocess.run(
                ["git", "-c", "user.name=check_paths", "-c", "user.email=check_paths@localhost",
                 "-c", "commit.gpgsign=false", *args],
                cwd=root, check=True, capture_output=True, text=True).stdout.strip()

        git("init", "-q")
        write(old_files)
        git("add", "-A")
        git("commit", "-q", "--no-verify", "-m", "old")
        old = git("rev-parse", "--short=10", "HEAD")
        git("rm", "-q", "-r", "src/old")
        write({n: t.replace("{old}", old) for n, t in files.items()})
        want = {
            ("docs/a.md", 1, "b.md"),
            ("scripts/bad.py", 1, "src/kernels/gone.cuh"),
            ("scripts/bad.py", 2, "src/dynamic_parallelism/"),
            ("scripts/bad.py", 2, "results/h200-*"),
            ("scripts/bad.py", 3, "baton/gone.h"),
            ("scripts/bad.py", 3, "kernels/gone.cuh"),
            ("scripts/bad.py", 4, "src/host/loop.h"),
            ("scripts/bad.py", 4, "results/archive/<gpu>-<date>.json"),
            ("scripts/bad.py", 5, old + ":src/never.cc"),
            ("scripts/bad.py", 5, "results/h100-DATE-run.json"),
            ("tests/CMakeLists.txt", 1, "support/gone.h"),
        }
        got = set(Checker(root).check()[0])
    if got != want:
        print("check_paths --self-test: FAILED", file=sys.stderr)
        for item in sorted(want - got):
            print("  not flagged: %s:%d: %s" % item, file=sys.stderr)
        for item in sorted(got - want):
            print("  flagged wrongly: %s:%d: %s" % item, file=sys.stderr)
        return 1
    print("check_paths --self-test: ok (%d planted dangling paths flagged, none else)" % len(want))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository root (default: this script's repository)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on a scratch tree with planted missing paths")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
