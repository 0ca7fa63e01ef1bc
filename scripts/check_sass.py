#!/usr/bin/env python3
"""Checks the machine code (SASS) of Baton's kernels for memory instructions
whose cache descriptor no instruction of the function writes.

Every global memory instruction on sm_90 names a 64-bit descriptor in an even
pair of uniform registers (`desc[UR8]`: UR8 and UR9), loaded from the
constant bank or, under an L2 cache policy, built by `createpolicy`. ptxas
(CUDA 13.0) can drop that definition and leave the copies reading an odd,
unwritten register; the kernel then traps with an illegal instruction, but
only in the instantiations it miscompiled, so a step that never launches one
does not notice (docs/cuda-facts.md K16: the decode attention's
grouped head_dim-64 kernel). This reads every kernel the build made instead.

usage: check_sass.py --build BUILD_DIR    the CUDA objects of BUILD_DIR/src
       check_sass.py FILE...              objects, cubins or executables
       check_sass.py --self-test          the checker on made-up listings

cuobjdump and nvdisasm come from $CUOBJDUMP, PATH, the CUDA toolkit or the
build's venv (the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels that
scripts/bootstrap.sh installs there). Exit status: 0 clean, 1 a defect,
2 bad usage or a file cuobjdump cannot read, 77 no cuobjdump (skipped).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

FUNCTION = re.compile(r"^\s*Function : (\S+)", re.M)
# "/*0f70*/   @!P2 LDGSTS.E.BYPASS.128 [R23], desc[UR8][R20.64], !P2 ;"
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);")
DESTINATION = re.compile(r"^(UR\d+)\b")
DESCRIPTOR = re.compile(r"desc\[(UR\d+)\]")


def defects(listing):
    """(function, offset, instruction, why) for each memory instruction whose
    descriptor pair is odd or not written in its function."""
    found = []
    parts = FUNCTION.split(listing)
    for name, body in zip(parts[1::2], parts[2::2]):
        written = set()
        uses = []
        for line in body.splitlines():
            m = INSTRUCTION.match(line)
            if not m:
                continue
            offset, opcode, operands = m.groups()
            d = DESTINATION.match(operands)
            if d:
                n = int(d.group(1)[2:])
                written.add(n)
                if ".64" in opcode:  # ULDC.64 and the like write a pair
                    written.add(n + 1)
            for u in DESCRIPTOR.findall(operands):
                uses.append((offset, f"{opcode} {operands}".strip(), int(u[2:])))
        for offset, text, n in uses:
            if n % 2:
                found.append((name, offset, text, f"descriptor UR{n} is odd (a pair starts even)"))
            elif n not in written or n + 1 not in written:
                found.append((name, offset, text, f"nothing in the function writes UR{n}:UR{n + 1}"))
    return found


def find_cuobjdump(build):
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]
    if build is not None:
        wheels = pathlib.Path(build, "venv").glob("lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump")
        candidates += sorted(str(p) for p in wheels)
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


def listing_of(cuobjdump, path):
    env = dict(os.environ)
    env["PATH"] = str(pathlib.Path(cuobjdump).parent) + os.pathsep + env.get("PATH", "")  # nvdisasm beside it
    r = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump -sass {path}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def self_test():
    good = """
        Function : _Z4goodPi
        /*0000*/                   ULDC.64 UR4, c[0x0][0x208] ;
        /*0010*/                   LDG.E.EF.128 R8, desc[UR4][R2.64] ;
        /*0020*/                   UMOV UR6, 0xf0 ;
        /*0030*/                   UMOV UR7, 0x120 ;
        /*0040*/              @!P2 LDGSTS.E.BYPASS.128 [R23], desc[UR6][R20.64], !P2 ;
        /*0050*/                   EXIT ;
    """
    undefined = """
        Function : _Z9undefinedPi
        /*0000*/                   ULDC.64 UR8, c[0x0][0x208] ;
        /*0010*/              @!P5 LDGSTS.E.BYPASS.128 [R10+UR0+0x1480], desc[UR12][R18.64] ;
    """
    odd = """
        Function : _Z3oddPi
        /*0000*/                   UMOV UR1, 0x120 ;
        /*0010*/                   LDGSTS.E.BYPASS.128 [R10+UR0+0x1480], desc[UR1][R18.64] ;
    """
    half = """
        Function : _Z4halfPi
        /*0000*/                   UMOV UR6, 0xf0 ;
        /*0010*/                   STG.E desc[UR6][R2.64], R0 ;
    """
    checks = [
        (defects(good), 0, None),
        (defects(undefined), 1, "nothing in the function writes UR12:UR13"),
        (defects(odd), 1, "descriptor UR1 is odd"),
        (defects(half), 1, "nothing in the function writes UR6:UR7"),
        (defects(good + undefined + odd), 2, None),
    ]
    failed = 0
    for i, (found, count, why) in enumerate(checks):
        ok = len(found) == count and (why is None or why in found[0][3])
        if not ok:
            failed += 1
            print(f"check_sass self-test {i}: expected {count} defect(s) ({why}), got {found}")
    print(f"check_sass self-test: {len(checks) - failed} of {len(checks)} passed")
    return 1 if failed else 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    build = None
    if len(argv) == 2 and argv[0] == "--build":
        build = argv[1]
        files = sorted(pathlib.Path(build, "src").rglob("*.cu.o"))
        if not files:
            print(f"check_sass: no CUDA objects under {build}/src: build first")
            return 2
    elif argv and not argv[0].startswith("-"):
        files = [pathlib.Path(a) for a in argv]
    else:
        print(__doc__)
        return 2
    cuobjdump = find_cuobjdump(build)
    if cuobjdump is None:
        print("check_sass: skipped: no cuobjdump ($CUOBJDUMP, PATH, /usr/local/cuda/bin"
              + (f", {build}/venv" if build else "") + "); scripts/bootstrap.sh installs it into the build's venv")
        return 77
    total = functions = 0
    for path in files:
        try:
            listing = listing_of(cuobjdump, path)
        except RuntimeError as e:
            print(f"check_sass: {e}")
            return 2
        functions += len(FUNCTION.findall(listing))
        found = defects(listing)
        names = demangle(sorted({f[0] for f in found}))
        for name in sorted({f[0] for f in found}):
            mine = [f for f in found if f[0] == name]
            _, offset, text, why = mine[0]
            print(f"{path}: {names[name]}: {len(mine)} instruction(s), the first at +0x{offset}: "
                  f"{text}: {why}")
        total += len(found)
    print(f"check_sass: {functions} functions in {len(files)} files, {total} defect(s)"
          + (" (docs/cuda-facts.md K16)" if total else ""))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
