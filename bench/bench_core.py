"""The core's costs against issue 16's targets, measured side by side in one run.

    python bench/bench_core.py [--quick] [--profile] [--instructions]

Prints ratios, never asserts: machine load moves every absolute number, the
ratios measured in one run move much less.  Sections:

- start-up: ``python -m scenarios run handshake`` end to end beside a bare
  interpreter, and which heavy packages ``import scenarios`` pulls in;
- the seed-000 shape (poll every 0.1 s for 30 virtual s): virtual seconds
  simulated per wall second;
- one simulated poll (a stat answered from a cached negative entry, then a
  sleep) in CPU µs, beside a real ``os.stat`` of a missing file on tmpfs plus
  a no-op call;
- host scaling: CPU µs per poll with 2 to 1,000 hosts polling at once, on
  the thread baton (an OS thread per process) and the greenlet baton (the
  default: every process a greenlet on one engine thread);
- memory: peak RSS of a run of about 1M trace events, beside an empty world;
- with ``--profile``: the top entries of a cProfile of one poller;
- with ``--instructions`` (needs valgrind): instructions per poll at 2, 128
  and 1,000 hosts, counted by cachegrind as the difference between two runs
  of different lengths, so start-up cancels out.  Unlike CPU time, the count
  does not move with the machine's load; where CPU time grows with the host
  count and the count does not, the growth is memory, not work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from simfs import World

QUICK = "--quick" in sys.argv
PYTHON = sys.executable
MISSING = "/shared/dir/marker"


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def start_up() -> None:
    # An installed package starts from its bytecode (pip compiles it), even
    # where PYTHONDONTWRITEBYTECODE keeps imports from writing any.
    root = Path(__file__).resolve().parent.parent
    subprocess.run([PYTHON, "-m", "compileall", "-q", *(str(root / package) for package in
                    ("simfs", "scenarios", "reference"))], check=True)
    bare = min(_wall([PYTHON, "-c", "pass"]) for _ in range(3))
    handshake = min(_wall([PYTHON, "-m", "scenarios", "run", "handshake"]) for _ in range(2))
    imports = min(_wall([PYTHON, "-c", "import scenarios.handshake"]) for _ in range(3))
    heavy = subprocess.run(
        [PYTHON, "-c", "import sys, scenarios, scenarios.handshake, simfs; "
         "print(' '.join(m for m in ('hypothesis', 'pytest', 'trio.testing', 'numpy') "
         "if m in sys.modules) or 'none')"],
        check=True, capture_output=True, text=True).stdout.strip()
    print("start-up")
    print(f"  python -c pass                       {bare:8.3f} s")
    print(f"  import scenarios.handshake           {imports:8.3f} s")
    print(f"  python -m scenarios run handshake    {handshake:8.3f} s"
          f"   (issue 16's target: <= 0.70 s, 3x the 2.1 s it took before)")
    print(f"  heavy packages imported by scenarios: {heavy}")


def _poller(path: str, polls: int, interval: float) -> Callable[[], None]:
    def poll() -> None:
        for _ in range(polls):
            os.path.exists(path)
            time.sleep(interval)
    return poll


def _world_with_hosts(count: int) -> tuple[World, list[str]]:
    world = World(seed=1)
    world.server.mkdir("/shared/dir")
    names = [f"h{i}" for i in range(count)]
    for name in names:
        world.host(name)
    return world, names


def seed_000_speed() -> None:
    trials = 20 if QUICK else 80
    wall = 0.0
    virtual = 0.0
    for _ in range(trials):
        world, (_writer, poller) = _world_with_hosts(2)
        world.spawn(poller, _poller(MISSING, 300, 0.1))
        start = time.perf_counter()
        world.run()
        wall += time.perf_counter() - start
        virtual += world.now
        world.close()
    print("\nseed-000 shape (300 polls, 30 virtual s, per trial)")
    print(f"  {trials} trials: {virtual:.0f} virtual s in {wall:.3f} wall s = "
          f"{virtual / wall:,.0f}x real time")


def poll_cost() -> None:
    polls = 20_000 if QUICK else 100_000
    world, (host,) = _world_with_hosts(1)
    world.spawn(host, _poller(MISSING, polls, 0.1))
    start = time.process_time()
    world.run()
    simulated = (time.process_time() - start) / polls * 1e6
    world.close()

    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    missing = os.path.join(directory, "simfs-bench-missing")

    def noop() -> None:
        pass

    start = time.process_time()
    for _ in range(polls):
        os.path.exists(missing)
        noop()
    real = (time.process_time() - start) / polls * 1e6
    print("\none poll (exists() from a cached negative entry + sleep), CPU µs")
    print(f"  simulated {simulated:7.2f}   real stat + no-op {real:6.2f}   "
          f"ratio {simulated / real:5.1f}x   (target: <= 5 µs and <= 2x)")


def _scaling_row(count: int, total_polls: int, baton: str) -> float:
    """CPU µs per poll with ``count`` hosts polling at once on ``baton``."""
    os.environ["SIMFS_BATON"] = baton
    try:
        polls = max(total_polls // count, 8)
        world, names = _world_with_hosts(count)
        for name in names:
            world.spawn(name, _poller(MISSING, polls, 0.1))
        cpu = time.process_time()
        world.run()
        cpu_per_poll = (time.process_time() - cpu) / (polls * count) * 1e6
        world.close()
    finally:
        del os.environ["SIMFS_BATON"]
    return cpu_per_poll


def host_scaling() -> None:
    """µs per poll against the host count, on each baton, best of a few rounds.

    CPU time, not wall: on a loaded 2-CPU machine the wall clock mostly
    measures the other tenants.  Rounds alternate between the batons so
    both see the same load.
    """
    counts = (2, 8, 32, 128, 1000)
    total_polls = 8_000 if QUICK else 20_000
    rounds = 3 if QUICK else 7
    batons = ("thread", "greenlet")
    best = {(baton, count): float("inf") for baton in batons for count in counts}
    for _ in range(rounds):
        for count in counts:
            for baton in batons:
                cpu = _scaling_row(count, total_polls, baton)
                best[baton, count] = min(best[baton, count], cpu)
    print("\nhost scaling: one poller per host, CPU µs per poll, best of "
          f"{rounds} (target: 128 and 1,000 hosts within 1.5x of 2)")
    print("  hosts   thread baton        greenlet baton (default)")
    for count in counts:
        thread, green = best["thread", count], best["greenlet", count]
        print(f"  {count:5d}  {thread:8.2f} µs {thread / best['thread', 2]:5.2f}x"
              f"   {green:8.2f} µs {green / best['greenlet', 2]:5.2f}x")


def poll_profile() -> None:
    """Where one poll's CPU goes: cProfile of a poller, top entries by own time."""
    import cProfile
    import pstats

    polls = 20_000
    world, (host,) = _world_with_hosts(1)
    profile = cProfile.Profile()
    poll = _poller(MISSING, polls, 0.1)

    def profiled() -> None:
        profile.enable()
        try:
            poll()
        finally:
            profile.disable()

    world.spawn(host, profiled)
    world.run()
    world.close()
    print(f"\nprofile of {polls:,} polls (cProfile inflates small calls; read it for shares)")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(14)


