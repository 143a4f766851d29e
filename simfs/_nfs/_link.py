"""The link a host's NFS client moves data over: a rate, and what bytes cost.

READ and WRITE carry file data; every other RPC carries a few hundred bytes
of arguments and attributes, which ``rpc_latency`` already stands for.  So a
call that moves ``n`` bytes of file data costs ``n * 8 / rate`` seconds on
top of its RPCs' latency (docs/design.md, "Data takes time").  The client
splits the data into RPCs of at most ``rsize``/``wsize`` bytes, as
``nfs_generic_pg_test`` (fs/nfs/pagelist.c) caps a request at the mount's
``rsize`` or ``wsize``; the rate is the host's link.

A rate is written with its unit, because bits and bytes are easy to mix up:
``"10Gbit/s"``, ``"25 Gbit/s"``, ``"100Mbps"``, ``"1.25GB/s"``,
``"500MiB/s"``.  ``None`` keeps the old model, where data moves in no time.
"""

from __future__ import annotations

import math
import re
from typing import Final

from .._engine._clock import NS_PER_S

# The default: 10 Gbit/s, the most common NIC of a node that reads a shared
# NFS export (docs/design.md, "Data takes time", says why).
DEFAULT_LINK: Final = "10Gbit/s"

# The range a rate may take, in bits per second.  Below 1 Mbit/s one 1 MiB
# RPC takes more than 8 s, and a slower link's RPCs would meet the client's
# retransmission timeout (nfs(5) timeo), which simfs does not model.  Above
# 10 Tbit/s is no link a host has: a typo of the unit.
MIN_BITS_PER_S: Final = 1_000_000
MAX_BITS_PER_S: Final = 10_000_000_000_000

# Unit -> bits per second of one unit.  Network rates are decimal (SI);
# the binary byte units are there for those who think in MiB.
_UNITS: Final = {
    "bit/s": 1, "bps": 1, "b/s": 1,
    "kbit/s": 10**3, "Kbit/s": 10**3, "kbps": 10**3, "Kbps": 10**3, "kb/s": 10**3,
    "Kb/s": 10**3,
    "Mbit/s": 10**6, "Mbps": 10**6, "Mb/s": 10**6,
    "Gbit/s": 10**9, "Gbps": 10**9, "Gb/s": 10**9,
    "Tbit/s": 10**12, "Tbps": 10**12, "Tb/s": 10**12,
    "B/s": 8, "kB/s": 8 * 10**3, "KB/s": 8 * 10**3, "MB/s": 8 * 10**6, "GB/s": 8 * 10**9,
    "KiB/s": 8 * 2**10, "MiB/s": 8 * 2**20, "GiB/s": 8 * 2**30,
}
_RATE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z/]+)\s*")

ALLOWED: Final = ("a rate with its unit, from 1 Mbit/s to 10 Tbit/s: e.g. '10Gbit/s', "
                  "'25 Gbit/s', '100Mbps', '1.25GB/s', '500MiB/s'; or None (data moves in "
                  "no time)")


def parse_link(value: object, where: str) -> int | None:
    """Bits per second of a link written as ``"10Gbit/s"``; None for None.

    Args:
        where: the argument being parsed, for the error (``"World(link=)"``).

    Raises:
        TypeError: not a str or None.
        ValueError: no number and known unit, or a rate outside 1 Mbit/s to
            10 Tbit/s.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{where}: {value!r} is not a link rate; allowed: {ALLOWED}")
    match = _RATE.fullmatch(value)
    unit = None if match is None else _UNITS.get(match.group(2))
    if match is None or unit is None:
        raise ValueError(f"{where}: {value!r} is not a link rate; allowed: {ALLOWED}")
    bits = float(match.group(1)) * unit
    if not (math.isfinite(bits) and MIN_BITS_PER_S <= bits <= MAX_BITS_PER_S):
        raise ValueError(f"{where}: {value!r} is outside the range simfs models; "
                         f"allowed: {ALLOWED}")
    return round(bits)


def transfer_ns(nbytes: int, bits_per_s: int | None) -> int:
    """Virtual nanoseconds ``nbytes`` of data take over a link (0 with no link)."""
    if not nbytes or bits_per_s is None:
        return 0
    return -(-nbytes * 8 * NS_PER_S // bits_per_s)  # rounded up: data never takes 0 ns
