"""Measure what a read delegation held by one NFSv4.1 host costs another host.

docs/nfs-facts.md, "NFSv4.1 and 4.2", "Read delegations".  knfsd hands a v4
client a read delegation on some opens (fs/nfsd/nfs4state.c
``nfs4_open_delegation``); another client's conflicting call (an OPEN for
write, a SETATTR of the size, REMOVE, RENAME, LINK) breaks it
(``nfsd_break_deleg_cb``): the server sends CB_RECALL to the holder and
answers the caller NFS4ERR_DELAY, and the caller's client sleeps and retries
(fs/nfs/nfs4proc.c ``nfs4_delay``: NFS4_POLL_RETRY_MIN, 0.1 s, doubling up
to NFS4_POLL_RETRY_MAX, 15 s).  A v3 client is answered NFS3ERR_JUKEBOX and
retries after NFS_JUKEBOX_RETRY_TIME (5 s, fs/nfs/nfs3proc.c).

Hosts: a and b mounted vers=4.1 (each its own v4 client, compose/guest_nfs.sh),
c mounted vers=3:

    python3 compose/vm.py run --host a=vers=4.1 --host b=vers=4.1 --host c=vers=3 \\
        --out /tmp/deleg-1 --timeout 900 -- python3 compose/probe_delegation.py

Steps can be named to run only them, e.g. `... -- python3
compose/probe_delegation.py grant v3_caller recall_block_quiet`.

B opens a file read-only (and holds it, or closes it); then A (or C) makes a
call and the probe times it, reads knfsd's states
(/proc/fs/nfsd/clients/*/states) before and after, and the caller's
mountstats: per-operation counts and the ``delay`` event (NFSIOS_DELAY, one
per NFS4ERR_DELAY the client slept on).  Each file is fresh.  Every
measurement is recorded even when it fails; everything goes to
delegation.json in $NFS_OUT.  Stdlib only.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MOUNTS = json.loads(os.environ["NFS_MOUNTS"])
OUT = Path(os.environ.get("NFS_OUT", "."))
A, B = Path(MOUNTS["a"], "deleg"), Path(MOUNTS["b"], "deleg")
C = Path(MOUNTS["c"], "deleg") if "c" in MOUNTS else None
RESULTS: dict[str, Any] = {"kernel": os.uname().release}
# The events line of /proc/self/mountstats, in order (fs/nfs/iostat.h).
EVENTS = ["inoderevalidate", "dentryrevalidate", "datainvalidate", "attrinvalidate",
          "vfsopen", "vfslookup", "vfsaccess", "vfsupdatepage", "vfsreadpage", "vfsreadpages",
          "vfswritepage", "vfswritepages", "vfsgetdents", "vfssetattr", "vfsflush", "vfsfsync",
          "vfslock", "vfsrelease", "congestionwait", "setattrtrunc", "extendwrite",
          "sillyrenames", "shortreads", "shortwrites", "delay"]
SERIAL = [0]


def err(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return f"{type(exc).__name__}: {exc}"


def save() -> None:
    (OUT / "delegation.json").write_text(json.dumps(RESULTS, indent=2, default=str) + "\n")


def measure(name: str) -> Callable[[Callable[[], Any]], Callable[[], None]]:
    def wrap(body: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            started = time.monotonic()
            try:
                RESULTS[name] = body()
            except Exception as exc:  # the failure is the measurement
                RESULTS[name] = {"error": err(exc)}
            print(f"== {name} ({time.monotonic() - started:.1f} s): {RESULTS[name]}", flush=True)
            save()
        run.__name__ = name
        return run
    return wrap


def states() -> list[str]:
    """knfsd's delegation states, one line each, with the client's directory."""
    lines = []
    for path in sorted(glob.glob("/proc/fs/nfsd/clients/*/states")):
        for line in Path(path).read_text().splitlines():
            if "deleg" in line:
                lines.append(f"{Path(path).parent.name}: {line.strip()}")
    return lines


def held(name: str) -> list[str]:
    """The delegation lines of the file ``name`` (its states line names it)."""
    return [line for line in states() if name in line]


def counters(mount: Path) -> dict[str, int]:
    """Per-op calls and the events of the mount ``mount`` is under."""
    point = str(mount.parent)
    text = Path("/proc/self/mountstats").read_text()
    out: dict[str, int] = {}
    inside = ops = False
    for line in text.splitlines():
        if line.startswith("device "):
            inside = f" mounted on {point} " in line
            ops = False
            continue
        if not inside:
            continue
        s = line.strip()
        if s.startswith("events:"):
            out.update(zip(EVENTS, (int(v) for v in s.split()[1:]), strict=False))
        elif s.startswith("per-op statistics"):
            ops = True
        elif ops and ":" in s:
            op, _, numbers = s.partition(":")
            values = numbers.split()
            if values and op.isupper() and values[0].isdigit():
                out[op] = int(values[0])
    return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def fresh(content: bytes = b"old-data") -> str:
    SERIAL[0] += 1
    name = f"f{SERIAL[0]:03d}x"
    (A / name).write_bytes(content)
    return name


def timed(caller: Path, call: Callable[[], Any]) -> dict[str, Any]:
    before = counters(caller)
    started = time.monotonic()
    try:
        result = call()
        outcome = "ok" if result is None else result
    except OSError as exc:
        outcome = err(exc)
    took = round(time.monotonic() - started, 3)
    return {"s": took, "outcome": outcome, "calls": delta(before, counters(caller))}


def b_opens(name: str, flags: int = os.O_RDONLY) -> int:
    fd = os.open(B / name, flags)
    os.pread(fd, 100, 0)
    return fd


def open_close(path: Path, flags: int) -> None:
    os.close(os.open(path, flags))


# A's conflicting calls, by name: (caller's root, call on the file name).
def ops(root: Path) -> dict[str, Callable[[str], Any]]:
    return {
        "open_wronly": lambda n: open_close(root / n, os.O_WRONLY),
        "open_write_trunc_creat": lambda n: open_close(root / n, os.O_WRONLY | os.O_CREAT
                                                       | os.O_TRUNC),
        "truncate": lambda n: os.truncate(root / n, 0),
        "unlink": lambda n: os.unlink(root / n),
        "rename_away": lambda n: os.rename(root / n, root / (n + ".moved")),
        "rename_over": lambda n: os.rename(root / fresh_bare(root), root / n),
        "link": lambda n: os.link(root / n, root / (n + ".link")),
        "open_rdonly": lambda n: open_close(root / n, os.O_RDONLY),
        "chmod": lambda n: os.chmod(root / n, 0o600),
    }


def fresh_bare(root: Path) -> str:
    SERIAL[0] += 1
    name = f"src{SERIAL[0]:03d}x"
    (root / name).write_bytes(b"replacement")
    return name


def trial(op: str, *, caller: Path, b_holds: bool | None, wait_after_close: float = 0.5
          ) -> dict[str, Any]:
    """B opens (holds, or opens and closes, or None: never opens), then ``op`` by caller."""
    name = fresh()
    time.sleep(0.3)
    fd = None
    if b_holds is not None:
        fd = b_opens(name)
        if not b_holds:
            os.close(fd)
            fd = None
            time.sleep(wait_after_close)
    before = held(name)
    result = timed(caller, lambda: ops(caller)[op](name))
    result["deleg_before"] = before
    result["deleg_after"] = held(name)
    if fd is not None:
        os.close(fd)
    return result


def series(op: str, n: int, **kw: Any) -> list[dict[str, Any]]:
    return [trial(op, **kw) for _ in range(n)]


@measure("grant")
def grant() -> Any:
    """Which of B's opens get a delegation (knfsd's states right after the open)."""
    out = {}
    for label, flags in (("rdonly", os.O_RDONLY), ("rdwr", os.O_RDWR),
                         ("wronly", os.O_WRONLY), ("rdonly_creat", os.O_RDONLY | os.O_CREAT)):
        name = fresh()
        time.sleep(0.3)
        fd = os.open(B / name, flags)
        out[label] = held(name)
        os.close(fd)
    # A holds it open for write; does B's read-only open get one?
    name = fresh()
    time.sleep(0.3)
    fa = os.open(A / name, os.O_WRONLY)
    fd = b_opens(name)
    out["rdonly_while_other_host_writes"] = held(name)
    os.close(fd)
    os.close(fa)
    # A just wrote and closed it (no open left); B opens right after.
    name = fresh()
    fd = b_opens(name)
    out["rdonly_right_after_other_hosts_write_close"] = held(name)
    os.close(fd)
    # B creates a new file with an open that reads (O_CREAT|O_EXCL, O_RDWR).
    SERIAL[0] += 1
    name = f"f{SERIAL[0]:03d}x"
    fd = os.open(B / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    out["rdwr_creat_new_file"] = held(name)
    os.close(fd)
    out["all_states_now"] = states()
    return out


@measure("held_open")
def held_open() -> Any:
    """B holds the file open read-only; A's conflicting calls (and a read-only open)."""
    return {op: series(op, n, caller=A, b_holds=True)
            for op, n in (("open_wronly", 3), ("open_write_trunc_creat", 2), ("truncate", 2),
                          ("unlink", 2), ("rename_away", 2), ("rename_over", 1), ("link", 1),
                          ("chmod", 1), ("open_rdonly", 2))}


