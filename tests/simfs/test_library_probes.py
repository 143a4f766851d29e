"""What libraries ask about the machine at import or first use, answered inside a process.

Each of these was refused as an escape inside a simulated process, so the
library failed before it touched the simulated export (issue 30, item 4):
pandas 3's ``read_csv`` reads the cgroup's CPU limit; dill (imported by
torch and datasets) opens ``os.devnull`` with ``os.open``; tqdm's first bar
makes a ``multiprocessing.RLock``; fsspec looks up Python's own C API in
``ctypes.pythonapi``; trio asks ``ctypes.util.find_library`` (``ldconfig``,
a subprocess) for libpthread and loads it.  The native tier imports the
libraries themselves (tests/native/test_imports_in_process.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os

import pytest

from simfs import SimulationEscape, World


def _run(program, *args):
    w = World(seed=1)
    p = w.spawn(w.host("a"), program, *args)
    w.run()
    return p.result()


def _cpu_limit():
    # pandas/compat/_cpu.py: "max" is no quota; then the affinity mask decides.
    with open("/sys/fs/cgroup/cpu.max", encoding="utf-8") as f:
        text = f.read()
    return text, os.path.isdir("/sys/fs/cgroup"), len(os.sched_getaffinity(0))


def test_a_host_answers_its_cgroup_cpu_limit_as_no_quota():
    text, is_dir, cpus = _run(_cpu_limit)
    assert text == "max 100000\n" and is_dir
    assert cpus == _run(os.cpu_count)


def test_other_sys_paths_stay_refused_naming_the_path():
    w = World()
    w.spawn(w.host("a"), lambda: open("/sys/class/net/eth0/address").read())
    with pytest.raises(SimulationEscape, match=r"open\('/sys/class/net/eth0/address'\)"):
        w.run()


def _null_through_os_open():
    # dill's get_file_type opens os.devnull through _pyio.open, which calls os.open.
    import _pyio

    written = os.open(os.devnull, os.O_WRONLY)
    try:
        count = os.write(written, b"swallowed")
    finally:
        os.close(written)
    with _pyio.open(os.devnull, "r+b", buffering=-1) as f:
        kind = type(f).__name__
        read = f.read()
    return count, read, kind


def test_dev_null_opens_through_os_open_and_swallows_writes():
    assert _run(_null_through_os_open) == (9, b"", "BufferedRandom")


def test_dev_null_with_o_excl_exists():
    def exclusive():
        try:
            os.open(os.devnull, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError as error:
            return error.errno
        return None

    assert _run(exclusive) == 17


def _mp_lock_in_threads():
    # tqdm's TqdmDefaultWriteLock.create_mp_lock; used by the process's threads.
    import threading

    lock = multiprocessing.RLock()
    order = []

    def worker(tag):
        with lock:
            order.append(tag)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    with lock:
        for thread in threads:
            thread.start()
        order.append("main")
    for thread in threads:
        thread.join()
    return order[0], sorted(map(str, order)), type(multiprocessing.Lock()).__module__


def test_a_multiprocessing_lock_made_in_a_process_is_its_threads_lock():
    first, order, module = _run(_mp_lock_in_threads)
    assert first == "main" and order == ["0", "1", "2", "main"]
    assert module.startswith("simfs")


def test_a_multiprocessing_semaphore_stays_refused():
    w = World()
    w.spawn(w.host("a"), multiprocessing.Semaphore)
    with pytest.raises(SimulationEscape, match="multiprocessing"):
        w.run()


def _python_api_and_pthread():
    # fsspec/utils.py and trio/_core/_thread_cache.py at their import.
    ctypes.pythonapi.PyBytes_FromStringAndSize  # noqa: B018
    path = ctypes.util.find_library("pthread") or ctypes.util.find_library("c")
    library = ctypes.CDLL(path)
    return path is not None, hasattr(library, "pthread_setname_np")


def test_a_lookup_of_pythons_own_api_and_of_libpthread_is_allowed():
    assert _run(_python_api_and_pthread) == (True, True)


def test_resolving_any_other_foreign_function_is_refused_naming_it():
    w = World()
    w.spawn(w.host("a"), lambda: ctypes.CDLL(ctypes.util.find_library("c")).unlink)
    with pytest.raises(SimulationEscape, match=r"ctypes\.dlsym\(.*'unlink'\)"):
        w.run()


def test_loading_a_library_from_a_path_outside_the_installation_is_refused(tmp_path):
    w = World()
    w.spawn(w.host("a"), ctypes.CDLL, str(tmp_path / "libmine.so"))
    with pytest.raises(SimulationEscape, match=r"ctypes\.dlopen\("):
        w.run()
