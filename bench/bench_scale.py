"""What scale costs, as ratios (issue 29): file bytes, trace events, examples.

    python bench/bench_scale.py [--quick] [--against REV] [--file-mib N]
                                [--sync-mib N] [--store-only] [--stored-mib N]

Every figure is measured in a fresh child interpreter (peak RSS is the
child's own VmHWM), side by side with the same child run on the code of
``REV`` (a git revision) when ``--against`` is given; without it, or when
the clone lacks ``REV``, beside the figures issue 29 measured before its
work on this kind of machine.  CI compares with ``7ebe4ae``, the commit
before issue 29 (release 0.1.0, ``3860c23``, has no exploration API and no
``trace_keep``: those rows read n/a against it).  Prints ratios, never
asserts: machine load moves every absolute number.

- RSS per file byte: a file written on one host and read on another, peak
  RSS above an empty world's, divided by the file's size (1.0: the bytes
  are held once);
- the same with ``World(store=True)`` (file data on the real disk) beside
  without, the writer fsyncing every 64 MiB (4 MiB with ``--quick``;
  ``--sync-mib 0``: never, every page dirty until the close, which the
  store bounds by writing dirty pages to it too): 16 MiB with ``--quick``,
  else 1 GiB and 10 GiB (10 GiB with the store only: without it needs
  about 1.4 times 10 GiB of RAM, which the figure above gives);
  ``--store-only`` measures the store's rows alone, these and the small
  loop's below (the 10 GiB one takes minutes of CPU), ``--stored-mib N``
  only the files of N MiB;
- the CPU time of a small write/read loop across two hosts (a 70 KB file
  rewritten in 5,000-byte writes, each closed) with the store beside
  without it, and the size of the store's file it leaves (old blocks are
  reused once nothing refers to them);
- RSS per trace event at default settings: a poller past the trace's kept
  window, peak RSS above an empty world's, divided by the events recorded,
  beside the same run keeping every event (``trace_keep=None``);
- examples per CPU second of each scenario's exploration (its first
  variant, and refit's ``pr``; ``--quick``: refit's only) and of the
  README's marker example (a ``simfs.explore`` test, derandomized), in CPU
  time, which moves less with the machine's load than wall time.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

QUICK = "--quick" in sys.argv
ROOT = Path(__file__).resolve().parent.parent
FILE_MIB = (int(sys.argv[sys.argv.index("--file-mib") + 1]) if "--file-mib" in sys.argv
            else 16 if QUICK else 256)
POLLS = 60_000 if QUICK else 500_000  # 2 events each: past the 100,000 kept
# (MiB, with the store): the store's figures; 10 GiB only with the store.
STORED = ([(16, False), (16, True)] if QUICK
          else [(1024, False), (1024, True), (10240, True)])
if "--stored-mib" in sys.argv:  # those rows alone, e.g. 1024 or 10240
    _ONLY = int(sys.argv[sys.argv.index("--stored-mib") + 1])
    STORED = [(_ONLY, False), (_ONLY, True)] if _ONLY <= 1024 else [(_ONLY, True)]
# The writer's fsync interval in the store's figures (0: none until the close).
SYNC_MIB = (int(sys.argv[sys.argv.index("--sync-mib") + 1]) if "--sync-mib" in sys.argv
            else 4 if QUICK else 64)
STORE_ONLY = "--store-only" in sys.argv
LOOP = 1000 if QUICK else 5000  # rounds of the small write/read loop
EXAMPLES = 20 if QUICK else 200

# Issue 29's "before" figure, measured on the project's 2-core machine at
# commit 7ebe4ae: 1 GiB written and read back peaked at 5,235 MB (an empty
# world: 28 MB), 64 MiB at 354 MB.
BEFORE_FILE = (5_235 - 28) * 2**20 / 2**30

_CHILD = r"""
import json, os, sys, time
mode, arg = sys.argv[1], sys.argv[2]

def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    return int(kib) * 1024

if mode == "file":
    from simfs import World
    mib, store, sync = (arg.split(":") + ["", "0"])[:3]
    mib, sync = int(mib), int(sync)
    w = World(seed=1, step_timeout=600.0, **({"store": True} if store == "store" else {}))
    a, b = w.host("a"), w.host("b")
    def write():
        block = b"x" * (1 << 20)
        with open("/shared/big", "wb") as f:
            for n in range(mib):
                f.write(block)
                if sync and n % sync == sync - 1:
                    f.flush()
                    os.fsync(f.fileno())  # a real writer's dirty limit, by hand
    def read():
        with open("/shared/big", "rb") as f:
            while f.read(1 << 20):
                pass
    if mib:
        w.spawn(a, write); w.run(); w.spawn(b, read); w.run()
    print(json.dumps({"peak": peak()}))
