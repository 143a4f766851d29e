"""torch.save and torch.load with a path reach the simulation (_libraries/_native_ml.py).

torch's C++ writer opens the path itself: without the routes,
``torch.save(sd, "/shared/x/model.pt")`` wrote the real directory of that
name (here ``export``, a real directory at the export's path) and the run
reported success, and ``torch.load(path, mmap=True)`` mapped the real file.
"""

from __future__ import annotations

import time

import pytest

from simfs import SimulationEscape

from .conftest import real_listing, two_hosts

pytestmark = pytest.mark.native


def _state_dict():
    import torch

    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
            "b": torch.ones(4, dtype=torch.int64)}


def _same(loaded, expected) -> bool:
    import torch

    return loaded.keys() == expected.keys() and all(
        torch.equal(loaded[k], expected[k]) for k in expected)


@pytest.mark.parametrize("mmap", [False, True])
def test_torch_save_to_a_path_on_one_host_is_loaded_on_the_other_after_close_to_open(
        export, mmap):
    import torch

    path = f"{export}/x/model.pt"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: torch.save(_state_dict(), path))
    read = w.spawn(b, lambda: (time.sleep(1), torch.load(path, mmap=mmap))[1])
    w.run()
    assert _same(read.result(), _state_dict())
    assert w.server.read_bytes(path)[:2] == b"PK"  # torch's zip format, on the server
    assert [e.host for e in w.trace.select(op="open", path=path)] == ["a", "b"]
    assert real_listing(export) == ["x"]


def test_torch_load_mmap_of_a_file_changed_after_it_was_loaded_keeps_the_data_it_mapped(export):
    # MAP_PRIVATE (torch's default): the loaded tensors are the file's bytes at
    # open; a later save by another host does not change them.
    import torch

    path = f"{export}/x/model.pt"
    w, a, b = two_hosts(export)

    def writer() -> None:
        torch.save(_state_dict(), path)
        time.sleep(2)
        torch.save({"w": torch.zeros(3, 4), "b": torch.zeros(4, dtype=torch.int64)}, path)

    def reader():
        time.sleep(1)
        loaded = torch.load(path, mmap=True)
        time.sleep(2)
        return loaded

    w.spawn(a, writer)
    read = w.spawn(b, reader)
    w.run()
    assert _same(read.result(), _state_dict())
    assert real_listing(export) == ["x"]


def test_torch_load_with_a_shared_mapping_is_refused_naming_the_process_and_host(export):
    import mmap

    import torch
    import torch.serialization

    path = f"{export}/x/model.pt"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: torch.save(_state_dict(), path))
    w.run()

    def load_shared():
        # torch's mmap options are per thread (a simulated process's own).
        torch.serialization.set_default_mmap_options(mmap.MAP_SHARED)
        return torch.load(path, mmap=True)

    w.spawn(b, load_shared, name="loader")
    with pytest.raises(SimulationEscape) as raised:
        w.run()
    message = str(raised.value)
    assert "loader" in message and "'b'" in message and "MAP_SHARED" in message
    assert real_listing(export) == ["x"]


def test_torch_save_into_a_directory_only_the_real_machine_has_fails_with_the_simulated_enoent(
        export):
    # ``x/only-real`` exists on the real disk, not in the simulation: the
    # simulation's answer (ENOENT) wins, and nothing is written for real.
    import torch

    (export / "x" / "only-real").mkdir()
    w, a, _ = two_hosts(export)
    p = w.spawn(a, lambda: torch.save(_state_dict(), f"{export}/x/only-real/model.pt"))
    w.run(check=False)
    with pytest.raises(FileNotFoundError):
        p.result()
    assert real_listing(export) == ["x", "x/only-real"]


def test_the_same_seed_gives_the_same_trace_with_torch_save_and_load(export):
    import torch

    path = f"{export}/x/model.pt"
    digests = []
    for _ in range(2):
        w, a, b = two_hosts(export, seed=3)
        w.spawn(a, lambda: torch.save(_state_dict(), path))
        w.spawn(b, lambda: (time.sleep(1), torch.load(path, mmap=True))[1])
        w.run()
        digests.append(w.trace.digest())
    assert digests[0] == digests[1]
