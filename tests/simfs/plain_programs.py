"""Plain programs written for a real filesystem: this module never imports simfs.

The names bound at import (``from time import sleep``, ``from os import
stat``, ``from shutil import rmtree``) are bound before any world installs
its routes, which is exactly the case the alias rebinding must handle.
"""

from __future__ import annotations

import concurrent.futures
import errno
import fcntl
import glob
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from os import stat
from pathlib import Path
from shutil import rmtree
from time import monotonic, sleep

import trio

# -- seed 000, as its authors wrote it ------------------------------------------

def create_marker(path: str, at: float) -> float:
    sleep(at)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.close(fd)
    return monotonic()


def poll_exists(path: str) -> float:
    """The seed's buggy wait: a bare Path.exists() every 0.1 s."""
    marker = Path(path)
    while not marker.exists():
        time.sleep(0.1)
    return time.monotonic()


def poll_revalidating(path: str) -> float:
    """The seed's fix: open the step dir and the broadcast dir before exists()."""
    marker = Path(path)
    while True:
        for directory in (marker.parent.parent, marker.parent):
            try:
                os.close(os.open(directory, os.O_RDONLY | os.O_DIRECTORY))
            except FileNotFoundError:
                pass
        if marker.exists():
            return time.monotonic()
        time.sleep(0.1)


# -- os and os.path --------------------------------------------------------------

