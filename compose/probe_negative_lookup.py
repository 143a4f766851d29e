"""Measure how long a file created on one NFS host stays invisible on another.

Reproduces docs/nfs-facts.md, "Attribute and dentry caches" on two real mounts
of one export (run it through compose/vm.py, which sets NFS_MOUNTS and
NFS_OUT): a writer process on host A creates t/marker (O_CREAT|O_EXCL) at a
random 0.2-2 s, a poller process on host B checks t/marker every 0.1 s from
t=0; the delay is creation to first sighting, both read on the guest's one
CLOCK_MONOTONIC.  Two variants: plain `Path.exists()`, and opening the
grandparent then the parent with O_DIRECTORY first (close-to-open revalidation,
the seed's fix).  Then checks that POSIX locks taken through the two mounts by
two OS processes conflict, and how long the first lock after the server start
takes (the grace period).

Writer, poller and lockers are separate OS processes (this script re-run with
a role), because both mounts live in one kernel: only different processes can
conflict on a lock (docs/design.md, "Real NFS").  Stdlib only; writes
negative_lookup.json.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

POLL_INTERVAL_S = 0.1
DELAY_RANGE_S = (0.2, 2.0)
VARIANTS = ("plain", "revalidate")


@dataclass(frozen=True)
class Trial:
    variant: str
    trial: int
    create_after_s: float  # when the writer created the marker, from t=0
    delay_s: float | None  # creation to first sighting; None: not seen by the deadline
    polls: int


# ------------------------------------------------------------------ roles


def lines() -> Iterator[dict[str, object]]:
    """Commands from the parent, one JSON object per line, until stdin closes."""
    for line in sys.stdin:
        yield json.loads(line)


def reply(obj: dict[str, object]) -> None:
    print(json.dumps(obj), flush=True)


def sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def role_writer() -> None:
    """On host A: create t/marker at the time the parent chose."""
    reply({"ready": True})
    for cmd in lines():
        marker = Path(str(cmd["dir"]), "marker")
        sleep_until(float(str(cmd["at"])))
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        created = time.monotonic()
        os.close(fd)
        reply({"created": created})


def revalidate(t_dir: Path) -> None:
    """Open grandparent, then parent, O_DIRECTORY: each open sends a GETATTR
    (close-to-open), and a changed mtime drops cached negative entries
    (docs/nfs-facts.md, "Attribute and dentry caches")."""
    for directory in (t_dir.parent, t_dir):
        try:
            os.close(os.open(directory, os.O_RDONLY | os.O_DIRECTORY))
        except FileNotFoundError:
            pass


def role_poller() -> None:
    """On host B: poll t/marker every 0.1 s from t0, report the first sighting."""
    reply({"ready": True})
    for cmd in lines():
        t_dir = Path(str(cmd["dir"]))
        marker = t_dir / "marker"
        t0, deadline = float(str(cmd["t0"])), float(str(cmd["deadline"]))
        polls, seen = 0, None
        while seen is None and t0 + polls * POLL_INTERVAL_S <= deadline:
            sleep_until(t0 + polls * POLL_INTERVAL_S)
            if cmd["variant"] == "revalidate":
                revalidate(t_dir)
            polls += 1
            if marker.exists():
                seen = time.monotonic()
        reply({"seen": seen, "polls": polls})


def role_lock_holder() -> None:
    """Take an exclusive lock, report how long it took, hold it until told."""
    path = sys.argv[2]
    with open(path, "a+") as f:
        start = time.monotonic()
        fcntl.lockf(f, fcntl.LOCK_EX)
        reply({"first_lock_s": round(time.monotonic() - start, 3)})
        sys.stdin.readline()  # hold until the parent says release
        fcntl.lockf(f, fcntl.LOCK_UN)
        reply({"released_at": time.monotonic()})


def role_lock_taker() -> None:
    """Try the lock without blocking (must fail while held), then block for it."""
    path = sys.argv[2]
    with open(path, "a+") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            conflict, err = False, ""
        except OSError as e:
            conflict = e.errno in (errno.EAGAIN, errno.EACCES)
            err = errno.errorcode.get(e.errno or 0, str(e.errno))
        reply({"conflict": conflict, "errno": err})
        if conflict:
            sys.stdin.readline()  # block now; the parent then makes the holder release
            fcntl.lockf(f, fcntl.LOCK_EX)
            reply({"acquired_at": time.monotonic()})
        fcntl.lockf(f, fcntl.LOCK_UN)


ROLES = {
    "_writer": role_writer,
    "_poller": role_poller,
    "_lock_holder": role_lock_holder,
    "_lock_taker": role_lock_taker,
}


# ----------------------------------------------------------------- parent


class Child:
    """A role run as its own OS process, spoken to in JSON lines."""

    def __init__(self, role: str, *args: str) -> None:
        self.role = role
        self.proc = subprocess.Popen(
            [sys.executable, __file__, role, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, obj: dict[str, object] | None = None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) if obj is not None else "") + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.role} exited with {self.proc.wait()}")
        result: dict[str, object] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run_trial(
    writer: Child,
    poller: Child,
    root_a: Path,
    root_b: Path,
    rel: str,
    variant: str,
    k: int,
    rng: random.Random,
    deadline_s: float,
) -> Trial:
    """One trial in a fresh t/ (made on A before t=0; B has never looked it up)."""
    (root_a / rel / "t").mkdir(parents=True)
    create_after = rng.uniform(*DELAY_RANGE_S)
    t0 = time.monotonic() + 0.3  # time for both to be waiting
    poller.send(
        {"dir": str(root_b / rel / "t"), "t0": t0, "deadline": t0 + deadline_s, "variant": variant}
    )
    writer.send({"dir": str(root_a / rel / "t"), "at": t0 + create_after})
    created = float(str(writer.receive()["created"]))
    answer = poller.receive()
    seen = answer["seen"]
    delay = None if seen is None else round(max(0.0, float(str(seen)) - created), 3)
    return Trial(variant, k, round(created - t0, 3), delay, int(str(answer["polls"])))


def measure_lookups(
    root_a: Path, root_b: Path, trials: int, deadline_s: float, seed: int
) -> list[Trial]:
    rng = random.Random(seed)
    writer, poller = Child("_writer"), Child("_poller")
    writer.receive(), poller.receive()
    results = []
    try:
        for variant in VARIANTS:
            for k in range(trials):
                rel = f"probe-{os.getpid()}/{variant}-{k}"
                results.append(
                    run_trial(writer, poller, root_a, root_b, rel, variant, k, rng, deadline_s)
                )
                print(f"  {variant:10} trial {k}: {asdict(results[-1])}", flush=True)
    finally:
        writer.close()
        poller.close()
    return results


def measure_lock(root_a: Path, root_b: Path) -> dict[str, object]:
    """Two OS processes lock one file through the two mounts: they must conflict."""
    name = f"probe-{os.getpid()}/lockfile"
    (root_a / name).parent.mkdir(parents=True, exist_ok=True)
    (root_a / name).touch()
    holder = Child("_lock_holder", str(root_a / name))
    first = holder.receive()  # the first lock since the server started: grace?
    taker = Child("_lock_taker", str(root_b / name))
    tried = taker.receive()
    result: dict[str, object] = {**first, **tried}
    if tried["conflict"]:
        taker.send()  # the taker blocks in lockf ...
        time.sleep(0.5)
        holder.send()  # ... until the holder releases: how soon is it granted?
        released = float(str(holder.receive()["released_at"]))
        acquired = float(str(taker.receive()["acquired_at"]))
        result["granted_after_release_s"] = round(acquired - released, 3)
    else:
        holder.send()
        holder.receive()
    holder.close()
    taker.close()
    return result


def summarize(results: list[Trial]) -> dict[str, dict[str, object]]:
    table: dict[str, dict[str, object]] = {}
    for variant in VARIANTS:
        delays = [t.delay_s for t in results if t.variant == variant]
        seen = [d for d in delays if d is not None]
        table[variant] = {
            "trials": len(delays),
            "unseen": len(delays) - len(seen),
            "median_s": round(statistics.median(seen), 3) if seen else None,
            "min_s": min(seen, default=None),
            "max_s": max(seen, default=None),
        }
    return table


def mount_options(mountpoint: str) -> str:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == mountpoint:
            return fields[3]
    return "?"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ROLES:
        ROLES[sys.argv[1]]()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", default="a", help="host that creates (default a)")
    parser.add_argument("--poller", default="b", help="host that polls (default b)")
    parser.add_argument("--trials", type=int, default=10, help="per variant (default 10)")
    parser.add_argument("--deadline", type=float, default=10.0, help="poll for at most S s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    root_a, root_b = Path(mounts[args.writer]), Path(mounts[args.poller])
    print(f"writer {args.writer}: {mount_options(str(root_a))}")
    print(f"poller {args.poller}: {mount_options(str(root_b))}")
    lock = measure_lock(root_a, root_b)
    print(f"lock: {lock}")
    results = measure_lookups(root_a, root_b, args.trials, args.deadline, args.seed)
    table = summarize(results)
    report = {
        "writer": {"host": args.writer, "options": mount_options(str(root_a))},
        "poller": {"host": args.poller, "options": mount_options(str(root_b))},
        "lock": lock,
        "summary": table,
        "trials": [asdict(t) for t in results],
    }
    out = Path(os.environ.get("NFS_OUT", "."))
    (out / "negative_lookup.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'check before exists()':24} trials unseen  median     min     max")
    for variant, row in table.items():
        cells = [
            f"{row[k]:7.2f}" if row[k] is not None else "      -"
            for k in ("median_s", "min_s", "max_s")
        ]
        print(f"{variant:24} {row['trials']:6} {row['unseen']:6} {' '.join(cells)}")
    lock_ok = bool(lock.get("conflict"))
    print(f"lock conflict between processes on {args.writer} and {args.poller}: {lock_ok}")
    return 0 if lock_ok else 1


if __name__ == "__main__":
    sys.exit(main())
