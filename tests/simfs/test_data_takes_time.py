"""Data takes time to move (issue 27, item 4; docs/design.md, "Data takes time").

READ and WRITE carry file data in RPCs of at most rsize/wsize bytes
(``nfs_generic_pg_test``, fs/nfs/pagelist.c) over the host's link, so a call
that moves ``n`` bytes takes ``n * 8 / rate`` seconds more than one that
moves none.  The expected times here are worked out from the link's rate
alone, not read back from the code.
"""

from __future__ import annotations

import os
import time

import pytest

import simfs
from simfs import SimfsError, World

MiB = 1 << 20
TEN_GBIT = 10_000_000_000  # the documented default, bits per second


def _seconds(nbytes: int, bits_per_s: int) -> float:
    return nbytes * 8 / bits_per_s


def write_file(path: str, size: int) -> float:
    """Write ``size`` bytes and close; the virtual seconds it took."""
    start = time.monotonic()
    with open(path, "wb") as handle:
        handle.write(b"d" * size)
    return time.monotonic() - start


def read_file(path: str) -> tuple[int, float]:
    start = time.monotonic()
    with open(path, "rb") as handle:
        size = len(handle.read())
    return size, time.monotonic() - start


def publish(path: str, size: int) -> None:
    """Write a temp, then rename it into place: the usual publish."""
    with open(path + ".tmp", "wb") as handle:
        handle.write(b"p" * size)
    os.rename(path + ".tmp", path)


def _write_time(size: int, **world: object) -> tuple[float, World]:
    w = World(seed=1, **world)  # type: ignore[arg-type]
    process = w.spawn(w.host("a"), write_file, "/shared/f", size)
    w.run()
    return process.result(), w


def test_a_32_mib_write_takes_its_bytes_over_the_default_10_gbit_link_and_4_kib_almost_none():
    big, _ = _write_time(32 * MiB)
    small, _ = _write_time(4096)
    assert big == pytest.approx(_seconds(32 * MiB, TEN_GBIT), abs=1e-6)
    assert small == pytest.approx(_seconds(4096, TEN_GBIT), abs=1e-8)
    assert big > 1000 * small


def test_rpc_latency_is_charged_per_rpc_on_top_of_the_bytes():
    plain, w = _write_time(32 * MiB)
    slow, _ = _write_time(32 * MiB, rpc_latency=0.001)
    rpcs = sum(len(event.rpcs) for event in w.trace.select(process="write_file"))
    assert slow - plain == pytest.approx(rpcs * 0.001, abs=1e-6)


def test_a_32_mib_write_goes_in_wsize_writes_and_a_32_mib_read_in_rsize_reads():
    w = World(seed=1)
    a, b = w.host("a"), w.host("b")
    w.spawn(a, write_file, "/shared/f", 32 * MiB)
    w.run()
    reader = w.spawn(b, read_file, "/shared/f")
    w.run()
    assert reader.result()[0] == 32 * MiB
    # 1 MiB each: the default rsize and wsize against knfsd (nfs(5)).
    assert a.rpc_counts()["WRITE"] == 32
    assert b.rpc_counts()["READ"] == 32


def test_a_read_of_a_file_another_host_wrote_takes_its_bytes_over_the_readers_link():
    w = World(seed=1)
    a, b = w.host("a"), w.host("b", link="1Gbit/s")
    w.spawn(a, write_file, "/shared/f", 8 * MiB)
    w.run()
    reader = w.spawn(b, read_file, "/shared/f")
    w.run()
    size, took = reader.result()
    assert size == 8 * MiB
    assert took == pytest.approx(_seconds(8 * MiB, 1_000_000_000), abs=1e-6)


def test_a_host_with_its_own_link_moves_data_at_its_rate_not_the_worlds():
    w = World(seed=1, link="25Gbit/s")
    fast = w.spawn(w.host("fast"), write_file, "/shared/f1", 16 * MiB)
    slow = w.spawn(w.host("slow", link="100Mbps"), write_file, "/shared/f2", 16 * MiB)
    w.run()
    assert fast.result() == pytest.approx(_seconds(16 * MiB, 25_000_000_000), abs=1e-6)
    assert slow.result() == pytest.approx(_seconds(16 * MiB, 100_000_000), abs=1e-6)


@pytest.mark.parametrize("text, bits_per_s", [
    ("10Gbit/s", 10**10), ("25 Gbit/s", 25 * 10**9), ("100Mbps", 10**8),
    ("1.25GB/s", 10**10), ("100MiB/s", 8 * 100 * MiB), ("1Tb/s", 10**12),
])
def test_a_link_rate_is_read_with_its_unit_bits_or_bytes(text, bits_per_s):
    took, _ = _write_time(MiB, link=text)
    assert took == pytest.approx(_seconds(MiB, bits_per_s), abs=1e-8)


def test_without_a_link_data_moves_in_no_time_as_before():
    took, w = _write_time(32 * MiB, link=None)
    assert took == 0.0 and w.now == 0.0


