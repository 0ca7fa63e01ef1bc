"""The compute-sanitizer part of a performance block, parsed from the
results/*sanitizers*.txt and *racecheck*.txt files of the run's GPU and day.

Line formats those files use (anything else, '#' comments included, is left
to the reader of the file):
  control memcheck: caught (2 errors)
  memcheck device_test: exit 0, 0 sanitizer errors [(--gtest_filter=...)]
  memcheck device_fault_gpu_test: skipped (why)
  [memcheck ]decode_gemv_gpu_test rc=0 errors=0 at 9 s
  memcheck runtime_gpu_test rc=0 error_reports=0 [filter=...] at 2 s
"""
import re

from . import inputs
from .tables import link, series, table

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_CONTROL = re.compile(r"^control (\w+): caught \((\d+) errors?\)")
_EXIT = re.compile(r"^(\w+) ([\w.-]+): exit (\d+), (\d+|\?) sanitizer errors?(.*)$")
_SKIP = re.compile(r"^(\w+) ([\w.-]+): skipped \((.*)\)$")
_RC = re.compile(r"^(?:(%s) )?([\w.-]+) rc=(\d+) (?:errors|error_reports)=(\d*)(\s+filter=\S+)?" % "|".join(TOOLS))


def parse(body, default_tool=None):
    """{tool: {'runs': {binary: (rc, errors, filtered)}, 'rerun': set, 'skipped': {binary: why},
    'control': errors or None}} with each binary's last run."""
    tools = {}

    def tool(name):
        return tools.setdefault(name, {"runs": {}, "rerun": set(), "skipped": {}, "control": None})

    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _CONTROL.match(line)
        if m:
            tool(m.group(1))["control"] = int(m.group(2))
            continue
        m = _SKIP.match(line)
        if m and m.group(1) in TOOLS:
            tool(m.group(1))["skipped"][m.group(2)] = m.group(3)
            continue
        m = _EXIT.match(line)
        if m and m.group(1) in TOOLS:
            name, binary, rc, errors, rest = m.groups()
            run = (int(rc), None if errors == "?" else int(errors), "--gtest_filter" in rest)
        else:
            m = _RC.match(line)
            if not m or not (m.group(1) or default_tool):
                continue
            name, binary, rc, errors, filtered = m.groups()
            name = name or default_tool
            run = (int(rc), int(errors) if errors else None, bool(filtered))
        t = tool(name)
        if binary in t["runs"] and t["runs"][binary][:2] != (0, 0):
            t["rerun"].add(binary)
        t["runs"][binary] = run
    return tools


def _clean(run):
    return run[0] == 0 and run[1] == 0


def _failed(runs):
    return [f"{binary} (exit {rc}, {'?' if err is None else err} errors)"
            for binary, (rc, err, _) in runs.items() if not (rc == 0 and err == 0)]


def _cell(t):
    """One tool in one file: clean counts, failures of the last run, skips, the control."""
    if t is None:
        return "not run"
    extra = [f"+{t['filtered']} with tests left out"] if t["filtered"] else []
    extra += [f"{t['reruns']} after a failing run"] if t["rerun"] else []
    parts = [f"{t['clean']} clean" + (f" ({', '.join(extra)})" if extra else "")]
    failed = _failed(t["runs"])
    if failed:
        parts.append("not clean: " + series(failed))
    if t["skipped"]:
        parts.append(f"{t['skips']} skipped")
    if t["control"] is not None:
        parts.append(f"control caught ({t['control']} errors)" if t["control"] > 0 else "**control not caught**")
    return "; ".join(parts)


def sanitizer_files(prefix):
    """The run's own sanitizer file, then every other of its GPU and day, archived ones included (each covers
    other binaries or tools), by name."""
    gpu, date = inputs.gpu_of(prefix)
    globs = (f"{gpu}-{date}*sanitizers*.txt", f"{gpu}-{date}*racecheck*.txt")
    files = sorted({p for g in globs for p in inputs.current(g) + inputs.archived(g)}, key=lambda p: p.name)
    own = inputs.path_of(prefix, "sanitizers")
    return ([own] if own.exists() else []) + [f for f in files if f != own]


def sanitizer_part(b, prefix):
    files = []
    for path in sanitizer_files(prefix):
        body = b.text(path)
        default = next((t for t in TOOLS if t in path.name), None)
        tools = parse(body, default)
        for t in tools.values():
            runs = t["runs"].values()
            t["clean"] = b.derive(sum(1 for r in runs if _clean(r) and not r[2]))
            t["filtered"] = b.derive(sum(1 for r in runs if _clean(r) and r[2]))
            t["skips"] = b.derive(len(t["skipped"]))
            t["reruns"] = b.derive(len(t["rerun"]))
        files.append((path, tools))
    if not files:
        return []
    columns = [("tool", lambda tool: tool)] + [
        (link(path), lambda tool, tools=tools: _cell(tools.get(tool)))
        for path, tools in files]
    notes = ["The sanitizer files of this GPU and day (a binary's last run counts); their `#` comments say "
             "which build each covers and, with `scripts/sanitizer_skips.sh`, why a binary was skipped, failed "
             "or timed out."]
    used = [t for t in TOOLS if any(t in tools for _, tools in files)]
    return [f"### Correctness under compute-sanitizer{b.heading}", "", table(columns, used), "", " ".join(notes), ""]
