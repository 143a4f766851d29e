"""Measure which locks reach other hosts under each NFSv3 lock mode, and the
verbatim /proc/mounts lines of the Linux client.

docs/nfs-facts.md, "Lock modes" and "Mount lines".  nfs(5) says `nolock` and
`local_lock=flock|posix|all` make locks "local": they exclude only programs
on the same client.  Each mode gets two mounts (two hosts, `nosharecache`,
so each has its own superblock and inodes, hence its own local lock lists).
One holder process takes a lock on one file per case; one tester process
then tries a non-blocking lock of the same file, through the other host's
mount or the same host's, and records whether it was refused (EAGAIN).

Then, as root in the guest, it mounts a few more times to read what the
kernel prints and refuses: a mount with many non-default options, values
at and past the kernel's ranges, and NFSv4.1 (needs a v4 root export,
set up here after the lock cases so they cannot be disturbed by it).

Run through compose/vm.py (it sets NFS_MOUNTS, NFS_OUT):

    python compose/vm.py run --memory 6G --timeout 1500 \\
        --host none1=vers=3 --host none2=vers=3 \\
        --host nolock1=vers=3,nolock --host nolock2=vers=3,nolock \\
        --host flock1=vers=3,local_lock=flock --host flock2=vers=3,local_lock=flock \\
        --host posix1=vers=3,local_lock=posix --host posix2=vers=3,local_lock=posix \\
        --host all1=vers=3,local_lock=all --host all2=vers=3,local_lock=all \\
        --out /tmp/lockmodes -- python3 compose/probe_lock_modes.py

Stdlib only; writes lock_modes.json and mounts.txt into NFS_OUT.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

MODES = ("none", "nolock", "flock", "posix", "all")
# case: (holder's call, tester's call, tester on the same host?)
CASES = {
    "flock-vs-flock-other-host": ("flock", "flock", False),
    "lockf-vs-lockf-other-host": ("lockf", "lockf", False),
    "flock-vs-lockf-other-host": ("flock", "lockf", False),
    "flock-vs-flock-same-host": ("flock", "flock", True),
    "lockf-vs-lockf-same-host": ("lockf", "lockf", True),
    "flock-vs-lockf-same-host": ("flock", "lockf", True),
}
SERVER = "127.0.0.1"
EXPORT = "/srv/nfs"
# Extra mounts made as root: name -> options (all get nosharecache).
EXTRA_V3 = {
    "many": "vers=3,ro,sync,noatime,soft,timeo=100,retrans=5,lookupcache=pos,nocto,"
            "acregmin=7,acregmax=20,acdirmin=8,acdirmax=40,rsize=65536,wsize=32768,"
            "nconnect=2,nordirplus,noacl,noresvport",
    "noac": "vers=3,noac",
    "u32max": "vers=3,acdirmin=4294967295",
    "u32over": "vers=3,acdirmin=99999999999999999999",
    "timeo0": "vers=3,timeo=0",
    "nconnect17": "vers=3,nconnect=17",
    "negative": "vers=3,acregmin=-1",
    "rsize1": "vers=3,rsize=1",
    "rsizebig": "vers=3,rsize=4294967295",
    "lockmode-bad": "vers=3,local_lock=both",
}
V4_MOUNTS = {
    "v41": "vers=4.1",
    "v41-local-flock": "vers=4.1,local_lock=flock",
    "v41-nolock": "vers=4.1,nolock",
    "v42": "vers=4.2",
}


def take(fd: int, call: str) -> str:
    try:
        if call == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return "refused"
        return f"errno {error.errno}"
    return "granted"


def holder(plan: list[tuple[str, str]]) -> None:
    """Lock every (path, call) of the plan, say so, hold until stdin closes."""
    fds = []
    results = []
    for path, call in plan:
        fd = os.open(path, os.O_RDWR)
        fds.append(fd)
        results.append(take(fd, call))
    print(json.dumps(results), flush=True)
    sys.stdin.read()


def tester(plan: list[tuple[str, str]]) -> None:
    """Try every (path, call) once without blocking; release what was granted."""
    results = []
    for path, call in plan:
        fd = os.open(path, os.O_RDWR)
        results.append(take(fd, call))
        os.close(fd)
    print(json.dumps(results), flush=True)


def sh(argv: list[str], timeout: float = 120) -> dict[str, object]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"argv": argv, "rc": "timeout"}
    return {"argv": argv, "rc": done.returncode, "out": done.stdout.strip(),
            "err": done.stderr.strip()}


def nfs_lines() -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[2] in ("nfs", "nfs4")]


def try_mount(source: str, point: str, options: str) -> dict[str, object]:
    os.makedirs(point, exist_ok=True)
    before = sh(["dmesg"])["out"]
    result = sh(["mount", "-t", "nfs", "-o", options + ",nosharecache", source, point])
    after = str(sh(["dmesg"])["out"])
    result["dmesg"] = after[len(str(before)):].strip()
    result["line"] = next((line for line in nfs_lines() if line.split()[1] == point), None)
    return result


def lock_cases(mounts: dict[str, str]) -> dict[str, dict[str, str]]:
    base = Path(mounts["none1"], "lockmodes")
    base.mkdir(exist_ok=True)
    hold_plan, test_plan, keys = [], [], []
    for mode in MODES:
        for case, (held, tried, same) in CASES.items():
            name = f"{mode}-{case}"
            (base / name).write_bytes(b"")
            first = Path(mounts[f"{mode}1"], "lockmodes", name)
            other = Path(mounts[f"{mode}{1 if same else 2}"], "lockmodes", name)
            hold_plan.append((str(first), held))
            test_plan.append((str(other), tried))
            keys.append((mode, case))
    argv = [sys.executable, __file__]
    hold = subprocess.Popen([*argv, "hold", json.dumps(hold_plan)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert hold.stdout is not None and hold.stdin is not None
    held_results = json.loads(hold.stdout.readline())
    tested = subprocess.run([*argv, "test", json.dumps(test_plan)], capture_output=True,
                            text=True, timeout=600)
    test_results = json.loads(tested.stdout)
    hold.stdin.close()
    hold.wait()
    table: dict[str, dict[str, str]] = {}
    for (mode, case), h, t in zip(keys, held_results, test_results):
        table.setdefault(mode, {})[case] = f"holder {h}, other {t}"
    return table


def main() -> int:
    if len(sys.argv) == 3:
        plan = [tuple(item) for item in json.loads(sys.argv[2])]
        (holder if sys.argv[1] == "hold" else tester)(plan)  # type: ignore[arg-type]
        return 0
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    out = Path(os.environ.get("NFS_OUT", "."))
    record: dict[str, object] = {"kernel": os.uname().release}
    record["memtotal"] = Path("/proc/meminfo").read_text().splitlines()[0]
    record["nfsd_max_block_size"] = Path("/proc/fs/nfsd/max_block_size").read_text().strip()
    record["host_lines"] = nfs_lines()
    record["locks"] = lock_cases(mounts)
    (out / "lock_modes.json").write_text(json.dumps(record, indent=2) + "\n")
    extra: dict[str, object] = {}
    for name, options in EXTRA_V3.items():
        extra[name] = try_mount(f"{SERVER}:{EXPORT}", f"/mnt/extra/{name}", options)
    record["extra_v3"] = extra
    (out / "lock_modes.json").write_text(json.dumps(record, indent=2) + "\n")
    # NFSv4: knfsd cannot use the 9p guest root as the v4 pseudo-root; export
    # the ext4 export again, bind-mounted, as fsid=0 and mount "/".
    v4: dict[str, object] = {"setup": [
        sh(["mkdir", "-p", "/mnt/v4root"]),
        sh(["mount", "--bind", EXPORT, "/mnt/v4root"]),
        sh(["exportfs", "-o", "rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0",
            f"{SERVER}:/mnt/v4root"]),
        sh(["cat", "/proc/fs/nfsd/versions"]),
    ]}
    for name, options in V4_MOUNTS.items():
        v4[name] = try_mount(f"{SERVER}:/", f"/mnt/v4/{name}", options)
    record["v4"] = v4
    (out / "lock_modes.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "mounts.txt").write_text(Path("/proc/mounts").read_text())
    print(json.dumps(record["locks"], indent=1))
    for line in nfs_lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