@measure("baseline")
def baseline() -> Any:
    """The same calls on files B never opened: no delegation, the emulator's own time."""
    return {op: series(op, 2, caller=A, b_holds=None)
            for op in ("open_wronly", "truncate", "unlink", "rename_away")}


@measure("after_close")
def after_close() -> Any:
    """B opened, read and closed (0.5 s and 5 s before); A's open for write."""
    return {"closed_0.5s": series("open_wronly", 3, caller=A, b_holds=False),
            "closed_5s": series("open_wronly", 1, caller=A, b_holds=False, wait_after_close=5.0)}


@measure("after_recall")
def after_recall() -> Any:
    """After a recall: does B's next open get a delegation, and does A wait again?"""
    out = []
    for _ in range(2):
        name = fresh()
        time.sleep(0.3)
        fd = b_opens(name)
        first = timed(A, lambda n=name: open_close(A / n, os.O_WRONLY))
        os.close(fd)
        time.sleep(0.5)
        fd = b_opens(name)
        reopen = held(name)
        second = timed(A, lambda n=name: open_close(A / n, os.O_WRONLY))
        os.close(fd)
        time.sleep(3.0)
        fd = b_opens(name)
        reopen_3s = held(name)
        os.close(fd)
        out.append({"first": first, "b_reopen_deleg": reopen, "second": second,
                    "b_reopen_3s_later_deleg": reopen_3s})
    return out


