"""What per-process modules cost: a spawn, and a switch between two processes.

    python bench/bench_process_modules.py [--quick]

Prints numbers and ratios, never asserts.  Each row runs the same workload
with ``World(per_process_modules=True)`` (the default: each simulated
process imports its own copies of the program's pure-Python modules) and
``False`` (every process shares the test's modules):

- spawn: CPU µs per process for a process whose target lives in a generated
  package of 50 modules (each a few functions and a module-level lock and
  dict), and in a large real one (``requests``, if installed: about 60
  modules with urllib3, idna, certifi and charset_normalizer's pure part);
- poll: CPU µs per poll with two processes polling in step (every poll is a
  switch between two processes, so between two module views).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from simfs import World

QUICK = "--quick" in sys.argv
SPAWNS = 20 if QUICK else 100
POLLS = 2_000 if QUICK else 20_000


def _make_package(root: Path, name: str, modules: int) -> None:
    package = root / name
    package.mkdir()
    imports = "\n".join(f"from . import m{i}" for i in range(modules))
    (package / "__init__.py").write_text(
        f"{imports}\n\ndef target():\n    return m0.value()\n")
    for i in range(modules):
        (package / f"m{i}.py").write_text(textwrap.dedent(f"""
            import threading
            _lock = threading.Lock()
            _cache: dict[str, int] = {{}}
            CONSTANT = {i}

            def value() -> int:
                with _lock:
                    _cache.setdefault("v", CONSTANT)
                return _cache["v"]

            class Thing{i}:
                def method(self) -> int:
                    return CONSTANT
        """))


def _cpu_per_spawn(target: object, per_process: bool) -> float:
    world = World(seed=1, per_process_modules=per_process)
    host = world.host("a")
    # A first process warms the caches every process shares (bytecode, routes).
    world.spawn(host, target)
    world.run()
    start = time.process_time()
    for _ in range(SPAWNS):
        world.spawn(host, target)
    world.run()
    return (time.process_time() - start) / SPAWNS * 1e6


def _poller() -> None:
    import os
    import time as clock

    for _ in range(POLLS):
        os.path.exists("/shared/marker")
        clock.sleep(0.1)


def _cpu_per_poll(per_process: bool) -> float:
    world = World(seed=1, per_process_modules=per_process)
    hosts = [world.host("a"), world.host("b")]
    for host in hosts:
        world.spawn(host, _poller)
    start = time.process_time()
    world.run()
    return (time.process_time() - start) / (2 * POLLS) * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _make_package(root, "bench_pkg50", 50)
        sys.path.insert(0, str(root))
        package = importlib.import_module("bench_pkg50")
        rows = [("a 50-module package", package.target)]
        if importlib.util.find_spec("requests") is not None:
            import requests

            rows.append(("requests (a large real package)", requests.utils.default_headers))
        print(f"spawn: CPU µs per process ({SPAWNS} processes)")
        print(f"  {'target':<34} {'own modules':>12} {'shared':>10} {'ratio':>7}")
        for label, target in rows:
            own = _cpu_per_spawn(target, True)
            shared = _cpu_per_spawn(target, False)
            print(f"  {label:<34} {own:>12.0f} {shared:>10.0f} {own / shared:>6.1f}x")
        own = _cpu_per_poll(True)
        shared = _cpu_per_poll(False)
        print(f"poll, two processes in step: CPU µs per poll ({POLLS} each)")
        print(f"  own modules {own:.2f}  shared {shared:.2f}  ratio {own / shared:.2f}x")


if __name__ == "__main__":
    main()