elif mode == "loop":
    from simfs import World
    rounds, store = arg.split(":")
    rounds = int(rounds)
    w = World(seed=1, **({"store": True} if store == "store" else {}))
    def writer():
        for n in range(rounds):
            with open("/shared/f", "r+b" if n else "wb") as f:
                f.seek(n * 1000 % 65536)
                f.write(b"w" * 5000)
            time.sleep(0.1)
    def reader():
        for n in range(rounds):
            time.sleep(0.1)
            with open("/shared/f", "rb") as f:
                f.seek(n * 777 % 65536)
                f.read(9000)
    w.spawn(w.host("a"), writer)
    w.spawn(w.host("b"), reader)
    w.run()  # imports and first-use costs out of the count: a second world is timed
    start = time.process_time()
    w = World(seed=1, **({"store": True} if store == "store" else {}))
    w.spawn(w.host("a"), writer)
    w.spawn(w.host("b"), reader)
    w.run()
    cpu = time.process_time() - start
    kept = w._server_state.store
    print(json.dumps({"cpu": cpu, "used": 0 if kept is None else kept.used}))
elif mode == "events":
    from simfs import World
    polls, keep = arg.split(":")
    polls = int(polls)
    w = World(seed=1, max_events=10 * polls + 100,
              **({} if keep == "default" else {"trace_keep": None}))
    w.server.mkdir("/shared/dir")
    def poll():
        for _ in range(polls):
            os.path.exists("/shared/dir/marker")
            time.sleep(0.1)
    if polls:
        w.spawn(w.host("h"), poll)
    w.run()
    print(json.dumps({"peak": peak(), "events": len(w.trace)}))
elif mode == "explore":
    from scenarios import get
    from scenarios._explore import explore
    name, variant, examples = arg.split(":")
    explore(get(name), variant, examples=3)  # imports and first-use costs out of the count
    start = time.process_time()
    state = explore(get(name), variant, examples=int(examples))
    print(json.dumps({"rate": state.examples / (time.process_time() - start),
                      "examples": state.examples}))
elif mode == "marker":
    from hypothesis import settings
    import simfs
    from simfs.strategies import mount_options
    def publish(path):
        with open(path + ".tmp", "w") as f:
            f.write("ready")
        os.replace(path + ".tmp", path)
    def wait_for(path, timeout):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(path)
            time.sleep(0.1)
    count = [0]
    def body(world):
        count[0] += 1
        world.server.mkdir("/shared/step")
        world.spawn("b", wait_for, "/shared/step/READY", 5.0)
        world.spawn("a", publish, "/shared/step/READY")
        world.run()
    def search(examples):
        return simfs.explore(hosts={"a": "vers=3", "b": mount_options()},
                             max_examples=examples,
                             hypothesis_settings=settings(derandomize=True, database=None))(body)
    try:
        search(3)()  # imports and first-use costs out of the count
    except Exception:
        pass  # since the ACCESS fix the marker example fails, as the README says
    count[0] = 0
    start = time.process_time()
    try:
        search(int(arg))()
    except Exception:
        pass  # a failure found and shrunk is a search like any other
    print(json.dumps({"rate": count[0] / (time.process_time() - start), "examples": count[0]}))
