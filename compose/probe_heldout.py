"""Probe the held-out differences of issue 27 on the simulation or a real client.

Each case is two hosts' plain programs from tests/parity/programs.py, run
through the parity tests' Cluster (tests/parity/conftest.py), so the same
case runs on the simulation (``--backend sim``, here) and on the VM's real
mounts (``--backend real``, inside compose/vm.py with the hosts a, b and pos
of conftest.MOUNTS):

    python3 compose/vm.py run --host a=vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3 \\
        --host b=vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3 \\
        --host pos=vers=3,acdirmin=3,acdirmax=3,lookupcache=positive \\
        --out /tmp/heldout --timeout 500 -- .venv/bin/python compose/probe_heldout.py

It prints one line per case: the name and what host b saw.  Cases:
  open-fd     a descriptor held open on b reads at times around a's rewrite
  own-write   b writes page 1 after a rewrote page 0 that b holds cached
  stale-*     exists()/stat/open after a pread that got ESTALE
  renamed-*   exists() over time after a renames away a file b read
  dirfd-*     calls through a directory descriptor after a removed the directory
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.parity import programs
from tests.parity.conftest import Cluster, mounts

PAGE = 4096
DIR_OPS = ("fstat", "listdir", "stat x", "open x", "open x", "open new", "open excl",
           "mkdir", "unlink x", "rmdir sub", "rename x")


class Printed(dict):  # type: ignore[type-arg]
    """Each case printed as soon as it is known (a later failure keeps them)."""

    def __setitem__(self, name: str, seen: Any) -> None:
        print(f"{name:40} {json.dumps(seen, default=repr)}", flush=True)
        super().__setitem__(name, seen)


def cases(cluster: Cluster) -> dict[str, Any]:
    out: dict[str, Any] = Printed()

    def setup(name: str) -> str:
        return str(cluster.run(("a", programs.fresh, (f"heldout/{name}",)))[0])

    base = setup("open-fd")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"old-data")))
    _, out["open-fd same size"] = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"new-data")),
        ("b", programs.pread_held_open, (f"{base}/f", (0.0, 2.0, 4.5, 8.0))))
    base = setup("open-fd-grow")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"old-data")))
    _, out["open-fd grows"] = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"new-data-longer")),
        ("b", programs.pread_held_open, (f"{base}/f", (0.0, 2.0, 4.5, 8.0))))

    if ONLY_ROUND_2:
        return round_2(cluster, out, setup)
    base = setup("own-write")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"A" * PAGE + b"a" * PAGE)))
    _, out["own-write"] = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"B" * PAGE)),
        ("b", programs.own_write_after_remote_change, (f"{base}/f", 2.0, 2.5, 7.0)))

    for name, recreate in (("stale-removed", b""), ("stale-recreated", b"anew")):
        base = setup(name)
        cluster.run(("pos", programs.write_file, (f"{base}/f", b"data")))
        _, out[name] = cluster.run(
            ("a", programs.remove_at, (f"{base}/f", 1.0, recreate)),
            ("b", programs.exists_after_stale_pread, (base, 4.5)))

    looks = (0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 7.0)
    for name, target, keep in (("renamed-same-dir", "g", False),
                               ("renamed-held-open", "g", True),
                               ("renamed-other-dir", "../renamed-elsewhere-g", False)):
        base = setup(name)
        cluster.run(("pos", programs.write_file, (f"{base}/f", b"data")))
        _, out[name] = cluster.run(
            ("a", programs.rename_at, (f"{base}/f", f"{base}/{target}", 1.0)),
            ("b", programs.exists_after_reading, (f"{base}/f", looks, keep)))

    # rmtree of d (x, sub/s) takes a second or more of RPCs under emulation:
    # a starts at 0.5, b's calls come at 2.5 (inside acdirmin=3 of b's open)
    # or at 5.0 (after it).
    for at in (2.5, 5.0):
        specs_a, specs_b, names = [], [], []
        for cached in (False, True):
            for recreate in (False, True):
                name = (f"dirfd {'cached' if cached else 'uncached'} "
                        f"{'recreated' if recreate else 'removed'} at {at}")
                base = setup(name.replace(" ", "-"))
                cluster.run(("pos", programs.write_file, (f"{base}/d/x", b"x")),
                            ("pos", programs.write_file, (f"{base}/d/sub/s", b"s")))
                specs_a.append(("a", programs.remove_tree_and_maybe_recreate,
                                (f"{base}/d", 0.5, recreate)))
                specs_b.append(("b", programs.dir_fd_after_removal,
                                (f"{base}/d", at, cached, DIR_OPS)))
                names.append(name)
        answers = cluster.run(*specs_a, *specs_b)
        for name, answer in zip(names, answers[len(specs_a):]):
            out[name] = answer
    return out


ONLY_ROUND_2 = "--round-2" in sys.argv


def round_2(cluster: Cluster, out: dict[str, Any], setup: Any) -> dict[str, Any]:
    """The second VM run: an O_RDWR holder, default options, finer rename looks."""
    base = setup("open-rw")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"old-data")))
    _, out["open-rw then reopen"] = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"new-data")),
        ("b", programs.pread_rw_then_reopen, (f"{base}/f", (0.0, 2.0, 4.5), 5.0, (5.5, 9.0))))
    base = setup("open-fd-default")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"old-data")))
    _, out["open-fd default options"] = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 5.0, b"new-data")),
        ("d", programs.pread_held_open,
         (f"{base}/f", (0.0, 4.0, 6.0, 8.0, 9.5, 11.0, 13.0, 16.0, 20.0))))
    looks = (2.6, 2.9, 3.2, 3.5, 3.8, 4.1, 4.4, 4.8)
    for trial in (1, 2):
        for name, keep in (("renamed-closed", False), ("renamed-held-open", True)):
            base = setup(f"{name}-{trial}")
            cluster.run(("pos", programs.write_file, (f"{base}/f", b"data")))
            _, out[f"{name} {trial}"] = cluster.run(
                ("a", programs.rename_at, (f"{base}/f", f"{base}/g", 1.0)),
                ("b", programs.exists_after_reading, (f"{base}/f", looks, keep)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sim", "real"), default="real")
    parser.add_argument("--round-2", action="store_true",
                        help="the second run's cases (host d: vers=3, default timeouts)")
    args = parser.parse_args()
    hosts = {h: o for h, o in mounts("3").items() if h in ("a", "b", "pos")}
    if args.round_2:
        hosts["d"] = "vers=3"
    if args.backend == "sim":
        from scenarios._sim import SimBackend
        from simfs._nfs._kernels import KERNELS
        cluster = Cluster(SimBackend(), hosts, KERNELS["6.1"])
    else:
        import os

        from scenarios._real import RealBackend
        from simfs._nfs._kernels import running_kernel_profile
        cluster = Cluster(RealBackend.from_environment(), hosts,
                          running_kernel_profile(os.uname().release, "3"))
    try:
        cases(cluster)
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
