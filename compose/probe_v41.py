"""Measure, in one VM boot, the NFS client facts the model has for v3 on NFSv4.x.

docs/nfs-facts.md lists what the Linux client does over NFSv3; this probe
repeats each measurement on two hosts mounted over NFSv4.1 (or 4.2), each its
own v4 client of the one knfsd (compose/guest_nfs.sh, v4_hosts):

    python compose/vm.py run \\
        --host a=vers=4.1,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3 \\
        --host b=vers=4.1,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3 \\
        --out /tmp/v41 --timeout 900 -- python3 compose/probe_v41.py

With more hosts, `probe_v41.py WRITER LOOKER LABEL` measures another pair
(e.g. two vers=3 hosts c and d, label v3: the v3 column of the same table).
A writes, B looks; both mounts live in one kernel, so the probe drives both
from one process except for locks, which take one process per lock owner
(compose/probe_lock_grant.py's roles).  The server's own view is the ext4
export itself, /srv/nfs in the guest.  Each measurement is recorded even
when it fails (its exception is the result); everything goes to LABEL.json
(v41.json by default) in $NFS_OUT.
Stdlib only.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_lock_grant as plg

MOUNTS = json.loads(os.environ["NFS_MOUNTS"])
OUT = Path(os.environ.get("NFS_OUT", "."))
# python3 compose/probe_v41.py [WRITER LOOKER LABEL]: hosts a and b, label v41
# by default; the label names the directory used and LABEL.json.
WRITER, LOOKER, LABEL = sys.argv[1:4] if len(sys.argv) == 4 else ("a", "b", "v41")
A, B = Path(MOUNTS[WRITER], LABEL), Path(MOUNTS[LOOKER], LABEL)
# The export's ext4 as knfsd sees it.
SERVER = Path(os.environ.get("NFS_SERVER_DIR", "/srv/nfs"), LABEL)
POLL = 0.1
RESULTS: dict[str, Any] = {"kernel": os.uname().release}


def err(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return f"{type(exc).__name__}: {exc}"


def attempt(call: Callable[[], Any]) -> Any:
    """The call's result, or the name of the errno it raised."""
    try:
        return call()
    except OSError as exc:
        return err(exc)


def save() -> None:
    (OUT / f"{LABEL}.json").write_text(json.dumps(RESULTS, indent=2, default=str) + "\n")


