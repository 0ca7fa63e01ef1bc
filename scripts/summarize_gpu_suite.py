#!/usr/bin/env python3
"""Summarizes a gpu_suite.sh output folder into summary.json and summary.txt.

Counts gtest results per binary (passed / failed / skipped; a skipped GPU test
on a GPU machine counts against the run, except a multi-GPU test skipped on a
machine with fewer GPUs: its skip message starts "multi-GPU:" and it counts as
skipped_multi_gpu) and collects each sample's verdict; a sample run split across more GPUs than the machine
has (gpu_suite.sh lists it in samples_skipped.txt) is reported as skipped, not failed.
"""
import csv
import datetime
import json
import pathlib
import sys


def test_counts(path):
    data = json.loads(path.read_text())
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for suite in data.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = f"{suite['name']}.{case['name']}"
            if case.get("failures"):
                counts["failed"] += 1
                counts["failures"].append(name)
            elif case.get("result") == "SKIPPED":
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
    return counts


def main(out):
    out = pathlib.Path(out)
    device = {}
    rows = list(csv.reader((out / "device.csv").read_text().splitlines()))
    if len(rows) >= 2:
        device = dict(zip([h.strip() for h in rows[0]], [v.strip() for v in rows[1]]))
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device,
        "tests": {},
        "samples": {},
    }
    ok = True
    for rc_file in sorted((out / "logs").glob("*.rc")):
        name = rc_file.stem
        rc = int(rc_file.read_text().strip() or 1)
        test_json = out / "tests" / f"{name}.json"
        sample_json = out / "samples" / f"{name}.json"
        if test_json.exists() or (out / "logs" / f"{name}.log").read_text().find("[==========]") >= 0:
            counts = test_counts(test_json) if test_json.exists() else {
                "passed": 0, "failed": 1, "skipped": 0, "failures": ["<no gtest json>"]}
            counts["exit"] = rc
            log = (out / "logs" / f"{name}.log").read_text(errors="replace")
            multi = min(counts["skipped"], log.count("\nmulti-GPU: "))
            counts["skipped"] -= multi
            counts["skipped_multi_gpu"] = multi
            summary["tests"][name] = counts
            ok &= rc == 0 and counts["failed"] == 0 and counts["skipped"] == 0
        else:
            entry = {"exit": rc}
            if sample_json.exists():
                data = json.loads(sample_json.read_text())
                entry["passed"] = data.get("passed", False)
                entry["failures"] = data.get("failures", [])
                entry["rows"] = data.get("rows", [])
                entry["params"] = data.get("params", {})
            summary["samples"][name] = entry
            ok &= rc == 0
    skipped_file = out / "samples_skipped.txt"  # runs split across more GPUs than visible
    for line in (skipped_file.read_text().splitlines() if skipped_file.exists() else []):
        name, _, reason = line.partition("\t")
        summary["samples"][name] = {"skipped": reason}
    totals = {k: sum(t.get(k, 0) for t in summary["tests"].values())
              for k in ("passed", "failed", "skipped", "skipped_multi_gpu")}
    summary["totals"] = totals
    summary["ok"] = ok
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"GPU suite on {device.get('name', '?')} (driver {device.get('driver_version', '?')}), "
             f"{summary['date']}"]
    for name, t in summary["tests"].items():
        multi = f", {t['skipped_multi_gpu']} need more GPUs" if t.get("skipped_multi_gpu") else ""
        lines.append(f"  test   {name:32s} {t['passed']} passed, {t['failed']} failed, "
                     f"{t['skipped']} skipped{multi} (exit {t['exit']})")
        lines += [f"         FAILED {f}" for f in t["failures"]]
    for name, s in summary["samples"].items():
        if "skipped" in s:
            lines.append(f"  sample {name:32s} skipped ({s['skipped']})")
            continue
        lines.append(f"  sample {name:32s} {'Passed' if s.get('passed') and s['exit'] == 0 else 'FAILED'} "
                     f"(exit {s['exit']})")
    multi = (f" ({totals['skipped_multi_gpu']} multi-GPU tests skipped: too few GPUs)"
             if totals["skipped_multi_gpu"] else "")
    lines.append(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped{multi}")
    lines.append("suite: OK" if ok else "suite: FAILED")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu-suite-out"))