"""

EXPLORED = [("handshake", "exists"), ("cas", "seed"), ("prune", "rmtree"), ("refit", "pr")]


def _child(path: Path, mode: str, arg: str) -> dict[str, float]:
    """The child's figures; NaN ones when that revision cannot measure them.

    (Release 0.1.0 has no exploration API and no ``trace_keep``: its row
    reads n/a there rather than ending the comparison.)
    """
    env = dict(os.environ, PYTHONPATH=str(path))
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, arg], cwd=path, env=env,
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        if path == ROOT:
            raise SystemExit(f"bench_scale: the {mode} child failed:\n{done.stderr}")
        nan = float("nan")
        return {"peak": nan, "events": nan, "rate": nan, "cpu": nan}
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(path: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    empty = _child(path, "file", "0")["peak"]
    if not STORE_ONLY:
        figures["file"] = ((_child(path, "file", str(FILE_MIB))["peak"] - empty)
                           / (FILE_MIB << 20))
    for mib, stored in STORED:
        peak = _child(path, "file",
                      f"{mib}:{'store' if stored else 'memory'}:{SYNC_MIB}")["peak"]
        figures[f"file {mib} {'store' if stored else 'memory'}"] = peak - empty
    for store in ("memory", "store"):
        loop = _child(path, "loop", f"{LOOP}:{store}")
        figures[f"loop {store}"] = loop["cpu"]
        if store == "store":
            figures["store file"] = loop.get("used", float("nan"))
    if STORE_ONLY:
        return figures
    empty = _child(path, "events", "0:default")["peak"]
    for keep in ("default", "all"):
        events = _child(path, "events", f"{POLLS}:{keep}")
        figures[f"event {keep}"] = (events["peak"] - empty) / events["events"]
    for name, variant in EXPLORED[-1:] if QUICK else EXPLORED:
        figures[f"{name}/{variant}"] = _child(path, "explore",
                                              f"{name}:{variant}:{EXAMPLES}")["rate"]
    figures["README marker"] = _child(path, "marker", str(EXAMPLES))["rate"]
    return figures


def _tree(revision: str, into: str) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True,
                             capture_output=True).stdout
    path = Path(into) / "tree"
    path.mkdir()
    with tempfile.TemporaryFile() as raw:
        raw.write(archive)
        raw.seek(0)
        with tarfile.open(fileobj=raw) as tar:
            tar.extractall(path, filter="data")
    return path


def main() -> None:
    against = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
    if against is not None and subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{against}^{{commit}}"],
            capture_output=True, check=False).returncode != 0:
        print(f"bench_scale: revision {against!r} is not in this clone (a shallow one?); "
              "the figures alone, beside issue 29's before figures")
        against = None
    now = measure(ROOT)
    print(f"scale (issue 29){' (quick)' if QUICK else ''}: a {FILE_MIB} MiB file, "
          f"{2 * POLLS:,} events, {EXAMPLES} examples per search\n")
    syncing = f"an fsync every {SYNC_MIB} MiB" if SYNC_MIB else "no fsync before the close"
    if against is None:
        if not STORE_ONLY:
            print(f"  RSS per file byte            {now['file']:8.2f} B   (issue 29 before: "
                  f"{BEFORE_FILE:.2f} B, {BEFORE_FILE / now['file']:.1f}x as much)")
        print("  file data on the real disk, World(store=True), written in 1 MiB writes "
              f"with {syncing} and read back on another host: peak RSS above an empty "
              "world's")
        for mib, stored in STORED:
            key = f"file {mib} {'store' if stored else 'memory'}"
            print(f"    {mib:6} MiB {'with' if stored else 'without':7} the store "
                  f"{now[key] / 1e6:9.1f} MB  ({now[key] / (mib << 20):.3f} B per file byte)")
        print(f"  a small write/read loop ({LOOP} rounds, two hosts): "
              f"{now['loop store'] / now['loop memory']:.2f}x the CPU time with the store "
              f"({now['loop store']:.2f} s, without {now['loop memory']:.2f} s); the "
              f"store's file after it: {now['store file'] / 1e6:.2f} MB")
        if STORE_ONLY:
            return
        print(f"  RSS per event, default trace {now['event default']:8.2f} B   (every event "
              f"kept: {now['event all']:.2f} B, "
              f"{now['event all'] / max(now['event default'], 1e-9):.1f}x as much)")
        if QUICK:
            print("    (the default keeps 100,000 events, so at this length the kept window "
                  "dominates; without --quick: 1,000,000 events)")
        print("  examples per CPU second (--against REV compares them with another revision)")
        for key, value in now.items():
            if not key.startswith(("file", "event", "loop")):
                print(f"    {key:27}{value:8.1f}")
        return
    with tempfile.TemporaryDirectory() as directory:
        then = measure(_tree(against, directory))
    print(f"{'':34}{'now':>12}{against[:12]:>14}{'then/now':>10}")
    for key, value in now.items():
        unit = (" B" if key.startswith(("file", "event")) else " s" if key.startswith("loop")
                else "  ")
        label = {"file": "RSS per file byte", "event default": "RSS per event (default)",
                 "event all": "RSS per event (keep all)"}.get(key, f"examples/CPU s {key}")
        if key.startswith("file "):
            mib, where = key[5:].split()
            label = f"RSS {mib} MiB file, {where}"
            unit, value, then[key] = " MB", value / 1e6, then[key] / 1e6
        elif key == "store file":
            label = "store file, small loop"
            unit, value, then[key] = " MB", value / 1e6, then[key] / 1e6
        elif key.startswith("loop"):
            label = f"CPU s, small loop, {key[5:]}"
        if math.isnan(then[key]):
            print(f"  {label:32}{value:10.2f}{unit}{'n/a':>12}{unit}{'':>10}")
            continue
        ratio = (then[key] / max(value, 1e-9) if unit in (" B", " MB", " s")
                 else value / max(then[key], 1e-9))
        print(f"  {label:32}{value:10.2f}{unit}{then[key]:12.2f}{unit}{ratio:9.2f}x")
    print("  (x: how many times better now: memory then/now, examples now/then; the RSS "
          f"of a file: above an empty world's, its writer with {syncing})")


if __name__ == "__main__":
    main()