_MEMORY_CHILD = """
import os, sys, time
from simfs import World
polls, keep = int(sys.argv[1]), (None if sys.argv[2] == "all" else int(sys.argv[2]))
w = World(seed=1, max_events=10 * polls + 100, trace_keep=keep)
w.server.mkdir("/shared/dir")
h = w.host("h")
def poll():
    for _ in range(polls):
        os.path.exists("/shared/dir/marker")
        time.sleep(0.1)
if polls:
    w.spawn(h, poll)
w.run()
# VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across execve, so it
# would report the bench parent's peak at the fork; VmHWM belongs to this image.
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(len(w.trace), peak)
"""


def memory() -> None:
    polls = 100_000 if QUICK else 500_000

    def child(count: int, keep: str) -> tuple[int, int]:
        out = subprocess.run([PYTHON, "-c", _MEMORY_CHILD, str(count), keep], check=True,
                             capture_output=True, text=True).stdout.split()
        return int(out[0]), int(out[1])

    _, empty_kib = child(0, "all")
    print("\nmemory: peak RSS of a long run beside an empty world (target: 1M events <= 60 MB)")
    for keep in ("all", "10000"):
        events, kib = child(polls, keep)
        print(f"  {events:,} events, trace_keep={keep:>5}: {kib / 1024:4.0f} MB "
              f"(empty world {empty_kib / 1024:.0f} MB; "
              f"{(kib - empty_kib) * 1024 / max(events, 1):.0f} B/event)")


# The host-scaling rows' own world and pollers (bench_core imported by path).
_INSTRUCTIONS_CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
from bench_core import MISSING, _poller, _world_with_hosts
hosts, polls = int(sys.argv[1]), int(sys.argv[2])
world, names = _world_with_hosts(hosts)
for name in names:
    world.spawn(name, _poller(MISSING, polls, 0.1))
world.run()
"""


def _instructions(hosts: int, polls: int) -> int:
    """Instructions cachegrind counts for a run of ``polls`` polls on each of ``hosts``."""
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "cachegrind.out")
        subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                        f"--cachegrind-out-file={out}", PYTHON, "-c", _INSTRUCTIONS_CHILD,
                        str(hosts), str(polls), str(Path(__file__).resolve().parent)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as counts:
            summary = next(line for line in counts if line.startswith("summary:"))
    return int(summary.split()[1])


def instructions() -> None:
    """Instructions per poll against the host count (valgrind's cachegrind)."""
    if shutil.which("valgrind") is None:
        print("\ninstructions per poll: valgrind is not installed (apt-get install valgrind)")
        return
    print("\ninstructions per poll (cachegrind, the difference of two run lengths)")
    base = None
    for hosts in (2, 128, 1000):
        short = max(2000 // hosts, 8)
        per_poll = ((_instructions(hosts, 2 * short) - _instructions(hosts, short))
                    / (short * hosts))
        base = base or per_poll
        print(f"  {hosts:5d} hosts  {per_poll:9,.0f}  {per_poll / base:5.2f}x")


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}{' (quick)' if QUICK else ''}\n")
    start_up()
    seed_000_speed()
    poll_cost()
    host_scaling()
    memory()
    if "--profile" in sys.argv:
        poll_profile()
    if "--instructions" in sys.argv:
        instructions()


if __name__ == "__main__":
    main()
