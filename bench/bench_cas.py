"""What verifying a content-addressed model cache costs, as ratios (issue 12).

    python bench/bench_cas.py [--quick]

Two sections, measured side by side in one run on a local tmpfs (real files,
no simulation: this is the cost of ``reference.cas`` itself):

- hash throughput: BLAKE3 (the ``blake3`` package, as the store uses it)
  beside ``hashlib.sha256`` and beside a plain memory copy of the same bytes;
- warm boot: a new process (a fresh trust set) ensuring a model that is
  already materialised verifies every reused file once (sizes, BLAKE3, the
  structural safetensors check), shown as a multiple of one plain read of
  the model's files.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import numpy as np
from safetensors.numpy import save

from reference._cas_model import TrustSet, manifest_for, serve
from reference.cas import CasStore

QUICK = "--quick" in sys.argv
SIZE = (16 if QUICK else 128) << 20


def _best(run: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def hash_throughput() -> None:
    data = os.urandom(SIZE)
    mib = SIZE / (1 << 20)
    rows = [
        ("memory copy", _best(lambda: bytearray(data))),
        ("sha256 (hashlib)", _best(lambda: hashlib.sha256(data).digest())),
        ("BLAKE3 (blake3)", _best(lambda: blake3.blake3(data).digest())),
    ]
    copy = rows[0][1]
    print(f"hash throughput over {mib:.0f} MiB in memory")
    for name, seconds in rows:
        print(f"  {name:18} {mib / seconds:9.0f} MiB/s   {seconds / copy:6.1f}x a memory copy")
    sha, b3 = rows[1][1], rows[2][1]
    print(f"  BLAKE3 is {sha / b3:.1f}x as fast as sha256 here")


def _model() -> dict[str, bytes]:
    tensor = np.arange(SIZE // 4, dtype=np.float32).reshape(-1, 1024)
    return {"model.safetensors": save({"weight": tensor}),
            "config.json": b'{"hidden_size": 1024}'}


def _read_all(snapshot: Path) -> int:
    total = 0
    for path in sorted(snapshot.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    total += len(chunk)
    return total


def warm_boot() -> None:
    files = _model()
    manifest = manifest_for("bench-model", files)
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=directory) as root:
        snapshot = CasStore(root, trust=TrustSet()).ensure_local(manifest, serve(files))
        one_read = _best(lambda: _read_all(snapshot))
        warm = _best(lambda: CasStore(root, trust=TrustSet()).ensure_local(
            manifest, serve(files)))
        trusted = CasStore(root, trust=TrustSet())
        trusted.ensure_local(manifest, serve(files))
        again = _best(lambda: trusted.ensure_local(manifest, serve(files)))
    mib = sum(len(data) for data in files.values()) / (1 << 20)
    print(f"\nwarm boot of a materialised {mib:.0f} MiB model (tmpfs)")
    print(f"  one plain read of its files        {one_read * 1e3:8.1f} ms")
    print(f"  new process: verify once, reuse    {warm * 1e3:8.1f} ms   "
          f"{warm / one_read:5.1f}x one read")
    print(f"  same process again (trusted)       {again * 1e3:8.1f} ms   "
          f"{again / one_read:5.2f}x one read")


def main() -> None:
    print(f"python {sys.version.split()[0]}, blake3 {blake3.__version__}"
          f"{' (quick)' if QUICK else ''}\n")
    hash_throughput()
    warm_boot()


if __name__ == "__main__":
    main()
