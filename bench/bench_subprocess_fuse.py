"""Could a real subprocess (cp, tar) be a simulated process? Its I/O through FUSE, measured.

    python bench/bench_subprocess_fuse.py [RUNS]   (FUSE_LIBRARY_PATH: set below if unset)

Issue 25 asks whether a child's file I/O, served to it by the world over a
FUSE mount of its host's view, could be attributed to the simulated process
that started it and replayed from a seed.  This runs each workload ``RUNS``
times (10 by default) on a fresh FUSE mount served by an in-memory Python
filesystem in this process (``_fuse_memory.Memory``: the stand-in for "the
world answers each request"; one request at a time, the kernel's caches
off, ``direct_io``) holding the same tree each time, and records every
request: the operation, its path, offset and size, and which child sent it
(children numbered by their first request).  It prints, per workload, how
many requests a run makes and how many *different* request sequences the
runs gave: for the whole run, and for each child on its own.  One sequence
per child but several for the run means each child is deterministic and
only the interleaving of concurrent children is not: the order a world
would have to impose.  A per-child count above one means the child itself
is not replayable from its requests.

Needs root (or CAP_SYS_ADMIN), ``/dev/fuse``, libfuse3 and ``pip install
mfusepy``; prints why not and exits 0 where they are missing.  Wall times
are printed beside the same workload on tmpfs, as a ratio (the machine's
load inflates both).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LIBFUSE3 = "/lib/x86_64-linux-gnu/libfuse3.so.3"
if os.path.exists(LIBFUSE3):
    os.environ.setdefault("FUSE_LIBRARY_PATH", LIBFUSE3)

# The tree every run starts from: (path, size); sizes cross the 128 KiB
# request size and include an empty file.
TREE = [("src", None), ("src/sub", None), ("src/sub/deep", None), ("dst", None)] + [
    (f"src/{'sub/' if i % 3 == 1 else 'sub/deep/' if i % 3 == 2 else ''}f{i:02d}",
     (i * 37_813) % 300_000) for i in range(24)]

WORKLOADS = {
    "cat a > b (sh, cat)": "cat src/f00 > dst/f00 && cat src/f03 > dst/f03",
    "cp -r": "cp -r src dst/copy",
    "tar -cf archive": "tar -cf dst/a.tar -C src .",
    "tar -c | tar -x (pipeline)": "tar -cf - -C src . | tar -xf - -C dst",
}


def missing() -> str | None:
    if os.geteuid() != 0:
        return "not root (mounting FUSE without fusermount3 needs CAP_SYS_ADMIN)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as error:
        return f"mfusepy or libfuse3 missing ({error}); pip install mfusepy"
    return None


def _recording_filesystem() -> Any:
    import mfusepy as fuse

    sys.path.insert(0, str(HERE))
    import _fuse_memory

    class Recording(_fuse_memory.Memory):
        """The in-memory filesystem, noting each request and the pid that sent it."""

        def __init__(self) -> None:
            super().__init__()
            self.log: list[tuple[int, str, str, int, int]] = []
            self.recording = True

        def chown(self, path: str, uid: int, gid: int) -> int:
            self._get(path)  # tar as root restores ownership
            return 0

    def recorded(op: str) -> Any:
        served = getattr(Recording, op)

        def method(self: Any, path: str, *args: Any) -> Any:
            _uid, _gid, pid = fuse.fuse_get_context()
            offset = size = -1
            if op == "read":
                size, offset = args[0], args[1]
            elif op == "write":
                size, offset = len(args[0]), args[1]
            elif op == "truncate":
                size = args[0]
            if self.recording:
                self.log.append((pid, op, path, offset, size))
            return served(self, path, *args)

        return method

    # mfusepy 3 calls each operation's method directly (no __call__ hook).
    for op in ("getattr", "readdir", "mkdir", "create", "open", "read", "write", "truncate",
               "unlink", "rename", "chmod", "chown", "utimens", "flush", "release", "fsync"):
        setattr(Recording, op, recorded(op))
    return fuse, Recording


@contextlib.contextmanager
def _mounted(fuse: Any, filesystem: Any) -> Iterator[str]:
    mountpoint = tempfile.mkdtemp(prefix="simfs-subproc-")
    done = threading.Event()

    def serve() -> None:
        try:
            fuse.FUSE(filesystem, mountpoint, foreground=True, nothreads=True, direct_io=True,
                      entry_timeout=0, attr_timeout=0, negative_timeout=0)
        finally:
            done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            with open("/proc/mounts") as mounts:
                if any(line.split()[1] == mountpoint for line in mounts):
                    break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"the FUSE mount at {mountpoint} did not appear")
        yield mountpoint
    finally:
        subprocess.run(["umount", mountpoint], check=False)
        done.wait(10)
        os.rmdir(mountpoint)


def _fill(filesystem: Any) -> None:
    """The tree, put straight into the server's tables (no request is logged)."""
    now = 1_700_000_000 * 10**9
    for path, size in TREE:
        key = "/" + path
        if size is None:
            filesystem.files[key] = {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2,
                                     "st_ctime": now, "st_mtime": now, "st_atime": now}
        else:
            filesystem.files[key] = {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1,
                                     "st_ctime": now, "st_mtime": now, "st_atime": now}
            filesystem.data[key] = bytearray((i * 7 + size) % 251 for i in range(size))


