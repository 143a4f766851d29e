"""Measure when a lock blocked on another NFS host is granted after its release.

docs/nfs-facts.md, "Locks": on Linux 6.1 a blocked flock/lockf is granted 6-40
ms after the holder releases (lockd's GRANTED callback); on 6.12 about 30.5 s
later.  Where that 30.5 s comes from decides the model: the client's lockd
re-sends a blocked LOCK every NLMCLNT_POLL_TIMEOUT (30 s, fs/lockd/clntproc.c
nlmclnt_lock), so a grant that waits for the retry lands 30 s after the
*block* (or its last retry), not a fixed time after the release.  The
variants tell the two apart by varying the hold while the block time stays.

Run through compose/vm.py with hosts a and b (it sets NFS_MOUNTS, NFS_OUT):

    python compose/vm.py run --kernel 6.12 --host a=vers=3 --host b=vers=3 \\
        --out /tmp/lockprobe -- python3 compose/probe_lock_grant.py

Holder (on a) and waiter (on b) are separate OS processes (this script
re-run with a role): both mounts live in one kernel, and only different
processes conflict on a lock (docs/design.md, "Real NFS").  Times are
CLOCK_MONOTONIC, one clock for the whole guest.  Stdlib only; writes
lock_grant.json.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# name: (lock call, waiter blocks at, holder releases at), seconds from t0.
VARIANTS = {
    "flock-hold-2s": ("flock", 0.5, 2.0),
    "lockf-hold-2s": ("lockf", 0.5, 2.0),
    "flock-hold-10s": ("flock", 0.5, 10.0),
    "flock-hold-35s": ("flock", 0.5, 35.0),  # past the waiter's first retry at ~30.5 s
}


def lock(fd: int, call: str) -> None:
    if call == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        fcntl.lockf(fd, fcntl.LOCK_EX)


def sleep_until(t0: float, at: float) -> None:
    time.sleep(max(0.0, t0 + at - time.monotonic()))


def hold(path: str, call: str, release_after: float) -> None:
    """Holder role: on "go", lock; report; release ``release_after`` s later."""
    fd = os.open(path, os.O_RDWR)
    reply({"ready": True})
    t0 = float(sys.stdin.readline())
    lock(fd, call)
    reply({"locked": time.monotonic() - t0})
    sleep_until(t0, release_after)
    released = time.monotonic() - t0
    os.close(fd)  # drops the lock: flock's and lockf's alike
    reply({"released": released})


def wait(path: str, call: str) -> None:
    """Waiter role: on "go" (sent once the holder holds it), block on the lock."""
    fd = os.open(path, os.O_RDWR)
    reply({"ready": True})
    t0 = float(sys.stdin.readline())
    blocked = time.monotonic() - t0
    lock(fd, call)
    reply({"blocked": blocked, "granted": time.monotonic() - t0})
    os.close(fd)


def reply(obj: dict[str, object]) -> None:
    print(json.dumps(obj), flush=True)


def role(variant: str, role_name: str, path: Path) -> subprocess.Popen[str]:
    call, _, release_at = VARIANTS[variant]
    argv = [sys.executable, __file__, role_name, str(path), call, repr(release_at)]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def receive(proc: subprocess.Popen[str]) -> dict[str, float]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"probe: a {proc.args[2]} process exited early")  # type: ignore[index]
    result: dict[str, float] = json.loads(line)
    return result


def main() -> int:
    if len(sys.argv) == 5:  # a role: hold|wait PATH CALL RELEASE_AT
        name, path, call, release_at = sys.argv[1:]
        if name == "hold":
            hold(path, call, float(release_at))
        else:
            wait(path, call)
        return 0
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    out = Path(os.environ.get("NFS_OUT", "."))
    base_a, base_b = Path(mounts["a"], "lockprobe"), Path(mounts["b"], "lockprobe")
    base_a.mkdir(exist_ok=True)
    for name in VARIANTS:
        (base_a / name).write_bytes(b"")
    time.sleep(4.0)  # past acdirmin=3: b's view of the directory shows the new files
    # Python starts slowly under emulation (seconds per process): start every
    # role first, and let the clock run only once all have opened their file.
    procs = {name: (role(name, "hold", base_a / name), role(name, "wait", base_b / name))
             for name in VARIANTS}
    for holder, waiter in procs.values():
        receive(holder), receive(waiter)
    t0 = time.monotonic()
    for holder, _ in procs.values():
        send(holder, repr(t0))
    results: dict[str, dict[str, float]] = {}
    for name, (holder, _) in procs.items():
        results[name] = receive(holder)  # it holds the lock now
    for name, (_, waiter) in procs.items():
        sleep_until(t0, VARIANTS[name][1])
        send(waiter, repr(t0))
    for name, (holder, waiter) in procs.items():
        results[name].update(receive(holder))
        results[name].update(receive(waiter))
        holder.wait(), waiter.wait()
        r = results[name]
        r["after_release"] = r["granted"] - r["released"]
        r["after_block"] = r["granted"] - r["blocked"]
    record = {"kernel": os.uname().release, "variants": results}
    (out / "lock_grant.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"kernel {record['kernel']}")
    print(f"{'variant':<16} {'locked':>7} {'blocked':>8} {'released':>9} {'granted':>8} "
          f"{'after release':>14} {'after block':>12}")
    for name, r in results.items():
        print(f"{name:<16} {r['locked']:7.2f} {r['blocked']:8.2f} {r['released']:9.2f} "
              f"{r['granted']:8.2f} {r['after_release']:14.2f} {r['after_block']:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
