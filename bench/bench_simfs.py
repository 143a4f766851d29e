"""What simulation costs, side by side in one run, as ratios (not assertions).

    python bench/bench_simfs.py [--quick]

Each row is µs per operation for: the simulation (through simfs.posix, the
syscall layer, and through plain os/pathlib/open/time routed into it),
bare pyfakefs, and the real call on tmpfs (/dev/shm).  Simulated costs are
measured from outside the world (inside it, time.perf_counter is virtual),
as the wall time of a run doing N operations.
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable

from simfs import World, posix

N = 4_000 if "--quick" in sys.argv else 20_000
PATH = "/shared/f"


def _in_world(body: Callable[[], None], processes: int = 1,
              chooser: list[int] | None = None) -> float:
    world = World(chooser=chooser)
    world.server.write_bytes(PATH, b"x")
    host = world.host("a")
    for _ in range(processes):
        world.spawn(host, body)
    start = time.perf_counter()
    world.run()
    return (time.perf_counter() - start) / N * 1e6


def _real(body: Callable[[str], None]) -> float:
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(dir=directory) as handle:
        start = time.perf_counter()
        body(handle.name)
        return (time.perf_counter() - start) / N * 1e6


def _pyfakefs(body: Callable[[str], None]) -> float:
    from pyfakefs.fake_filesystem_unittest import Patcher

    with Patcher() as patcher:
        patcher.fs.create_file(PATH)
        start = time.perf_counter()
        body(PATH)
        return (time.perf_counter() - start) / N * 1e6


def _loop(operation: Callable[[str], object]) -> Callable[[str], None]:
    def body(path: str) -> None:
        for _ in range(N):
            operation(path)
    return body


def _stat(path: str) -> object:
    return os.stat(path)  # looked up per call: pyfakefs swaps this module's os


def _open_close(path: str) -> None:
    open(path, "rb").close()  # io.open, so pyfakefs can swap this module's io


def _exists(path: str) -> bool:
    return pathlib.Path(path).exists()


def main() -> None:
    # pyfakefs first: once a World has run, simfs's routes own builtins.open,
    # and a Patcher built after that no longer sees the calls it must fake.
    operations: list[tuple[str, Callable[[str], object]]] = [
        ("os.stat", _stat), ("Path.exists", _exists), ("open().close()", _open_close)]
    fake_costs = {name: _pyfakefs(_loop(operation)) for name, operation in operations}
    real_costs = {name: _real(_loop(operation)) for name, operation in operations}
    real_sleep = _real(_loop(lambda p: time.sleep(0)))

    _in_world(lambda: None)  # warm up: the first run installs the routes
    switch_rounds = N // 2

    def ping() -> None:
        for _ in range(switch_rounds):
            posix.sleep(0)

    rows: list[tuple[str, float, float | None, float | None]] = [
        ("stat via simfs.posix (syscall layer)", _in_world(lambda: _loop(posix.stat)(PATH)),
         None, None),
        ("scheduler switch (2 processes)", _in_world(ping, processes=2, chooser=[0] * (N + 8)),
         None, None),
    ]
    for name, operation in operations:
        rows.append((name, _in_world(lambda operation=operation: _loop(operation)(PATH)),
                     fake_costs[name], real_costs[name]))
    rows.append(("time.sleep(0) yield", _in_world(lambda: _loop(lambda p: time.sleep(0))(PATH)),
                 None, real_sleep))
    print(f"{'operation':38} {'simfs µs':>9} {'pyfakefs':>9} {'real':>8} {'sim/fake':>9} "
          f"{'sim/real':>9}")
    for name, simulated, fake, real in rows:
        fake_text = f"{fake:9.2f}" if fake is not None else f"{'-':>9}"
        real_text = f"{real:8.2f}" if real is not None else f"{'-':>8}"
        over_fake = f"{simulated / fake:9.2f}" if fake else f"{'-':>9}"
        over_real = f"{simulated / real:9.1f}" if real else f"{'-':>9}"
        print(f"{name:38} {simulated:9.2f} {fake_text} {real_text} {over_fake} {over_real}")
    bare_stat = rows[2][2]
    assert bare_stat is not None
    print(f"\ngoal (issue 2): simulated stat <= 1.5x bare pyfakefs os.stat: "
          f"{rows[0][1] / bare_stat:.2f}x")


if __name__ == "__main__":
    main()
