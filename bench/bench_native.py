"""What one torch.save of a 64 MiB state dict costs inside a World, as ratios (issue 25).

    python bench/bench_native.py [--quick]

Needs ``torch==2.13.0+cpu`` (the native tier's venv, ``.venv-native``).  Four
ways of saving the same state dict (16 float32 tensors, 64 MiB; 16 MiB with
``--quick``), best of three wall times each:

- outside the world: to a real path on a tmpfs, and to a real file object;
- (after one warm-up run of each World below: the first spawn installs the
  routes and scans torch's modules, about a second, once per interpreter)
- inside a World (one host, the export on that tmpfs's path, nothing real
  written): ``torch.save(sd, path)``, routed (simfs/_patch/_libraries/
  _native_ml.py: torch's own writer on ``open(path, "wb")``), and
  ``torch.save(sd, open(path, "wb"))``, the program's own file object.

The route adds nothing of its own: the two simulated rows should be about
equal, and their ratio to the real file object is the simulated client's
cost (page cache, server write), not the route's.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable

import torch

from simfs import World

QUICK = "--quick" in sys.argv
MIB = 16 if QUICK else 64


def _state_dict() -> dict[str, torch.Tensor]:
    per = (MIB << 20) // 16 // 4
    return {f"layer{i}": torch.full((per,), float(i)) for i in range(16)}


def _best(run: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _in_world(export: str, body: Callable[[str], None]) -> Callable[[], None]:
    def run() -> None:
        world = World(seed=0, export=export)
        world.server.mkdir(f"{export}/x")
        world.spawn(world.host("a"), body, f"{export}/x/model.pt")
        world.run()

    return run


def _save_path(path: str) -> None:
    torch.save(STATE, path)


def _save_file(path: str) -> None:
    with open(path, "wb") as file:
        torch.save(STATE, file)


STATE = _state_dict()


def main() -> None:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        real = os.path.join(d, "real.pt")
        export = os.path.join(d, "shared")
        os.mkdir(export)
        routed, own = _in_world(export, _save_path), _in_world(export, _save_file)
        routed()  # warm-up: the first spawn installs the routes and scans torch's modules
        own()
        rows = {
            "real path": _best(lambda: torch.save(STATE, real)),
            "real file object": _best(lambda: _save_file(real)),
            "World: torch.save(sd, path), routed": _best(routed),
            "World: torch.save(sd, open(path, 'wb'))": _best(own),
        }
        leaked = sorted(os.listdir(export))
    base = rows["real file object"]
    print(f"torch.save of a {MIB} MiB state dict (best of 3, wall){' (quick)' if QUICK else ''}")
    for name, seconds in rows.items():
        print(f"  {name:42s} {seconds:7.3f} s  {seconds / base:6.1f}x the real file object")
    routed = rows["World: torch.save(sd, path), routed"]
    own = rows["World: torch.save(sd, open(path, 'wb'))"]
    print(f"  routed path / simulated file object: {routed / own:.2f}")
    print(f"  real files left under the export's path: {leaked}")


if __name__ == "__main__":
    main()
