"""Measure how many READ and WRITE RPCs the real client sends for a file's data.

The question (issue 27, item 4): does the Linux client move a file's data in
RPCs of at most rsize/wsize bytes each, so that a 32 MiB write is
32 MiB / wsize WRITEs (``nfs_generic_pg_test``, fs/nfs/pagelist.c), and how
many bytes besides the data does each carry?  simfs sends one RPC per
rsize/wsize bytes of a contiguous run and charges the data at the host's
link rate (docs/design.md, "Data takes time").

Run inside the VM with two mounts, a and b (nosharecache: own caches):

    python3 compose/vm.py run --host a=vers=3 --host b=vers=3 --out OUT \\
        --timeout 400 -- python3 compose/probe_rwsize.py

Host a writes a 4 KiB and a 32 MiB file and closes each; host b reads each
cold.  Prints the NFS lines of /proc/mounts (the negotiated rsize/wsize) and
the change in each host's READ, WRITE and COMMIT counts (ops, bytes sent,
bytes received) from /proc/self/mountstats.  Stdlib only.
"""

from __future__ import annotations

import json
import os
import re


def ops(point: str) -> dict[str, tuple[int, int, int]]:
    """(ops, bytes sent, bytes received) of READ, WRITE and COMMIT on one mount."""
    with open("/proc/self/mountstats") as handle:
        text = handle.read()
    block = text.split(f"mounted on {point} ")[1].split("\ndevice ")[0]
    counts = {}
    for name in ("READ", "WRITE", "COMMIT"):
        found = re.search(rf"^\s+{name}: (\d+) \d+ \d+ (\d+) (\d+)", block, re.M)
        assert found is not None, f"no {name} line for {point}"
        counts[name] = (int(found.group(1)), int(found.group(2)), int(found.group(3)))
    return counts


def delta(before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]]
          ) -> dict[str, tuple[int, ...]]:
    return {name: tuple(a - b for a, b in zip(after[name], before[name], strict=True))
            for name in after}


def main() -> None:
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    a, b = mounts["a"], mounts["b"]
    with open("/proc/mounts") as handle:
        for line in handle:
            if " nfs " in line:
                print("MOUNT", line.strip())
    for size in (4096, 32 << 20):
        before = ops(a)
        with open(f"{a}/f{size}", "wb") as handle:
            handle.write(b"d" * size)
        print("WRITE", size, "ops/bytes_sent/bytes_recv delta on a:", delta(before, ops(a)))
        before = ops(b)
        with open(f"{b}/f{size}", "rb") as handle:
            got = len(handle.read())
        print("READ", size, got, "ops/bytes_sent/bytes_recv delta on b:",
              delta(before, ops(b)))


if __name__ == "__main__":
    main()
