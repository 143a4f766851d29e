"""safetensors, blake3, numpy and mmap do their file I/O through the simulation.

Their native code opens files below Python; simfs routes those entry points
through the simulated file layer, so these libraries meet NFS semantics like
any Python code: data written on host A is read on host B once A has closed
the file and B opens it (close-to-open, docs/design.md, "The NFS model").
"""

from __future__ import annotations

import mmap
import os
import time

import blake3
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stnp

from .conftest import two_hosts

WEIGHTS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.int64)}


def _same(loaded: dict, expected: dict) -> bool:
    return loaded.keys() == expected.keys() and all(
        np.array_equal(loaded[k], expected[k]) and loaded[k].dtype == expected[k].dtype
        for k in expected)


def _run_pair(writer, reader, *args):
    w, a, b = two_hosts()
    wrote = w.spawn(a, writer, *args)
    read = w.spawn(b, lambda: (time.sleep(1), reader(*args))[1])
    w.run()
    return w, wrote.result(), read.result()


def test_safetensors_written_on_one_host_is_read_on_the_other_after_close_to_open(
        real_disk_untouched):
    def save(path: str) -> None:
        stnp.save_file(WEIGHTS, path, metadata={"step": "7"})

    def load(path: str) -> tuple[dict, list, dict, list]:
        with safetensors.safe_open(path, framework="np") as handle:
            keys, metadata = sorted(handle.keys()), handle.metadata()
            first_row = handle.get_slice("w")[0:1].tolist()
        return stnp.load_file(path), keys, metadata, first_row

    w, _, (loaded, keys, metadata, first_row) = _run_pair(save, load, "/shared/model.safetensors")
    assert _same(loaded, WEIGHTS)
    assert keys == ["b", "w"] and metadata == {"step": "7"} and first_row == [[0, 1, 2, 3]]
    assert stnp.load(w.server.read_bytes("/shared/model.safetensors"))["b"].tolist() == [1] * 4
    assert real_disk_untouched()


def test_safetensors_save_file_replaces_the_target_through_a_temporary_in_its_directory():
    # safetensors 0.8's writer: a .tmpXXXXXX file beside the target, then a
    # rename over it (measured: its error on a missing /shared named the temp).
    def save_twice(path: str) -> list[str]:
        stnp.save_file(WEIGHTS, path)
        stnp.save_file({"w": WEIGHTS["w"]}, path)
        return sorted(os.listdir(os.path.dirname(path)))

    w, a, _ = two_hosts()
    p = w.spawn(a, save_twice, "/shared/model.safetensors")
    w.run()
    assert p.result() == ["model.safetensors"]
    renames = w.trace.select(op="rename")
    assert len(renames) == 2 and all("/shared/.tmp" in e.path for e in renames)


def test_safetensors_on_a_missing_file_reports_the_simulated_enoent():
    w, a, _ = two_hosts()
    p = w.spawn(a, stnp.load_file, "/shared/absent.safetensors")
    w.run(check=False)
    with pytest.raises(FileNotFoundError):
        p.result()


def test_blake3_update_mmap_hashes_the_bytes_the_other_host_wrote(real_disk_untouched):
    data = bytes(range(256)) * 5000

    def write(path: str) -> None:
        with open(path, "wb") as handle:
            handle.write(data)

    def digest(path: str) -> str:
        return blake3.blake3().update_mmap(path).hexdigest()

    _, _, seen = _run_pair(write, digest, "/shared/blob")
    assert seen == blake3.blake3(data).hexdigest()
    assert real_disk_untouched()


def test_numpy_save_and_load_cross_hosts(real_disk_untouched):
    array = np.arange(1000, dtype=np.float64).reshape(10, 100)
    _, _, seen = _run_pair(lambda p: np.save(p, array), np.load, "/shared/a.npy")
    assert np.array_equal(seen, array)
    assert real_disk_untouched()


def test_numpy_tofile_and_fromfile_cross_hosts(real_disk_untouched):
    array = np.arange(64, dtype=np.int32)

    def read(path: str) -> tuple[np.ndarray, np.ndarray]:
        whole = np.fromfile(path, dtype=np.int32)
        tail = np.fromfile(path, dtype=np.int32, count=4, offset=60 * 4)
        return whole, tail

    _, _, (whole, tail) = _run_pair(lambda p: array.tofile(p), read, "/shared/a.bin")
    assert np.array_equal(whole, array) and tail.tolist() == [60, 61, 62, 63]
    assert real_disk_untouched()


def test_numpy_memmap_writes_reach_the_other_host_after_flush(real_disk_untouched):
    def write(path: str) -> None:
        mapped = np.memmap(path, dtype=np.float32, mode="w+", shape=(256,))
        mapped[:] = np.arange(256)
        mapped.flush()
        del mapped

    def read(path: str) -> tuple[list, bool]:
        mapped = np.memmap(path, dtype=np.float32, mode="r", shape=(256,))
        return mapped[250:].tolist(), mapped.flags.writeable

    _, _, (tail, writeable) = _run_pair(write, read, "/shared/m.f32")
    assert tail == [250.0, 251.0, 252.0, 253.0, 254.0, 255.0]
    assert writeable is False
    assert real_disk_untouched()


def test_a_shared_mmap_writes_back_only_the_pages_it_changed():
    # Two hosts writing different pages of one file: the server holds both
    # (docs/nfs-facts.md, "Writes and data visibility").  The kernel writes
    # back dirty pages only (mm/page-writeback.c), so A's mapping, made before
    # B wrote page 0, must write page 1 alone and never put its stale page 0
    # back.
    page = mmap.PAGESIZE

    def map_then_write_page_one(path: str) -> None:
        with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
            time.sleep(2)
            mapped[page:2 * page] = b"A" * page

    def write_page_zero(path: str) -> None:
        time.sleep(1)
        with open(path, "r+b") as handle:
            handle.write(b"B" * page)

    w, a, b = two_hosts()
    w.server.write_bytes("/shared/pages", bytes(2 * page))
    w.spawn(a, map_then_write_page_one, "/shared/pages")
    w.spawn(b, write_page_zero, "/shared/pages")
    w.run()
    writes = [e.outcome for e in w.trace.select(host="a") if e.op in ("write", "pwrite")]
    assert writes == [str(page)]
    assert w.server.read_bytes("/shared/pages")[page:] == b"A" * page


def test_an_mmap_write_is_seen_by_read_on_the_same_host_after_flush():
    def write_and_read(path: str) -> bytes:
        with open(path, "r+b") as handle:
            mapped = mmap.mmap(handle.fileno(), 0)
            mapped[:5] = b"hello"
            mapped.flush()
            seen = os.pread(handle.fileno(), 5, 0)
            mapped.close()
        return seen

    w, a, _ = two_hosts()
    w.server.write_bytes("/shared/f", bytes(100))
    p = w.spawn(a, write_and_read, "/shared/f")
    w.run()
    assert p.result() == b"hello"


def test_a_read_only_mmap_of_a_simulated_file_refuses_writes():
    def write_read_only(path: str) -> None:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            mapped[:1] = b"x"

    w, a, _ = two_hosts()
    w.server.write_bytes("/shared/f", b"data")
    p = w.spawn(a, write_read_only, "/shared/f")
    w.run(check=False)
    with pytest.raises(TypeError):
        p.result()