def os_matrix(root: str) -> dict[str, object]:
    seen: dict[str, object] = {}
    os.makedirs(f"{root}/a/b", exist_ok=True)
    fd = os.open(f"{root}/a/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"hello")
    os.fsync(fd)
    seen["fstat_size"] = os.fstat(fd).st_size
    os.close(fd)
    try:
        os.open(f"{root}/a/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        seen["excl"] = "EEXIST"
    fd = os.open(f"{root}/a/f", os.O_RDWR | os.O_APPEND)
    os.write(fd, b" world")
    os.lseek(fd, 0, os.SEEK_SET)
    seen["read"] = os.read(fd, 100)
    os.close(fd)
    seen["stat_size"] = stat(f"{root}/a/f").st_size
    seen["lstat_is_file"] = os.path.isfile(f"{root}/a/f") and not os.path.islink(f"{root}/a/f")
    seen["exists"] = (os.path.exists(f"{root}/a"), os.path.exists(f"{root}/nope"))
    seen["isdir"] = os.path.isdir(f"{root}/a/b")
    seen["getsize"] = os.path.getsize(f"{root}/a/f")
    os.utime(f"{root}/a/f", (1000.0, 2000.0))
    seen["getmtime"] = os.path.getmtime(f"{root}/a/f")
    seen["listdir"] = sorted(os.listdir(f"{root}/a"))
    with os.scandir(f"{root}/a") as entries:
        seen["scandir"] = sorted((entry.name, entry.is_dir()) for entry in entries)
    seen["walk"] = [(d, sorted(ds), sorted(fs)) for d, ds, fs in os.walk(root)]
    os.link(f"{root}/a/f", f"{root}/a/g")
    seen["nlink"] = os.stat(f"{root}/a/g").st_nlink
    os.rename(f"{root}/a/g", f"{root}/a/h")
    os.unlink(f"{root}/a/h")
    with open(f"{root}/a/new", "w") as handle:
        handle.write("replacement")
    os.replace(f"{root}/a/new", f"{root}/a/f")
    with open(f"{root}/a/f") as handle:
        seen["replaced"] = handle.read()
    os.remove(f"{root}/a/f")
    os.rmdir(f"{root}/a/b")
    try:
        os.rmdir(f"{root}/nope")
    except FileNotFoundError as error:
        seen["rmdir_missing"] = errno.errorcode[error.errno]
    os.removedirs(f"{root}/a")
    seen["left"] = os.listdir(root)
    return seen


# -- pathlib and open -----------------------------------------------------------

def pathlib_matrix(root: str) -> dict[str, object]:
    base = Path(root) / "p"
    base.mkdir()
    (base / "sub").mkdir(parents=True, exist_ok=True)
    (base / "t.txt").write_text("héllo\n", encoding="utf-8")
    (base / "b.bin").write_bytes(b"\x00\x01")
    (base / "touched").touch()
    with (base / "t.txt").open("a", encoding="utf-8") as handle:
        handle.write("more\n")
    with open(base / "t.txt", encoding="utf-8") as handle:
        lines = handle.readlines()
    with open(base / "r.bin", "w+b") as handle:
        handle.write(b"abcdef")
        handle.seek(2)
        middle = handle.read(2)
    with open(base / "x", "x") as handle:
        handle.write("new")
    seen = {
        "exists": (base.exists(), (base / "zz").exists()),
        "is_dir": (base / "sub").is_dir(),
        "size": (base / "b.bin").stat().st_size,
        "text": (base / "t.txt").read_text(encoding="utf-8"),
        "lines": lines,
        "bytes": (base / "b.bin").read_bytes(),
        "middle": middle,
        "iterdir": sorted(p.name for p in base.iterdir()),
        "glob": sorted(p.name for p in base.glob("*.bin")),
        "stdlib_glob": sorted(os.path.basename(p) for p in glob.glob(f"{base}/*.txt")),
    }
    (base / "b.bin").rename(base / "c.bin")
    (base / "c.bin").replace(base / "t.txt")
    (base / "t.txt").unlink()
    (base / "sub").rmdir()
    seen["after"] = sorted(p.name for p in base.iterdir())
    return seen


# -- shutil and tempfile ----------------------------------------------------------

def shutil_matrix(root: str) -> dict[str, object]:
    src = Path(root) / "src"
    (src / "deep").mkdir(parents=True)
    (src / "deep" / "w.bin").write_bytes(b"weights" * 100)
    (src / "cfg.json").write_text("{}")
    shutil.copyfile(src / "cfg.json", Path(root) / "copyfile.json")
    shutil.copy(src / "cfg.json", Path(root) / "copy.json")
    shutil.copy2(src / "cfg.json", Path(root) / "copy2.json")
    shutil.copytree(src, Path(root) / "tree")
    shutil.move(str(Path(root) / "copy.json"), str(Path(root) / "moved.json"))
    seen: dict[str, object] = {
        "tree": sorted(str(p.relative_to(root)) for p in (Path(root) / "tree").rglob("*")),
        "copied": (Path(root) / "tree" / "deep" / "w.bin").read_bytes() == b"weights" * 100,
        "mtime_kept": os.stat(Path(root) / "copy2.json").st_mtime
        == os.stat(src / "cfg.json").st_mtime,
    }
    rmtree(src)
    shutil.rmtree(Path(root) / "tree")
    seen["left"] = sorted(os.listdir(root))
    return seen


def tempfile_matrix(root: str) -> dict[str, object]:
    fd, name = tempfile.mkstemp(dir=root, prefix="ck-")
    os.write(fd, b"x")
    os.close(fd)
    with tempfile.NamedTemporaryFile(dir=root, suffix=".tmp") as handle:
        handle.write(b"y")
        handle.flush()
        named = os.path.basename(handle.name)
        during = os.path.exists(handle.name)
    with tempfile.TemporaryDirectory(dir=root) as directory:
        Path(directory, "inside").write_text("z")
        made = os.path.isdir(directory)
    made_dir = tempfile.mkdtemp(dir=root)
    return {"mkstemp": os.path.basename(name), "named": named, "during": during,
            "tmpdir_removed": made and not os.path.exists(directory),
            "mkdtemp": os.path.isdir(made_dir), "left": sorted(os.listdir(root))}


# -- locks ----------------------------------------------------------------------

def hold_flock(path: str, seconds: float) -> list[tuple[str, float]]:
    events = []
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        events.append(("locked", time.monotonic()))
        time.sleep(seconds)
        fcntl.flock(handle, fcntl.LOCK_UN)
        events.append(("unlocked", time.monotonic()))
    return events


def wait_flock(path: str, after: float) -> dict[str, object]:
    time.sleep(after)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            nonblocking = "got it"
        except BlockingIOError:
            nonblocking = "EWOULDBLOCK"
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        got = time.monotonic()
    return {"nonblocking": nonblocking, "got": got}


def lockf_needs_a_writable_descriptor(path: str) -> str:
    Path(path).write_text("")
    with open(path) as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX)
        except OSError as error:
            return errno.errorcode[error.errno]
    return "locked"


def lockf_conflicts_with_flock(path: str) -> str:
    with open(path, "w") as first, open(path, "r+") as second:
        fcntl.lockf(first, fcntl.LOCK_EX)
        try:
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "conflict"
    return "no conflict"


# -- threads --------------------------------------------------------------------

def timed_waits() -> dict[str, float]:
    event = threading.Event()
    condition = threading.Condition()
    semaphore = threading.Semaphore(0)
    jobs: queue.Queue[int] = queue.Queue()
    seen = {}
    start = time.monotonic()
    seen["event_timeout"] = (event.wait(timeout=5.0), time.monotonic() - start)
    with condition:
        seen["condition_timeout"] = (condition.wait(timeout=2.0), time.monotonic() - start)
    seen["semaphore_timeout"] = (semaphore.acquire(timeout=1.5), time.monotonic() - start)
    try:
        jobs.get(timeout=0.5)
    except queue.Empty:
        seen["queue_timeout"] = (False, time.monotonic() - start)
    return seen


def producer_consumer() -> list[object]:
    results: list[object] = []
    lock = threading.RLock()
    ready = threading.Event()
    jobs: queue.Queue[int | None] = queue.Queue()
    simple: queue.SimpleQueue[str] = queue.SimpleQueue()

    def consumer() -> None:
        ready.wait()
        while (job := jobs.get()) is not None:
            with lock, lock:
                results.append((job, time.monotonic()))
        simple.put("done")

    thread = threading.Thread(target=consumer, name="consumer")
    thread.start()
    sleep(1.0)
    ready.set()
    for job in range(3):
        jobs.put(job)
        sleep(0.5)
    jobs.put(None)
    results.append(simple.get(timeout=10))
    thread.join()
    results.append(thread.is_alive())
    return results


def pool_writes_checkpoints(root: str, shards: int) -> dict[str, object]:
    os.makedirs(f"{root}/step_1", exist_ok=True)

    def save(shard: int) -> str:
        path = f"{root}/step_1/shard_{shard}.bin"
        with open(path, "wb") as handle:
            handle.write(bytes([shard]) * 1000)
            time.sleep(0.1 * (shard + 1))
            os.fsync(handle.fileno())
        return path

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        paths = list(pool.map(save, range(shards)))
    Path(f"{root}/step_1/.finished").touch()
    return {"paths": len(paths), "elapsed": time.monotonic()}


# -- trio -----------------------------------------------------------------------

async def async_publish(path: str, at: float) -> float:
    await trio.sleep(at)
    await trio.to_thread.run_sync(Path(path).write_text, "ready")
    return trio.current_time()


async def async_wait(path: str) -> tuple[float, list[int]]:
    order: list[int] = []

    async def worker(index: int) -> None:
        await trio.sleep(0.25)
        order.append(index)

    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(worker, index)
        while not await trio.to_thread.run_sync(poll_once, path):
            await trio.sleep(0.1)
    return trio.current_time(), order


def poll_once(path: str) -> bool:
    return Path(path).exists()


def sync_calls_trio_run(path: str) -> float:
    return trio.run(async_publish, path, 2.0)


# -- escapes --------------------------------------------------------------------

def read_outside_the_export() -> str:
    with open("/etc/hostname") as handle:
        return handle.read()


def run_a_subprocess() -> int:
    return subprocess.run(["true"], check=False).returncode


def open_a_socket() -> None:
    socket.create_connection(("example.com", 80), timeout=1)


def swallow_an_escape() -> str:
    try:
        os.rmdir("/etc")
    except Exception:
        return "swallowed"
    return "not reached"


def wait_on_a_real_lock(lock: threading.Lock) -> None:
    os.path.exists("/shared/x")
    lock.acquire()


# -- identity ---------------------------------------------------------------------

def who_am_i() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "pid": os.getpid(),
            "time": time.time(), "uuid_bytes": os.urandom(4).hex()}


def call_a_captured_original() -> None:
    """Reaches the real os through the posix module, which no route covers."""
    import posix

    posix.mkdir("/shared/made-for-real")


async def racing_tasks() -> list[int]:
    """Eight trio tasks woken at one instant: their order is trio's scheduling choice."""
    order: list[int] = []

    async def task(index: int) -> None:
        await trio.sleep(1.0)
        order.append(index)

    async with trio.open_nursery() as nursery:
        for index in range(8):
            nursery.start_soon(task, index)
    return order
