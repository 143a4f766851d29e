"""What a program learns about its machine comes from the world (issue 10, items 4 and 6).

Each test first moves the real state a leak would show (the C task-name
counter, libuuid's clock, the time zone, CPU time burnt by this process),
then checks that the simulated program still sees the world's answer, the
same for the same seed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import io
import logging
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from simfs import SimulationEscape, World

# RFC 4122 §4.1.4: 100-ns intervals from 1582-10-15 to the Unix epoch.
UUID_EPOCH_OFFSET = 0x01B21DD213814000


def _run(program: Callable[[], object], seed: int = 1, hosts: tuple[str, ...] = ("a",)
         ) -> tuple[World, list[object]]:
    world = World(seed=seed)
    processes = [world.spawn(world.host(name), program) for name in hosts]
    world.run()
    return world, [process.result() for process in processes]


def test_uuid1_packs_the_world_clock_and_a_node_of_the_host_not_of_the_machine():
    uuid.uuid1()  # moves the real generator's clock state

    def program() -> list[uuid.UUID]:
        time.sleep(2.5)
        return [uuid.uuid1(), uuid.uuid1(), uuid.UUID(int=uuid.getnode())]

    world, ((a1, a2, a_node), (b1, _, b_node)) = _run(program, hosts=("a", "b"))
    assert (a1.time - UUID_EPOCH_OFFSET) * 100 == world.epoch_ns + 2_500_000_000
    # Two at the same virtual instant still differ, by one tick (RFC 4122 §4.2.1).
    assert a2.time == a1.time + 1
    assert a1.node == a_node.int and b1.node == b_node.int and a1.node != b1.node
    assert a1.node & (1 << 40)  # the multicast bit: not a real card's address (§4.5)
    _, again = _run(program, hosts=("a", "b"))
    assert again[0][:2] == [a1, a2]


def test_getppid_is_init_as_the_simulated_proc_files_say():
    def program() -> tuple[int, str]:
        with open("/proc/self/status") as status:
            ppid = next(line for line in status if line.startswith("PPid:"))
        return os.getppid(), ppid.split()[1]

    _, [(ppid, in_proc)] = _run(program)
    assert (ppid, in_proc) == (1, "1")


def test_asyncio_task_names_start_at_one_in_every_world_whatever_ran_before():
    async def real_tasks() -> None:
        await asyncio.gather(*(asyncio.sleep(0) for _ in range(5)))

    asyncio.run(real_tasks())  # moves the interpreter's C counter by 6

    async def main() -> list[str]:
        child = asyncio.create_task(asyncio.sleep(0))
        named = asyncio.create_task(asyncio.sleep(0), name="mine")
        await asyncio.gather(child, named)
        current = asyncio.current_task()
        assert current is not None
        return [current.get_name(), child.get_name(), named.get_name()]

    _, [names] = _run(lambda: asyncio.run(main()))
    assert names == ["Task-1", "Task-2", "mine"]


def test_a_simulated_process_has_used_no_cpu_time_however_long_it_computes():
    sum(range(200_000))  # CPU time of the test process itself

    def program() -> list[object]:
        sum(range(200_000))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return [time.process_time(), time.process_time_ns(), time.thread_time(),
                os.times()[:4], usage.ru_utime, usage.ru_stime, usage.ru_maxrss,
                time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID), os.getloadavg()]

    _, [seen] = _run(program)
    assert seen == [0.0, 0, 0.0, (0.0, 0.0, 0.0, 0.0), 0.0, 0.0, 0, 0.0, (0.0, 0.0, 0.0)]


def test_clock_gettime_reads_the_world_clocks_and_refuses_an_unknown_clock():
    def program() -> list[float]:
        time.sleep(3)
        return [time.clock_gettime(time.CLOCK_MONOTONIC), os.times().elapsed,
                time.clock_gettime_ns(time.CLOCK_REALTIME) / 1e9 - time.time()]

    _, [seen] = _run(program)
    assert seen == [3.0, 3.0, 0.0]

    world = World(seed=1)
    world.spawn(world.host("a"), time.clock_gettime, 12345)
    with pytest.raises(SimulationEscape, match=r"clock_gettime\(12345\)"):
        world.run()


@pytest.fixture
def tokyo_time() -> Iterator[None]:
    """The real process's local time zone is UTC+9 for the test."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "JST-9"
    time.tzset()
    yield
    if saved is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = saved
    time.tzset()


@pytest.mark.usefixtures("tokyo_time")
def test_local_time_in_the_world_is_utc_whatever_the_machine_zone_and_comes_back_after():
    def program() -> list[object]:
        now = time.time()
        return [time.strftime("%Y-%m-%d %H:%M %Z"), time.localtime().tm_hour, time.timezone,
                datetime.datetime.now().astimezone().isoformat(),
                datetime.datetime.fromtimestamp(now).hour, time.mktime(time.localtime(now)) - now,
                time.ctime()]

    _, [seen] = _run(program)
    assert seen == ["2026-01-01 00:00 UTC", 0, 0, "2026-01-01T00:00:00+00:00", 0, 0.0,
                    "Thu Jan  1 00:00:00 2026"]
    assert time.timezone == -9 * 3600 and time.tzname[0] == "JST"


def test_default_thread_pool_size_is_the_simulated_host_cpus_not_the_machine():
    def program() -> tuple[int | None, int, set[int]]:
        with concurrent.futures.ThreadPoolExecutor() as pool:
            workers: int = pool._max_workers  # type: ignore[attr-defined]
        return os.cpu_count(), workers, os.sched_getaffinity(0)

    _, [seen] = _run(program)
    assert seen == (4, 8, {0, 1, 2, 3})  # ThreadPoolExecutor: min(32, cpu_count + 4)


def test_log_records_carry_the_world_time_in_asctime_and_relative_created():
    def program() -> str:
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(relativeCreated)d %(message)s"))
        logger = logging.getLogger("simfs-test-world-log")
        logger.addHandler(handler)
        try:
            time.sleep(2)
            logger.warning("hi")
        finally:
            logger.removeHandler(handler)
        return stream.getvalue()

    _, [logged] = _run(program)
    assert logged == "2026-01-01 00:00:02,000 2000 hi\n"


def test_formatter_converter_still_takes_one_argument_outside_the_world():
    _run(lambda: None)  # routes installed, class attributes rebound
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.created = 0.0
    year = logging.Formatter("%(asctime)s", datefmt="%Y").format(record)
    assert year in ("1969", "1970")  # the real local time of the epoch, in any zone


_IDS_IN_A_WORLD = """
import os, platform
from simfs import World
from simfs._patch import install

install()  # every route imported while the interpreter's files are readable
if os.getuid() == 0:  # as root, become nobody: a leak of the real ids shows as 65534
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)

def ids():
    open("/shared/f", "w").close()
    st = os.stat("/shared/f")
    return [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups(),
            st.st_uid, st.st_gid, platform.node()]

platform.uname()  # the real uname, cached before any world
world = World(seed=0)
process = world.spawn(world.host("a"), ids)
world.run()
print(process.result())
"""


def test_user_ids_are_the_simulated_files_owner_whatever_user_runs_the_test():
    done = subprocess.run([sys.executable, "-c", _IDS_IN_A_WORLD], capture_output=True,
                          text=True, timeout=300, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([0, 0, 0, 0, [0], 0, 0, "a"])