@measure("recall_block_quiet")
def recall_block_quiet() -> Any:
    """On a quiet server: B's reopens 35 s and 70 s after a recall (filter swaps)."""
    name = fresh()
    time.sleep(0.3)
    fd = b_opens(name)
    first = timed(A, lambda: open_close(A / name, os.O_WRONLY))
    os.close(fd)
    recalled = time.monotonic()
    out: dict[str, Any] = {"first": first["s"], "first_delay": first["calls"].get("delay", 0)}
    for at in (35.0, 70.0):
        time.sleep(max(0.0, recalled + at - time.monotonic()))
        fd = b_opens(name)
        out[f"b_reopen_{at:g}s_deleg"] = [line.split("type: ")[1].split(",")[0]
                                          for line in held(name)]
        os.close(fd)
    return out


@measure("holder_itself")
def holder_itself() -> Any:
    """B holds the delegation and opens the file for write itself."""
    out = []
    for _ in range(2):
        name = fresh()
        time.sleep(0.3)
        fd = b_opens(name)
        before = held(name)
        own = timed(B, lambda n=name: open_close(B / n, os.O_WRONLY))
        out.append({"own_write_open": own, "deleg_before": before, "deleg_after": held(name)})
        os.close(fd)
    return out


@measure("v3_caller")
def v3_caller() -> Any:
    """A vers=3 host (c) against B's delegation: unlink, and a write's close."""
    if C is None:
        return "no host c"
    out: dict[str, Any] = {"unlink": series("unlink", 1, caller=C, b_holds=True),
                           "link": series("link", 1, caller=C, b_holds=True),
                           "rename_over": series("rename_over", 1, caller=C, b_holds=True),
                           "truncate": series("truncate", 1, caller=C, b_holds=True)}
    name = fresh()
    time.sleep(0.3)
    fd = b_opens(name)

    def write_close() -> None:
        with open(C / name, "ab") as handle:
            handle.write(b"-more")
    out["append_close"] = timed(C, write_close)
    out["append_close"]["deleg_after"] = held(name)
    os.close(fd)
    return out


@measure("unreferenced_return")
def unreferenced_return() -> Any:
    """B opens, reads, closes; when does its client hand the delegation back unasked?"""
    name = fresh()
    time.sleep(0.3)
    os.close(b_opens(name))
    started = time.monotonic()
    seen = []
    while time.monotonic() - started < 150:
        now = held(name)
        seen.append((round(time.monotonic() - started, 1), len(now)))
        if not now:
            break
        time.sleep(2.0)
    return {"polls": seen[-3:], "gone_after_s": seen[-1][0] if not seen[-1][1] else None}


def main() -> int:
    A.mkdir()
    RESULTS["clients"] = [Path(p).read_text() for p in
                          sorted(glob.glob("/proc/fs/nfsd/clients/*/info"))]
    save()
    steps = (grant, held_open, baseline, after_close, after_recall, holder_itself,
             v3_caller, unreferenced_return, recall_block_quiet)
    # python3 compose/probe_delegation.py [STEP...]: only the named steps.
    wanted = sys.argv[1:]
    for step in steps:
        if not wanted or step.__name__ in wanted:
            step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
