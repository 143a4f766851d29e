"""h5py, torch.from_file, pandas' parquet, torch.distributed.checkpoint, datasets and zarr
on two hosts.

Routes: simfs/_patch/_libraries/_native_ml.py (h5py.File, torch.from_file)
and _native_arrow.py (``pyarrow.OSFile``, which pandas' ``to_parquet`` opens
its target with; ``pyarrow.memory_map``, which ``datasets.load_from_disk``
maps).  Without them each of the first four tests wrote the real directory at
the export's path or read the real machine's ENOENT.  The checkpoint, zarr
and datasets tests pin what already goes through Python I/O (and what a
program needs to do for it).
"""

from __future__ import annotations

import time

import pytest

from simfs import SimulationEscape

from .conftest import real_listing, two_hosts

pytestmark = pytest.mark.native


def test_an_hdf5_file_written_on_one_host_is_read_and_appended_to_on_the_other(export):
    import h5py
    import numpy as np

    path = f"{export}/x/t.h5"
    w, a, b = two_hosts(export)

    def write() -> None:
        with h5py.File(path, "w") as file:
            file.create_dataset("d", data=np.arange(10))

    def read():
        time.sleep(1)
        with h5py.File(path, "r") as file:
            first = file["d"][:].tolist()
        with h5py.File(path, "a") as file:
            file["e"] = np.ones(2)
        with h5py.File(path) as file:
            return first, sorted(file.keys())

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == (list(range(10)), ["d", "e"])
    assert w.server.read_bytes(path)[:8] == b"\x89HDF\r\n\x1a\n"
    assert real_listing(export) == ["x"]


def test_torch_from_file_and_storage_from_file_read_what_the_other_host_wrote(export):
    import numpy as np
    import torch

    path = f"{export}/x/raw.bin"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: np.arange(8, dtype=np.float32).tofile(path))

    def read():
        time.sleep(1)
        tensor = torch.from_file(path, size=8, dtype=torch.float32)
        storage = torch.UntypedStorage.from_file(path, False, 32)
        return tensor.tolist(), torch.tensor(storage, dtype=torch.float32).tolist()

    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == ([float(i) for i in range(8)], [float(i) for i in range(8)])
    assert real_listing(export) == ["x"]


def test_h5py_with_one_of_hdf5s_own_drivers_is_refused_naming_the_driver_and_path(export):
    import h5py

    path = f"{export}/x/t.h5"
    w, _, b = two_hosts(export)
    w.spawn(b, lambda: h5py.File(path, "w", driver="sec2"), name="writer")
    with pytest.raises(SimulationEscape) as raised:
        w.run()
    message = str(raised.value)
    assert "writer" in message and "'b'" in message and path in message and "sec2" in message
    assert real_listing(export) == ["x"]


def test_torch_from_file_shared_is_refused_naming_the_process_host_and_path(export):
    import torch

    path = f"{export}/x/raw.bin"
    w, _, b = two_hosts(export)
    w.server.write_bytes(path, bytes(32))
    w.spawn(b, lambda: torch.from_file(path, shared=True, size=8), name="mapper")
    with pytest.raises(SimulationEscape) as raised:
        w.run()
    message = str(raised.value)
    assert "mapper" in message and "'b'" in message and path in message and "shared" in message


def test_pandas_to_parquet_on_one_host_is_read_by_read_parquet_on_the_other(export):
    import pandas as pd

    path = f"{export}/x/t.parquet"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: pd.DataFrame({"n": range(5), "s": list("abcde")}).to_parquet(path))

    def read():
        time.sleep(1)
        frame = pd.read_parquet(path)
        return frame["n"].tolist(), frame["s"].tolist()

    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == ([0, 1, 2, 3, 4], ["a", "b", "c", "d", "e"])
    assert w.server.read_bytes(path)[:4] == b"PAR1"
    assert real_listing(export) == ["x"]