def measure(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def wrap(body: Callable[[], Any]) -> Callable[[], Any]:
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


def delegations() -> list[str]:
    """knfsd's delegation states, one line each (/proc/fs/nfsd/clients/*/states)."""
    lines = []
    for path in sorted(glob.glob("/proc/fs/nfsd/clients/*/states")):
        for line in Path(path).read_text().splitlines():
            if "deleg" in line:
                lines.append(f"{Path(path).parent.name}: {line.strip()}")
    return lines


def poll(check: Callable[[], bool], limit: float) -> float | None:
    """Seconds until ``check()`` is first true, polling every POLL s; None past limit."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if check():
            return round(time.monotonic() - started, 3)
        time.sleep(POLL)
    return None


def settle() -> None:
    time.sleep(3.5)  # past acdirmin=acregmin=3: B's caches of what A made are gone


def stall_trial(name: str, before: Callable[[Path], None] | None, via_open: bool) -> Any:
    """B looks for t/marker (negative), A creates it 0.5 s later; B polls."""
    (A / name).mkdir()
    settle()
    marker = B / name / "marker"
    marker.exists()  # B's negative entry, and its cached attributes of t
    time.sleep(0.5)
    os.close(os.open(A / name / "marker", os.O_CREAT | os.O_EXCL | os.O_WRONLY))

    def seen() -> bool:
        if before is not None:
            before(B / name)
        if via_open:
            try:
                os.close(os.open(marker, os.O_RDONLY))
            except FileNotFoundError:
                return False
            return True
        return marker.exists()
    return poll(seen, 8.0)


def open_dir(path: Path) -> None:
    os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY))


@measure("negative_lookup_stall_exists")
def negative_stall() -> Any:
    """exists() polling only: seconds from creation to first sighting (acdirmin=3)."""
    return [stall_trial(f"stall{i}", None, False) for i in range(3)]


@measure("negative_lookup_open_parent_then_exists")
def negative_open_parent() -> Any:
    """Close-to-open on the parent: open(t, O_DIRECTORY) before each exists()."""
    return [stall_trial(f"ctodir{i}", open_dir, False) for i in range(3)]


@measure("negative_lookup_open_file")
def negative_open_file() -> Any:
    """Polling with open(marker, O_RDONLY) itself: does the open ask the server?"""
    return [stall_trial(f"openfile{i}", None, True) for i in range(2)]


@measure("attribute_timeout_size")
def attribute_timeout() -> Any:
    """A appends to f (B holds no open); seconds until B's stat shows the new size."""
    trials = []
    for i in range(2):
        (A / f"attr{i}").write_bytes(b"x" * 10)
        settle()
        os.stat(B / f"attr{i}")  # B caches the attributes
        time.sleep(0.5)
        with open(A / f"attr{i}", "ab") as handle:
            handle.write(b"y" * 10)
        trials.append(poll(lambda i=i: os.stat(B / f"attr{i}").st_size == 20, 8.0))
    return trials


@measure("close_to_open_data")
def close_to_open() -> Any:
    """B reads h, A rewrites it (same size) and closes; B's next open+read sees?"""
    (A / "cto").write_bytes(b"old-data")
    settle()
    first = (B / "cto").read_bytes()
    held = delegations()
    started = time.monotonic()
    (A / "cto").write_bytes(b"new-data")
    a_write_s = round(time.monotonic() - started, 3)
    after = (B / "cto").read_bytes()
    return {"b_first": first.decode(), "delegations_after_b_read": held,
            "a_open_write_close_s": a_write_s, "b_open_read_right_after": after.decode(),
            "delegations_after": delegations()}


@measure("delegation_stat_and_held_fd")
def delegation() -> Any:
    """B opens g and keeps it open (read delegation?); A writes g; B's stat and pread."""
    (A / "deleg").write_bytes(b"old")
    settle()
    fd = os.open(B / "deleg", os.O_RDONLY)
    b_read = os.pread(fd, 100, 0)
    held = delegations()
    started = time.monotonic()
    with open(A / "deleg", "ab") as handle:  # a conflicting open: recall
        opened = round(time.monotonic() - started, 3)
        handle.write(b"-and-new")
    closed = round(time.monotonic() - started, 3)
    after_recall = delegations()
    size_seen = poll(lambda: os.stat(B / "deleg").st_size == 11, 8.0)
    fstat_size = os.fstat(fd).st_size
    pread_now = os.pread(fd, 100, 0)
    os.close(fd)
    return {"b_read": b_read.decode(), "delegations_while_b_open": held,
            "a_open_append_s": opened, "a_close_s": closed,
            "delegations_after_a_write": after_recall,
            "b_stat_new_size_after_s": size_seen, "b_fstat_size": fstat_size,
            "b_pread_held_fd": pread_now.decode(), "delegations_end": delegations()}


@measure("silly_rename")
def silly_rename() -> Any:
    """A opens s and unlinks it on A: .nfs entry? rmdir? then the close."""
    d = A / "silly"
    d.mkdir()
    (d / "s").write_bytes(b"payload")
    fd = os.open(d / "s", os.O_RDONLY)
    os.unlink(d / "s")
    result = {"a_listdir_open": sorted(os.listdir(d)),
              "server_listdir_open": sorted(os.listdir(SERVER / "silly")),
              "a_read_after_unlink": attempt(lambda: os.pread(fd, 100, 0).decode()),
              "a_rmdir_open": attempt(lambda: os.rmdir(d))}
    settle()
    result["b_listdir_open"] = attempt(lambda: sorted(os.listdir(B / "silly")))
    result["b_rmdir_open"] = attempt(lambda: os.rmdir(B / "silly"))
    os.close(fd)
    time.sleep(0.2)
    result["a_listdir_after_close"] = attempt(lambda: sorted(os.listdir(d)))
    result["server_listdir_after_close"] = attempt(lambda: sorted(os.listdir(SERVER / "silly")))
    return result


@measure("stale_open_file_removed_by_other_host")
def stale_file() -> Any:
    """A keeps e open; B unlinks e (B never opened it); A's fstat and pread."""
    (A / "stale").write_bytes(b"content")
    fd = os.open(A / "stale", os.O_RDONLY)
    os.pread(fd, 100, 0)
    settle()
    os.unlink(B / "stale")
    server_entries = sorted(os.listdir(SERVER))
    time.sleep(4.0)  # past acregmin: A's next fstat asks the server
    posix_fadvise = getattr(os, "posix_fadvise", None)
    if posix_fadvise is not None:
        posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # drop A's cached page
    result = {"server_stale_listed": "stale" in server_entries,
              "a_fstat": attempt(lambda: os.fstat(fd).st_nlink),
              "a_pread": attempt(lambda: os.pread(fd, 100, 0).decode()),
              "a_close": attempt(lambda: os.close(fd))}
    return result


@measure("stale_cwd_removed_by_other_host")
def stale_cwd() -> Any:
    """B's cwd is c; A removes c and its files; what B's relative calls see."""
    (A / "cwd").mkdir()
    (A / "cwd" / "f").write_bytes(b"x")
    settle()
    os.chdir(B / "cwd")
    try:
        os.listdir(".")
        shutil.rmtree(A / "cwd")
        time.sleep(0.2)
        return {"b_listdir": attempt(lambda: os.listdir(".")),
                "b_open_new": attempt(lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY))),
                "b_stat_dot": attempt(lambda: os.stat(".").st_nlink),
                "b_exists_f": os.path.exists("f"),
                "b_chdir_up": attempt(lambda: os.chdir(".."))}
    finally:
        os.chdir("/")


