"""Measure when the real client sends COMMIT after the WRITEs of a flush.

The question (issue 27): a 4 KiB write and close sent one WRITE and no
COMMIT in the VM (``compose/probe_rwsize.py``), a 32 MiB one 128 WRITEs and
one COMMIT.  The kernel's rule, as read in fs/nfs/pagelist.c
``nfs_generic_pgio``: a flush that must finish before the call returns
(close, fsync, a stat: ``WB_SYNC_ALL``, so ``FLUSH_COND_STABLE`` in
fs/nfs/write.c ``wb_priority``) is written ``FILE_SYNC`` when it is one RPC
(``!pg_moreio``) and no earlier unstable WRITE awaits its COMMIT; otherwise
its WRITEs are ``UNSTABLE`` and a COMMIT follows.  This probe checks the
rule's cases on each mount.

Run inside the VM (each mount its own client, nosharecache):

    python3 compose/vm.py run --host a=vers=3 --host b=vers=4.1 --out OUT \\
        --timeout 500 -- python3 compose/probe_stable_writes.py

Prints, per mount and case, the change in WRITE and COMMIT counts from
/proc/self/mountstats after each step.  Stdlib only.
"""

from __future__ import annotations

import json
import os
import re


def counts(point: str) -> dict[str, int]:
    with open("/proc/self/mountstats") as handle:
        text = handle.read()
    block = text.split(f"mounted on {point} ")[1].split("\ndevice ")[0]
    found = {}
    for name in ("WRITE", "COMMIT"):
        match = re.search(rf"^\s+{name}: (\d+) ", block, re.M)
        assert match is not None, f"no {name} line for {point}"
        found[name] = int(match.group(1))
    return found


class Steps:
    def __init__(self, point: str, case: str) -> None:
        self.point, self.case = point, case
        self.last = counts(point)

    def mark(self, step: str) -> None:
        now = counts(self.point)
        print(f"CASE {self.case} {step}: WRITE +{now['WRITE'] - self.last['WRITE']}"
              f" COMMIT +{now['COMMIT'] - self.last['COMMIT']}", flush=True)
        self.last = now


def run(point: str, wsize: int) -> None:
    def fresh(name: str) -> tuple[int, Steps]:
        path = f"{point}/{name}"
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        return fd, Steps(point, name)

    fd, steps = fresh("small_close")
    os.write(fd, b"s" * 4096)
    steps.mark("write 4KiB")
    os.close(fd)
    steps.mark("close")

    fd, steps = fresh("small_fsync")
    os.write(fd, b"s" * 4096)
    os.fsync(fd)
    steps.mark("write 4KiB + fsync")
    os.close(fd)
    steps.mark("close")

    fd, steps = fresh("small_stat")
    os.write(fd, b"s" * 4096)
    os.stat(f"{point}/small_stat")
    steps.mark("write 4KiB + stat")
    os.close(fd)
    steps.mark("close")

    fd, steps = fresh("exactly_wsize")
    os.write(fd, b"w" * wsize)
    os.close(fd)
    steps.mark(f"write {wsize} (wsize) + close")

    fd, steps = fresh("wsize_plus_page")
    os.write(fd, b"w" * (wsize + 4096))
    os.close(fd)
    steps.mark(f"write {wsize + 4096} + close")

    fd, steps = fresh("two_ranges")
    os.pwrite(fd, b"a" * 4096, 0)
    os.pwrite(fd, b"b" * 4096, 1 << 20)
    os.close(fd)
    steps.mark("pwrite 4KiB at 0 and at 1MiB + close")

    fd, steps = fresh("two_closes")
    os.write(fd, b"a" * 4096)
    os.close(fd)
    steps.mark("first 4KiB + close")
    fd = os.open(f"{point}/two_closes", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"b" * 4096)
    os.close(fd)
    steps.mark("append 4KiB + close")


def main() -> None:
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    sizes = {}
    with open("/proc/mounts") as handle:
        for line in handle:
            if " nfs" in line.split(" ")[2][:3] or " nfs " in line or " nfs4 " in line:
                print("MOUNT", line.strip())
                point = line.split(" ")[1]
                found = re.search(r"wsize=(\d+)", line)
                if found:
                    sizes[point] = int(found.group(1))
    for name, point in sorted(mounts.items()):
        print("HOST", name, point, "wsize", sizes[point], flush=True)
        run(point, sizes[point])


if __name__ == "__main__":
    main()
