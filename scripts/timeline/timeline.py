#!/usr/bin/env python3
"""Prints a kernel timeline recorded by kernel_timeline.patch (see README.md).

usage: timeline.py FILE            one line per kernel (grid), in start order
       timeline.py FILE GRID       one line per block of that grid

Times are microseconds. Per kernel: first/last block start (enter), first/last
block past its wait for the previous node (wait), last block exit, the time
from the last wait to the last exit (the kernel's own share of the critical
path), the gap from the previous kernel's exit to this one's last wait (the
node boundary), and the slowest block's marks 3..6 relative to its wait.
"""
import collections
import struct
import sys


def records(path):
    data = open(path, 'rb').read()
    for i in range(len(data) // 64):
        yield i, struct.unpack_from('<8Q', data, i * 64)


def kernels(path):
    grids = collections.defaultdict(list)
    for _, r in records(path):
        grids[r[0]].append(r[1:])
    rows = []
    for grid, blocks in grids.items():
        enters = [b[0] for b in blocks if b[0]]
        waits = [b[1] for b in blocks if b[1]]
        exits = [b[2] for b in blocks if b[2]]
        if not enters or not exits:
            continue
        slowest = max(blocks, key=lambda b: b[2])
        rows.append((min(enters), max(enters), min(waits) if waits else 0,
                     max(waits) if waits else 0, max(exits), len(blocks), grid, slowest))
    rows.sort()
    t0 = rows[0][0]
    rel = lambda t: (t - t0) / 1e3 if t else float('nan')
    print('grid blocks  enter0  enterN   wait0   waitN    exit   own   gap | marks 3..6 | exit')
    last_exit = None
    for r in rows:
        gap = (r[3] - last_exit) / 1e3 if last_exit and r[3] else float('nan')
        s = r[7]
        marks = ' '.join('%5.2f' % ((m - s[1]) / 1e3) if m and s[1] else '  -  ' for m in s[3:7])
        own = (r[4] - r[3]) / 1e3 if r[3] else 0
        print('%4d %6d %7.2f %7.2f %7.2f %7.2f %7.2f %5.2f %5.2f | %s | %5.2f' %
              (r[6] & 0xffff, r[5], rel(r[0]), rel(r[1]), rel(r[2]), rel(r[3]), rel(r[4]), own,
               gap, marks, (s[2] - s[1]) / 1e3 if s[1] else 0))
        last_exit = r[4]


def blocks(path, want):
    rows = [r for _, r in records(path) if (r[0] & 0xffff) == want]
    t0 = min(r[1] for r in rows)
    for r in rows:
        marks = ' '.join('%5.2f' % ((m - r[2]) / 1e3) if m else '  -  ' for m in r[4:8])
        print('enter %5.2f wait %5.2f | %s | exit %5.2f' %
              ((r[1] - t0) / 1e3, (r[2] - t0) / 1e3, marks, (r[3] - r[2]) / 1e3))


if __name__ == '__main__':
    if len(sys.argv) == 3:
        blocks(sys.argv[1], int(sys.argv[2]))
    else:
        kernels(sys.argv[1])