def test_a_distributed_checkpoint_saved_on_one_host_is_loaded_on_the_other(export):
    import torch
    import torch.distributed.checkpoint as dcp

    path = f"{export}/x/ckpt"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: dcp.save({"w": torch.arange(6)},
                                storage_writer=dcp.FileSystemWriter(path)))

    def read():
        time.sleep(10)
        state = {"w": torch.zeros(6, dtype=torch.int64)}
        dcp.load(state, storage_reader=dcp.FileSystemReader(path))
        return state["w"].tolist()

    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == [0, 1, 2, 3, 4, 5]
    assert ".metadata" in w.server.listdir(path)
    assert real_listing(export) == ["x"]


def test_a_zarr_array_written_on_one_host_is_read_on_the_other_while_the_writer_lives(export):
    # zarr runs its store I/O on an event-loop thread it starts on first use:
    # inside a process a simulated thread, so a LocalStore goes through the
    # simulation.
    import numpy as np
    import zarr

    path = f"{export}/x/z.zarr"
    w, a, b = two_hosts(export)

    def write() -> None:
        array = zarr.open_array(path, mode="w", shape=(4,), dtype="i4")
        array[:] = np.arange(4)
        time.sleep(1000)

    def read():
        time.sleep(100)
        return zarr.open_array(path, mode="r")[:].tolist()

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == [0, 1, 2, 3]
    assert "zarr.json" in w.server.listdir(path)
    assert real_listing(export) == ["x"]


def test_zarr_shared_by_processes_gives_each_its_own_loop_on_its_own_host(export):
    # zarr imported by the test is one module for every process (numcodecs,
    # an extension package, imports it).  Its loop thread, kept in module
    # globals, was the first process's: host b's writes ran through host a's
    # client, and once a's process ended the next caller waited on a dead
    # loop (a Deadlock).  Each process now has its own values of those
    # globals, as a real process has (zarr's own suite: 73 of 100 -> 100).
    import numpy as np
    import zarr

    w, a, b = two_hosts(export)

    def write(name: str, values: list[int]) -> None:
        array = zarr.open_array(f"{export}/x/{name}", mode="w", shape=(4,), dtype="i4")
        array[:] = np.array(values)

    def read_later(name: str) -> list[int]:
        time.sleep(100)  # the writers have ended
        return zarr.open_array(f"{export}/x/{name}", mode="r")[:].tolist()

    w.spawn(a, lambda: write("a.zarr", [1, 2, 3, 4]))
    w.spawn(b, lambda: write("b.zarr", [5, 6, 7, 8]))
    reader = w.spawn(a, lambda: read_later("b.zarr"))
    w.run()
    assert reader.result() == [5, 6, 7, 8]
    for name, host in (("a.zarr", "a"), ("b.zarr", "b")):
        hosts = {event.host for event in w.trace.select(op="rename") if name in event.path}
        assert hosts == {host}, (name, hosts)
    assert real_listing(export) == ["x"]


def test_a_hugging_face_dataset_saved_on_one_host_is_loaded_on_the_other(export):
    # Two things a program needs today, neither about native I/O: ``datasets``
    # and its pure-Python dependencies dill and multiprocess are shared by the
    # processes (each process's own copy runs dill's module body, which opens
    # /dev/null, refused inside a host); progress bars are off (tqdm asks the
    # test process's real stderr for its terminal size) and tqdm's
    # multiprocessing lock is made outside the world (a process may not make one).
    import datasets
    import tqdm

    from simfs import World

    datasets.disable_progress_bars()
    tqdm.tqdm.get_lock()
    path = f"{export}/x/hf"
    w = World(seed=0, export=str(export), shared_modules=["datasets", "dill", "multiprocess"])
    w.server.mkdir(f"{export}/x")
    a, b = w.host("a"), w.host("b")
    w.spawn(a, lambda: datasets.Dataset.from_dict({"n": list(range(5))}).save_to_disk(path))

    def read():
        time.sleep(100)
        return list(datasets.load_from_disk(path)["n"])

    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == [0, 1, 2, 3, 4]
    assert "dataset_info.json" in w.server.listdir(path)
    assert real_listing(export) == ["x"]
