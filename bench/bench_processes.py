"""What a real OS process per simulated process would cost (docs/design.md,
"Processes and native code: two designs, measured").

    python bench/bench_processes.py [--quick]

Prints numbers and ratios, never asserts.  Needs, for the FUSE rows, root,
``/dev/fuse``, libfuse3's shared library (Debian: ``libfuse3-3``) and
``pip install mfusepy``; for the torch and Arrow rows ``pip install
'torch==2.13.0+cpu' pyarrow`` (neither is a dependency of simfs).  A row whose
requirement is missing says so and the rest still run.  Sections:

- machine: what this machine allows (root, /dev/fuse, a FUSE binding,
  ``unshare(CLONE_NEWNS)`` in a forked child and in a thread);
- spawn: a simulated process today (a greenlet) against ``fork()`` + exit +
  wait, and against a fork that also enters its own mount namespace and
  binds a mount (what design B's child does before it runs);
- memory: PSS and private memory of 8 and 128 forked children, idle after
  the fork and after each walked its heap (what CPython's reference counts
  do to copy-on-write pages: ``gc.get_objects()`` touches every object);
- routed call: one request/answer over a socketpair to another process
  (a pickled ``("stat", path)`` request, the shape of a routed call in B)
  against today's in-process poll (``bench_core.py``'s number);
- FUSE: open+close and a 4 KiB ``pread`` of a file on a FUSE mount served by
  a Python process (in-memory, kernel caches off), against tmpfs;
- torch: ``torch.save`` of a 64 MiB state dict through that FUSE mount
  (server in another process), to a real file object, to ``io.BytesIO``,
  and inside a World to a simulated file object (today's working route);
  and the same server in a *thread of the caller's process* (design A with
  FUSE), which ``torch.save(path)`` deadlocks because it holds the GIL;
- Arrow: ``pyarrow.parquet.write_table``/``read_table`` of 64 MiB the same ways;
- native guard: its cost per real ``stat``/``open`` of a simulated process's
  thread and per process start, off and on.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

QUICK = "--quick" in sys.argv
PYTHON = sys.executable
HERE = Path(__file__).resolve().parent
LIBFUSE3 = "/lib/x86_64-linux-gnu/libfuse3.so.3"
CLONE_NEWNS = 0x20000
MS_REC, MS_PRIVATE, MS_BIND = 0x4000, 1 << 18, 4096
MIB = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)


def _best(function: Callable[[], object], repeat: int, rounds: int = 3) -> float:
    """Best over ``rounds`` of the mean wall seconds of ``repeat`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            function()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


# -- machine -----------------------------------------------------------------------


def _fuse_env() -> dict[str, str]:
    env = dict(os.environ)
    if os.path.exists(LIBFUSE3) and "FUSE_LIBRARY_PATH" not in env:
        # mfusepy looks for libfuse via ldconfig's cache, which may not list it.
        env["FUSE_LIBRARY_PATH"] = LIBFUSE3
    return env


def fuse_missing() -> str | None:
    """Why the FUSE rows cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root (mounting FUSE without fusermount3 needs CAP_SYS_ADMIN)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    probe = subprocess.run([PYTHON, "-c", "import mfusepy"], env=_fuse_env(),
                           capture_output=True, text=True)
    if probe.returncode:
        return "mfusepy or libfuse3 missing: " + probe.stderr.strip().splitlines()[-1]
    return None


def _unshare_in_child() -> str:
    pid = os.fork()
    if pid == 0:
        code = _libc.unshare(CLONE_NEWNS)
        os._exit(0 if code == 0 else ctypes.get_errno())
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "yes" if code == 0 else f"no ({os.strerror(code)})"


def machine() -> None:
    import threading

    in_thread: list[str] = []

    def thread() -> None:
        code = _libc.unshare(CLONE_NEWNS)
        in_thread.append("yes" if code == 0 else f"no ({os.strerror(ctypes.get_errno())})")

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}, kernel {os.uname().release}{' (quick)' if QUICK else ''}")
    print(f"  root: {os.geteuid() == 0}   /dev/fuse: {os.path.exists('/dev/fuse')}   "
          f"libfuse3: {os.path.exists(LIBFUSE3)}")
    print(f"  unshare(CLONE_NEWNS) in a forked child: {_unshare_in_child()}   "
          f"in a thread of a threaded process: {in_thread[0]}")
    print(f"  FUSE rows: {fuse_missing() or 'available'}")


# -- spawn -------------------------------------------------------------------------


def _greenlet_spawn_us(count: int) -> float:
    from simfs import World

    def nothing() -> None:
        pass

    best = float("inf")
    for _ in range(3):
        world = World(seed=1)
        host = world.host("h")
        start = time.perf_counter()
        for _ in range(count):
            world.spawn(host, nothing)
        world.run()
        best = min(best, (time.perf_counter() - start) / count)
        world.close()
    return best * 1e6


def _fork_exit() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _fork_namespace(source: str, target: str) -> Callable[[], None]:
    def run() -> None:
        pid = os.fork()
        if pid == 0:
            ok = (_libc.unshare(CLONE_NEWNS) == 0
                  and _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
                  and _libc.mount(source.encode(), target.encode(), None, MS_BIND, None) == 0)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status):
            raise OSError("unshare/mount failed in the child")
    return run


def spawn() -> None:
    count = 200 if QUICK else 1000
    green = _greenlet_spawn_us(count)
    forks = 50 if QUICK else 200
    fork_bare = _best(_fork_exit, forks) * 1e6
    cpu = time.process_time()
    children = os.times()
    for _ in range(forks):
        _fork_exit()
    after = os.times()
    fork_cpu = ((time.process_time() - cpu) + (after.children_user - children.children_user)
                + (after.children_system - children.children_system)) / forks * 1e6
    print("\nspawn: wall µs per process started and finished (best of 3)")
    print(f"  today: World.spawn + run of a no-op (greenlet)       {green:9.1f} µs")
    print(f"  fork() + _exit + waitpid (this process, simfs loaded) {fork_bare:9.1f} µs"
          f"   {fork_bare / green:6.1f}x")
    print(f"    of which CPU (parent + child)                      {fork_cpu:9.1f} µs")
    if os.geteuid() == 0:
        with tempfile.TemporaryDirectory() as source, tempfile.TemporaryDirectory() as target:
            fork_ns = _best(_fork_namespace(source, target), forks) * 1e6
        print(f"  + unshare(NEWNS), make / private, bind a mount       {fork_ns:9.1f} µs"
              f"   {fork_ns / green:6.1f}x")


def spawn_with_torch() -> None:
    try:
        import torch  # noqa: F401  (a large heap and many mappings make fork dearer)
    except ImportError:
        print("\n(torch not installed: no fork or memory rows with torch imported)")
        return
    forks = 50 if QUICK else 200
    fork_torch = _best(_fork_exit, forks) * 1e6
    print(f"\nfork() + _exit + waitpid, torch imported: {fork_torch:9.1f} µs")
    memory()


# -- memory ------------------------------------------------------------------------


def _smaps(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields


def _children(count: int, walk: bool) -> tuple[float, float]:
    """Mean PSS and private KiB of ``count`` children waiting on a pipe."""
    read_end, write_end = os.pipe()
    ready_read, ready_write = os.pipe()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            if walk:
                for item in gc.get_objects():
                    id(item)
            os.write(ready_write, b"x")
            os.read(read_end, 1)
            os._exit(0)
        pids.append(pid)
    for _ in range(count):
        os.read(ready_read, 1)
    try:
        rows = [_smaps(pid) for pid in pids]
    finally:
        os.close(write_end)
        for pid in pids:
            os.waitpid(pid, 0)
        for fd in (read_end, ready_read, ready_write):
            os.close(fd)
    pss = sum(row["Pss"] for row in rows) / count
    private = sum(row["Private_Clean"] + row["Private_Dirty"] for row in rows) / count
    return pss, private


def memory() -> None:
    parent = _smaps(os.getpid())
    print(f"\nmemory of forked children (this process: RSS {parent['Rss'] / 1024:.0f} MiB"
          f"{', torch imported' if 'torch' in sys.modules else ''})")
    print("  children  after        PSS/child   private/child   total private")
    for count in (8, 128):
        for walk in (False, True):
            pss, private = _children(count, walk)
            print(f"  {count:8d}  {'heap walk' if walk else 'fork    '}  {pss / 1024:8.1f} MiB"
                  f"  {private / 1024:10.1f} MiB   {private * count / 1024:9.0f} MiB")


# -- routed call -------------------------------------------------------------------


def _echo_server(sock: socket.socket) -> None:
    while True:
        request = sock.recv(4096)
        if not request:
            return
        op, path = pickle.loads(request)
        sock.sendall(pickle.dumps((op, path, -2, None)))


def _in_process_poll_us(polls: int) -> float:
    from simfs import World

    world = World(seed=1)
    world.server.mkdir("/shared/dir")
    host = world.host("h")

    def poll() -> None:
        for _ in range(polls):
            os.path.exists("/shared/dir/marker")
            time.sleep(0.1)

    world.spawn(host, poll)
    start = time.process_time()
    world.run()
    world.close()
    return (time.process_time() - start) / polls * 1e6


def routed_call() -> None:
    calls = 5_000 if QUICK else 20_000
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _echo_server(theirs)
        os._exit(0)
    theirs.close()
    request = pickle.dumps(("stat", "/shared/dir/marker"))

    def round_trip() -> None:
        ours.sendall(request)
        pickle.loads(ours.recv(4096))

    trip = _best(round_trip, calls) * 1e6
    ours.close()
    os.waitpid(pid, 0)
    poll = _in_process_poll_us(calls)
    print("\nrouted call: one request and answer")
    print(f"  today: one simulated poll (exists + sleep), CPU µs   {poll:8.2f} µs")
    print(f"  socketpair round trip to another process, wall µs   {trip:8.2f} µs"
          f"   {trip / poll:5.1f}x a whole poll")
    print(f"  a poll in design B (2 routed calls + today's work)   {poll + 2 * trip:8.2f} µs"
          f"   {(poll + 2 * trip) / poll:5.1f}x")


# -- FUSE --------------------------------------------------------------------------


@contextlib.contextmanager
def fuse_mount() -> Iterator[str]:
    """A mountpoint served by ``_fuse_memory.py`` in another process."""
    mountpoint = tempfile.mkdtemp(prefix="simfs-fuse-")
    server = subprocess.Popen([PYTHON, "-W", "ignore", str(HERE / "_fuse_memory.py"),
                               mountpoint], env=_fuse_env(), stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            with open("/proc/mounts") as mounts:
                if any(line.split()[1] == mountpoint for line in mounts):
                    break
            if server.poll() is not None:
                raise OSError(f"FUSE server exited: {server.stderr.read().decode()[-500:]}")
            time.sleep(0.05)
        yield mountpoint
    finally:
        subprocess.run(["umount", mountpoint], check=False)
        server.wait(timeout=30)
        os.rmdir(mountpoint)


def fuse_costs(mountpoint: str) -> None:
    plain_dir = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    opens = 2_000 if QUICK else 10_000
    rows = []
    for label, directory in (("tmpfs", plain_dir), ("FUSE (Python server)", mountpoint)):
        path = os.path.join(directory, "simfs-bench-4k")
        with open(path, "wb") as file:
            file.write(os.urandom(64 * 1024))

        def open_close(path: str = path) -> None:
            os.close(os.open(path, os.O_RDONLY))

        fd = os.open(path, os.O_RDONLY)

        def read_4k(fd: int = fd) -> None:
            os.pread(fd, 4096, 4096)

        rows.append((label, _best(open_close, opens) * 1e6, _best(read_4k, opens) * 1e6))
        os.close(fd)
        os.unlink(path)
    (_, base_open, base_read), (_, fuse_open, fuse_read) = rows
    print("\nFUSE: wall µs per call, best of 3 (kernel caches off, direct_io)")
    print(f"  open+close  tmpfs {base_open:7.2f}   FUSE {fuse_open:8.2f}   "
          f"{fuse_open / base_open:6.1f}x")
    print(f"  4 KiB pread tmpfs {base_read:7.2f}   FUSE {fuse_read:8.2f}   "
          f"{fuse_read / base_read:6.1f}x")


# -- torch and Arrow ---------------------------------------------------------------


def _in_world(body: Callable[[], None]) -> float:
    """Wall seconds of a World running ``body`` as one simulated process (export
    /shared), measured outside it: inside, ``time`` is the virtual clock."""
    from simfs import World

    best = float("inf")
    for _ in range(2):
        world = World(seed=1)
        host = world.host("h")
        world.spawn(host, body)
        start = time.perf_counter()
        world.run()
        best = min(best, time.perf_counter() - start)
        world.close()
    return best


def _timed(body: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        body()
        best = min(best, time.perf_counter() - start)
    return best


def torch_rows(mountpoint: str | None) -> None:
    try:
        import torch
    except ImportError:
        print("\ntorch: not installed (pip install 'torch==2.13.0+cpu')")
        return
    state = {f"layer{i}.weight": torch.randn(MIB // 4) for i in range(64)}  # 64 MiB
    scratch = tempfile.mkdtemp(prefix="simfs-bench-")
    path = os.path.join(scratch, "model.pt")
    rows = [("io.BytesIO", _timed(lambda: torch.save(state, io.BytesIO())))]

    def to_file_object() -> None:
        with open(path, "wb") as file:
            torch.save(state, file)

    rows.append(("real file object (disk)", _timed(to_file_object)))
    rows.append(("real path (disk)", _timed(lambda: torch.save(state, path))))

    def simulated() -> None:
        with open("/shared/model.pt", "wb") as file:
            torch.save(state, file)

    rows.append(("World: simulated file object", _in_world(simulated)))
    loads = [("real path (disk)", _timed(lambda: torch.load(path)))]
    if mountpoint is not None:
        fuse_path = os.path.join(mountpoint, "model.pt")
        rows.append(("FUSE path, server in another process",
                     _timed(lambda: torch.save(state, fuse_path))))
        loads.append(("FUSE path, server in another process",
                      _timed(lambda: torch.load(fuse_path))))
        loads.append(("FUSE path, mmap=True", _timed(lambda: torch.load(fuse_path, mmap=True))))
    shutil.rmtree(scratch)
    base = rows[1][1]
    print("\ntorch.save of a 64 MiB state dict, wall s (best of 2)")
    for label, seconds in rows:
        print(f"  {label:38s} {seconds:7.3f} s   {seconds / base:5.2f}x a real file object")
    print("torch.load of it")
    for label, seconds in loads:
        print(f"  {label:38s} {seconds:7.3f} s   {seconds / loads[0][1]:5.2f}x a real path")


def arrow_rows(mountpoint: str | None) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("\nArrow: not installed (pip install pyarrow)")
        return
    table = pa.table({"a": pa.array(range(4 * MIB), pa.int64()),
                      "b": pa.array(range(4 * MIB), pa.float64())})  # 64 MiB
    scratch = tempfile.mkdtemp(prefix="simfs-bench-")
    path = os.path.join(scratch, "t.parquet")
    rows = [("real path (disk)", _timed(lambda: pq.write_table(table, path)))]

    def simulated() -> None:
        with open("/shared/t.parquet", "wb") as file:
            pq.write_table(table, file)

    rows.append(("World: simulated file object", _in_world(simulated)))
    reads = [("real path (disk)", _timed(lambda: pq.read_table(path)))]
    if mountpoint is not None:
        fuse_path = os.path.join(mountpoint, "t.parquet")
        rows.append(("FUSE path, server in another process",
                     _timed(lambda: pq.write_table(table, fuse_path))))
        reads.append(("FUSE path, server in another process",
                      _timed(lambda: pq.read_table(fuse_path))))
    shutil.rmtree(scratch)
    print("\npyarrow.parquet.write_table of 64 MiB (two int64/float64 columns), wall s")
    for label, seconds in rows:
        print(f"  {label:38s} {seconds:7.3f} s   {seconds / rows[0][1]:5.2f}x a real path")
    print("read_table of it")
    for label, seconds in reads:
        print(f"  {label:38s} {seconds:7.3f} s   {seconds / reads[0][1]:5.2f}x a real path")


_IN_PROCESS_SERVER = """
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import _fuse_memory
mountpoint = sys.argv[2]
threading.Thread(target=_fuse_memory.serve, args=(mountpoint,), daemon=True).start()
while not any(l.split()[1] == mountpoint for l in open("/proc/mounts")):
    time.sleep(0.05)
import torch
torch.save({"w": torch.zeros(1000)}, os.path.join(mountpoint, "m.pt"))
print("returned", flush=True)
os._exit(0)
"""


def in_process_server() -> None:
    """torch.save(path) to a FUSE server running in a thread of the caller's process."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    mountpoint = tempfile.mkdtemp(prefix="simfs-fuse-")
    child = subprocess.Popen([PYTHON, "-W", "ignore", "-c", _IN_PROCESS_SERVER, str(HERE),
                              mountpoint], env=_fuse_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    try:
        out, _ = child.communicate(timeout=20)
        verdict = "returned" if b"returned" in out else f"exited {child.returncode}"
    except subprocess.TimeoutExpired:
        # The caller sleeps in the kernel waiting for an answer only its own
        # (GIL-starved) thread can give: unkillable until the connection is aborted.
        verdict = "deadlocked: no answer in 20 s (torch holds the GIL; the server needs it)"
        _abort_fuse_connection(mountpoint)
        child.kill()
        child.wait()
    subprocess.run(["umount", "-l", mountpoint], check=False, stderr=subprocess.DEVNULL)
    os.rmdir(mountpoint)
    print(f"\ntorch.save(path) with the FUSE server in a thread of the same process: {verdict}")


def _abort_fuse_connection(mountpoint: str) -> None:
    """Abort this mount's FUSE connection (its number is the mount's minor device)."""
    with open("/proc/self/mountinfo") as mountinfo:
        minors = [line.split()[2].split(":")[1] for line in mountinfo
                  if line.split()[4] == mountpoint]
    connections = Path("/sys/fs/fuse/connections")
    if not any(connections.glob("*")):
        subprocess.run(["mount", "-t", "fusectl", "none", str(connections)], check=False)
    for minor in minors:
        with contextlib.suppress(OSError):
            (connections / minor / "abort").write_text("1")


_GUARD_CHILD = """
import os, sys, time
import simfs
from simfs._patch._registry import real_outside
calls = int(sys.argv[1])
stat, open_, close = real_outside(os.stat), real_outside(os.open), real_outside(os.close)
def body():
    for _ in range(calls):
        stat("/usr")
    for _ in range(calls):
        close(open_("/etc/hostname", os.O_RDONLY))
def nothing():
    pass
results = []
for target in (body, nothing):
    world = simfs.World(seed=1)
    host = world.host("h")
    count = 1 if target is body else 300
    for _ in range(count):
        world.spawn(host, target)
    start = time.process_time()
    world.run()
    results.append((time.process_time() - start) / (2 * calls if target is body else count))
    world.close()
print(simfs.native_guard().split(":")[0], *results)
"""


def guard_costs() -> None:
    """The seccomp guard's cost per real open/stat of a simulated process's thread
    (all reported to the supervisor process since they may name a simulated
    mount) and per process start, guard off and on (CPU of this interpreter)."""
    calls = 500 if QUICK else 2000
    rows = {}
    for guard in ("0", "1"):
        env = dict(os.environ, SIMFS_NATIVE_GUARD=guard)
        out = subprocess.run([PYTHON, "-c", _GUARD_CHILD, str(calls)], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        rows[out[0]] = (float(out[1]) * 1e6, float(out[2]) * 1e6)
    if "on" not in rows:
        print(f"\nnative guard: could not be turned on here ({rows})")
        return
    (off_call, off_start), (on_call, on_start) = rows["off"], rows["on"]
    print("\nnative guard (SIMFS_NATIVE_GUARD=1), CPU µs of the test process")
    print(f"  a real stat/open+close from a process thread  off {off_call:7.1f}   "
          f"on {on_call:7.1f}   {on_call / off_call:5.1f}x (the supervisor's CPU not counted)")
    print(f"  start and finish a no-op process              off {off_start:7.1f}   "
          f"on {on_start:7.1f}   {on_start / off_start:5.1f}x (on: the thread baton)")


def main() -> None:
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # torch.distributed's deprecated names
    machine()
    guard_costs()
    spawn()
    memory()
    spawn_with_torch()
    routed_call()
    missing = fuse_missing()
    if missing is not None:
        print(f"\nFUSE: not measured here: {missing}")
        torch_rows(None)
        arrow_rows(None)
        return
    with fuse_mount() as mountpoint:
        fuse_costs(mountpoint)
        torch_rows(mountpoint)
        arrow_rows(mountpoint)
    in_process_server()


if __name__ == "__main__":
    main()
