"""Measure whether a directory made on the server before or after a client mounts
changes how long a marker created in it stays invisible to that client.

The question (issue 26): a test makes ``/shared/step`` on the server, then
host b polls ``step/READY`` while host a creates it.  With the directory made
*before* b mounts, b's first lookup of READY leaves a negative dentry in
``step`` trusted for acdirmin (30 s by default).  With the directory made
*after* b mounted, b's cached view of the export root is older than ``step``:
does the kernel then distrust that negative dentry (the model says it does:
simfs/_nfs/_lookup.py ``_lookup_rpc``), or stall as well?

Run as root inside the VM (compose/vm.py run ... -- python3 THIS): each trial
mounts the export twice afresh (``nosharecache``: hosts a and b with their
own caches), so "before the mount" is literal.  The server's side is the
exported ext4 itself (``$NFS_EXPORT``, default /srv/nfs, compose/guest_nfs.sh),
as ``world.server`` is in the simulation.  Stdlib only; prints a table and
writes ``mount_order.json`` into ``$NFS_OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

POLL_INTERVAL_S = 0.1
CREATE_AFTER_S = 0.05  # the writer creates READY just after b's first poll
ORDERINGS = ("dir-before-mount", "dir-after-mount")


def mount(mountpoint: Path, options: str) -> None:
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "nfs", "-o", f"{options},nosharecache",
                    "127.0.0.1:" + EXPORT, str(mountpoint)], check=True)


def umount(mountpoint: Path) -> None:
    subprocess.run(["umount", str(mountpoint)], check=True)


def publish(path: Path) -> float:
    """As the README's publisher: write a temporary name, then rename it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("ready")
    os.replace(tmp, path)
    return time.monotonic()


def trial(ordering: str, k: int, options: str, limit_s: float) -> dict[str, object]:
    name = f"step-{ordering}-{k}"
    root_a, root_b = Path(f"/mnt/probe/{name}-a"), Path(f"/mnt/probe/{name}-b")
    server_dir = Path(EXPORT, name)
    if ordering == "dir-before-mount":
        server_dir.mkdir()
        mount(root_a, options)
        mount(root_b, options)
    else:
        mount(root_a, options)
        mount(root_b, options)
        time.sleep(0.05)  # the server's mtime for the root is later than the mounts
        server_dir.mkdir()
    marker_b = root_b / name / "READY"
    created: list[float] = []
    t0 = time.monotonic()
    marker_a = root_a / name / "READY"
    writer = threading.Timer(CREATE_AFTER_S, lambda: created.append(publish(marker_a)))
    writer.start()
    polls, seen = 0, None
    while seen is None and polls * POLL_INTERVAL_S <= limit_s:
        remaining = t0 + polls * POLL_INTERVAL_S - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        polls += 1
        if marker_b.exists():
            seen = time.monotonic()
    writer.join()
    umount(root_a)
    umount(root_b)
    delay = None if seen is None else round(seen - created[0], 3)
    return {"ordering": ordering, "trial": k, "delay_s": delay, "polls": polls,
            "first_poll_saw_it": polls == 1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--mount", default="vers=3", help="nfs(5) options of both hosts")
    parser.add_argument("--limit", type=float, default=45.0, help="seconds b polls at most")
    args = parser.parse_args()
    print(f"kernel {os.uname().release}; mounts {args.mount},nosharecache; "
          f"poll every {POLL_INTERVAL_S} s; READY made {CREATE_AFTER_S} s after b's first poll")
    results = []
    for k in range(args.trials):
        for ordering in ORDERINGS:
            result = trial(ordering, k, args.mount, args.limit)
            print(json.dumps(result), flush=True)
            results.append(result)
    print(f"{'ordering':<18} {'trials':>6}  delays (s), creation to first sighting")
    for ordering in ORDERINGS:
        delays = [r["delay_s"] for r in results if r["ordering"] == ordering]
        seen = [float(str(d)) for d in delays if d is not None]
        median = f"median {statistics.median(seen):.2f}" if seen else "never seen"
        print(f"{ordering:<18} {len(delays):>6}  {delays}  {median}")
    out = os.environ.get("NFS_OUT")
    if out:
        Path(out, "mount_order.json").write_text(json.dumps(results, indent=1))
    return 0


EXPORT = os.environ.get("NFS_EXPORT", "/srv/nfs")

if __name__ == "__main__":
    raise SystemExit(main())