@measure("byte_range_writes")
def byte_ranges() -> Any:
    """A writes 5,000 bytes, B 3,000 at offset 0, B closes last: the server holds?"""
    (A / "ranges").write_bytes(b"")
    settle()
    fa = os.open(A / "ranges", os.O_WRONLY)
    fb = os.open(B / "ranges", os.O_WRONLY)
    os.write(fa, b"a" * 5000)
    os.write(fb, b"b" * 3000)
    os.close(fa)
    os.close(fb)
    data = (SERVER / "ranges").read_bytes()
    return {"size": len(data), "b_bytes": data.count(b"b"), "a_bytes": data.count(b"a"),
            "starts_with_b": data[:3000] == b"b" * 3000}


# waiter blocks at 0.5 s; holder releases at the second number.
LOCK_VARIANTS = {
    "flock-hold-2s": ("flock", 0.5, 2.0),
    "lockf-hold-2s": ("lockf", 0.5, 2.0),
    "flock-hold-10s": ("flock", 0.5, 10.0),
    "lockf-hold-10s": ("lockf", 0.5, 10.0),
}


@measure("blocked_lock_grant")
def locks() -> Any:
    """Holder on A, waiter on B (one process each); when the waiter is granted."""
    plg.VARIANTS.clear()
    plg.VARIANTS.update(LOCK_VARIANTS)
    (A / "locks").mkdir()
    for name in LOCK_VARIANTS:
        (A / "locks" / name).write_bytes(b"")
    settle()
    procs = {name: (plg.role(name, "hold", A / "locks" / name),
                    plg.role(name, "wait", B / "locks" / name)) for name in LOCK_VARIANTS}
    for holder, waiter in procs.values():
        plg.receive(holder), plg.receive(waiter)
    t0 = time.monotonic()
    for holder, _ in procs.values():
        plg.send(holder, repr(t0))
    results: dict[str, dict[str, float]] = {}
    for name, (holder, _) in procs.items():
        results[name] = plg.receive(holder)
    for name, (_, waiter) in procs.items():
        plg.sleep_until(t0, LOCK_VARIANTS[name][1])
        plg.send(waiter, repr(t0))
    for name, (holder, waiter) in procs.items():
        results[name].update(plg.receive(holder))
        results[name].update(plg.receive(waiter))
        holder.wait(), waiter.wait()
        r = results[name]
        r["after_release"] = round(r["granted"] - r["released"], 3)
        r["after_block"] = round(r["granted"] - r["blocked"], 3)
    return results


def mount_lines() -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if " /mnt/nfs/" in line]


def main() -> int:
    A.mkdir()
    RESULTS["hosts"] = {"writer": WRITER, "looker": LOOKER}
    RESULTS["mounts"] = mount_lines()
    RESULTS["clients"] = [Path(p).read_text() for p in
                          sorted(glob.glob("/proc/fs/nfsd/clients/*/info"))]
    save()
    for step in (negative_stall, negative_open_parent, negative_open_file, attribute_timeout,
                 close_to_open, delegation, silly_rename, stale_file, stale_cwd, byte_ranges,
                 locks):
        step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
