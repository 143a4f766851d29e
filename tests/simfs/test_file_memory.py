"""A file's bytes cost their size once, and a hole costs nothing.

The server keeps a file as immutable 4 KiB blocks; a host's page cache
shares them (a page read, or written back whole) and copies a page only
when the host writes into it (``_pagecache.Page``).  Memory is counted with
tracemalloc, which counts every allocation Python makes, exactly, whatever
the machine: these are counts of bytes, not timings.
"""

import os
import tracemalloc

from simfs import posix

from .helpers import SPARSE_SIZE, run_alone, two_hosts, write_sparse_then_read_holes

MIB = 1 << 20


def _write_file(path, mib):
    block = bytes(range(256)) * (MIB // 256)
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for _ in range(mib):
        posix.write(fd, block)
    posix.close(fd)


def _read_file(path):
    fd = posix.open(path, os.O_RDONLY)
    total = 0
    while chunk := posix.read(fd, MIB):
        total += len(chunk)
    posix.close(fd)
    return total


def test_a_file_written_on_one_host_and_read_on_another_holds_its_bytes_about_once():
    mib = 16
    world, a, b = two_hosts()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run_alone(world, a, _write_file, "/shared/big", mib)
        assert run_alone(world, b, _read_file, "/shared/big") == mib * MIB
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Server, writer's cache and reader's cache would be three copies; the
    # writer's 1 MiB buffer and a reader's 1 MiB chunk come and go.
    assert held - before < 1.25 * mib * MIB
    assert peak - before < 1.5 * mib * MIB
    assert world.server.read_bytes("/shared/big") == bytes(range(256)) * (mib * MIB // 256)


def test_a_sparse_file_of_64_gib_costs_nothing_and_reads_as_zeros():
    world, a, _ = two_hosts()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        middle, around, st = run_alone(world, a, write_sparse_then_read_holes)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert middle == bytes(MIB)
    assert around == b"\0x\0"
    assert (st.st_size, st.st_blocks) == (SPARSE_SIZE, 8)  # one 4 KiB block allocated
    assert held < 4 * MIB  # the 1 MiB read is gone; 256 cached pages share one zero block


def test_a_page_written_on_one_host_changes_neither_the_server_nor_another_hosts_copy():
    def write_first(path):
        fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        posix.write(fd, b"a" * 8192)
        posix.close(fd)

    def read_then_overwrite(path):
        fd = posix.open(path, os.O_RDWR)
        seen = posix.read(fd, 8192)  # pages shared with the server's blocks
        os.pwrite(fd, b"B" * 10, 5)  # written; writeback comes 0.6 s or more later
        posix.sleep(0.3)
        mine = os.pread(fd, 20, 0)
        posix.sleep(10.0)
        return seen, mine

    def read_again(path):
        posix.sleep(0.2)
        fd = posix.open(path, os.O_RDONLY)
        data = posix.read(fd, 8192)
        posix.close(fd)
        return data

    world, a, b = two_hosts()
    run_alone(world, a, write_first, "/shared/f")
    writer = world.spawn(a, read_then_overwrite, "/shared/f")
    reader = world.spawn(b, read_again, "/shared/f")
    world.run(until=0.5)
    assert reader.result() == b"a" * 8192
    assert world.server.read_bytes("/shared/f") == b"a" * 8192
    world.run()
    assert writer.result() == (b"a" * 8192, b"aaaaa" + b"B" * 10 + b"aaaaa")
    assert world.server.read_bytes("/shared/f") == b"aaaaa" + b"B" * 10 + b"a" * 8177


def test_a_file_cut_short_then_extended_reads_zeros_where_its_tail_was():
    def cut_and_extend(path):
        fd = posix.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        posix.write(fd, b"abcdef" * 1000)
        posix.fsync(fd)
        os.ftruncate(fd, 2)
        os.ftruncate(fd, 6000)
        posix.close(fd)

    world, a, b = two_hosts()
    run_alone(world, a, cut_and_extend, "/shared/f")
    assert world.server.read_bytes("/shared/f") == b"ab" + bytes(5998)
    assert run_alone(world, b, lambda: os.pread(posix.open("/shared/f", os.O_RDONLY),
                                                   10, 0)) == b"ab" + bytes(8)