def test_the_window_between_a_writers_publish_and_its_start_follows_from_the_size():
    # A reader polling for the published name sees it once the data is over
    # the link: the rename comes after the close's WRITEs.
    def renamed_at(size: int) -> float:
        w = World(seed=2)
        w.spawn(w.host("a"), publish, "/shared/model", size)
        w.run()
        (event,) = w.trace.select(op="rename")
        return event.time

    assert renamed_at(256 * MiB) - renamed_at(4096) == pytest.approx(
        _seconds(256 * MiB - 4096, TEN_GBIT), abs=1e-6)


def write_and_keep_open(path: str, size: int, hold: float) -> None:
    handle = open(path, "wb")  # held open past the writeback on purpose
    handle.write(b"w" * size)
    handle.flush()
    time.sleep(hold)
    handle.close()


def first_seen_whole(path: str, size: int, step: float) -> float:
    """Stat ``path`` every ``step`` s until it has ``size`` bytes; the time."""
    while True:
        try:
            if os.stat(path).st_size == size:
                return time.monotonic()
        except FileNotFoundError:
            pass
        time.sleep(step)


def test_a_background_writeback_reaches_the_server_when_its_writes_would_have_arrived():
    def seen(link: str | None) -> float:
        w = World(seed=4, link=link)
        w.spawn(w.host("a"), write_and_keep_open, "/shared/f", 64 * MiB, 60.0)
        watcher = w.spawn(w.host("b", mount="vers=3,noac"), first_seen_whole, "/shared/f",
                          64 * MiB, 0.001)
        w.run()
        return watcher.result()

    # The delay before the writeback starts is the same seeded draw either way.
    assert seen("1Gbit/s") - seen(None) == pytest.approx(
        _seconds(64 * MiB, 1_000_000_000), abs=0.0021)


@pytest.mark.parametrize("bad, error, words", [
    ("10", ValueError, "'10' is not a link rate"),
    ("10 Gbit", ValueError, "'10 Gbit' is not a link rate"),
    ("fast", ValueError, "'fast' is not a link rate"),
    ("0.5Mbit/s", ValueError, "outside the range"),
    ("20Tbit/s", ValueError, "outside the range"),
    (10e9, TypeError, "10000000000.0 is not a link rate"),
])
def test_a_bad_link_is_refused_naming_the_value_and_what_is_allowed(bad, error, words):
    with pytest.raises(error, match="World\\(link=\\)") as caught:
        World(link=bad)
    assert words in str(caught.value) and "from 1 Mbit/s to 10 Tbit/s" in str(caught.value)
    w = World()
    with pytest.raises(error, match="host 'b': link=") as on_host:
        w.host("b", link=bad)
    assert words in str(on_host.value)
    assert "b" not in w.hosts


def test_the_same_seed_gives_the_same_trace_with_data_on_the_link():
    def digest() -> str:
        w = World(seed=9, link="1Gbit/s")
        for index, name in enumerate(("a", "b", "c")):
            w.spawn(w.host(name), publish, f"/shared/m{index}", (index + 1) * 3 * MiB)
            w.spawn(name, read_file if index else write_file, "/shared/m0",
                    *(() if index else (MiB,)))
        w.run(check=False)
        return w.trace.digest()

    assert digest() == digest()


def test_a_replay_token_keeps_the_world_and_each_hosts_link():
    from simfs._replay import world_from_token, world_token

    w = World(seed=1, link="25Gbit/s")
    w.host("a")
    w.host("b", link="1Gbit/s")
    rebuilt = world_from_token(world_token(w))
    assert rebuilt.hosts["a"].client.link_bps == 25 * 10**9
    assert rebuilt.hosts["b"].client.link_bps == 10**9


# -- simfs.compute -------------------------------------------------------------------


def crunch(seconds: float) -> tuple[float, float]:
    start = time.monotonic()
    simfs.compute(seconds)
    return start, time.monotonic()


def test_compute_advances_the_calling_process_by_its_seconds_and_is_traced():
    w = World(seed=1)
    process = w.spawn(w.host("a"), crunch, 2.5)
    w.run()
    start, end = process.result()
    assert end - start == 2.5
    (event,) = w.trace.select(op="compute")
    assert (event.process, event.outcome) == ("crunch", "2.5s")


def test_other_processes_run_while_one_computes():
    w = World(seed=1)
    w.spawn(w.host("a"), crunch, 10.0)
    writer = w.spawn(w.host("b"), write_file, "/shared/f", 4096)
    w.run()
    (event,) = w.trace.select(process="write_file", op="close")
    assert event.time < 1.0 and writer.result() < 1.0


def test_compute_outside_a_simulated_process_is_refused():
    with pytest.raises(SimfsError, match=r"simfs.compute\(1\) was called outside a simulated"):
        simfs.compute(1)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (float("inf"), ValueError),
                                        (float("nan"), ValueError), ("1", TypeError),
                                        (True, TypeError)])
def test_compute_refuses_a_duration_that_is_not_one(bad, error):
    w = World(seed=1)
    process = w.spawn(w.host("a"), crunch, bad)
    w.run(check=False)
    assert isinstance(process.exception(), error)
    assert "simfs.compute(seconds)" in str(process.exception())