def _fill_real(root: str) -> None:
    for path, size in TREE:
        target = os.path.join(root, path)
        if size is None:
            os.makedirs(target, exist_ok=True)
        else:
            with open(target, "wb") as file:
                file.write(bytes((i * 7 + size) % 251 for i in range(size)))


def _normalised(log: list[tuple[int, str, str, int, int]]) -> dict[str, Any]:
    """A run's requests with pids replaced by roles: children in order of first request,
    and ``kernel`` for those the kernel sends on no process's behalf (pid 0: a
    RELEASE after the last close, sent asynchronously)."""
    roles: dict[int, str] = {0: "kernel"}
    whole = []
    for pid, op, path, offset, size in log:
        role = roles.setdefault(pid, f"child {len(roles)}")
        whole.append((role, op, path, offset, size))
    children = tuple(entry for entry in whole if entry[0] != "kernel")
    per_child = {role: tuple(entry[1:] for entry in whole if entry[0] == role)
                 for role in roles.values()}
    return {"whole": tuple(whole), "children": children, "per_child": per_child,
            "kernel": len(whole) - len(children)}


def measure(name: str, command: str, runs: int) -> None:
    fuse, recording = _recording_filesystem()
    wholes: set[tuple[Any, ...]] = set()
    orders: set[tuple[Any, ...]] = set()
    children: dict[str, set[tuple[Any, ...]]] = {}
    counts: list[int] = []
    kernel: list[int] = []
    fuse_wall: list[float] = []
    for _ in range(runs):
        filesystem = recording()
        _fill(filesystem)
        with _mounted(fuse, filesystem) as mountpoint:
            start = time.perf_counter()
            subprocess.run(["sh", "-c", command], cwd=mountpoint, check=True)
            fuse_wall.append(time.perf_counter() - start)
            filesystem.recording = False  # not the unmount's own requests
        run = _normalised(filesystem.log)
        wholes.add(run["whole"])
        orders.add(run["children"])
        counts.append(len(run["whole"]))
        kernel.append(run["kernel"])
        for role, sequence in run["per_child"].items():
            if role != "kernel":
                children.setdefault(role, set()).add(sequence)
    real_wall = []
    for _ in range(runs):
        root = tempfile.mkdtemp(prefix="simfs-subproc-real-", dir="/dev/shm"
                                if os.path.isdir("/dev/shm") else None)
        _fill_real(root)
        start = time.perf_counter()
        subprocess.run(["sh", "-c", command], cwd=root, check=True)
        real_wall.append(time.perf_counter() - start)
        shutil.rmtree(root)
    per_child = ",".join(f"{len(sequences)}" for _, sequences in sorted(children.items()))
    fuse_median = sorted(fuse_wall)[len(fuse_wall) // 2]
    real_median = sorted(real_wall)[len(real_wall) // 2]
    print(f"  {name:28} {min(counts):5}-{max(counts):<5} {min(kernel):3}-{max(kernel):<3} "
          f"{len(wholes):>3}/{runs:<3} {len(orders):>3}/{runs:<3} {per_child:12} "
          f"{fuse_median * 1e3:7.1f} ms {real_median * 1e3:6.1f} ms "
          f"{fuse_median / real_median:5.1f}x")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    why = missing()
    if why is not None:
        print(f"bench_subprocess_fuse: not measured here: {why}")
        return
    print(f"subprocesses on a FUSE mount (Python server, one request at a time, caches off), "
          f"{runs} runs each\n")
    print(f"  {'workload':28} {'requests':11} {'kernel':7} {'all':>7} {'children':>8} "
          f"{'each child':12} {'FUSE wall':>10} {'tmpfs':>9} {'ratio':>6}")
    for name, command in WORKLOADS.items():
        measure(name, command, runs)
    print("\n  kernel: requests with pid 0 (RELEASE after a last close, sent asynchronously);"
          "\n  all: distinct request sequences over the runs; children: the same without the"
          "\n  kernel's; each child: distinct sequences of each child's own requests (children"
          "\n  numbered by their first request)")


if __name__ == "__main__":
    main()
