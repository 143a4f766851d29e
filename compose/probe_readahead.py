"""Measure what the real client's readahead leaves in a reader's cache.

The question (issue 27, "readahead"): host B reads the first pages of a
file and keeps it open; host A then rewrites the whole file and closes it;
B, before its cached attributes expire, reads further pages.  Pages B's
kernel read ahead hold the old bytes; pages it never fetched come from the
server, new.  simfs fetches exactly the pages a read asks for (no
readahead), so how far the real window reaches decides where the two
differ.  fs/nfs/read.c reads through mm/readahead.c (``page_cache_sync_ra``:
an initial window from the request's size, ``get_init_ra_size``; an async
window at the ``PG_readahead`` mark), capped by the mount's readahead size
(``nfs_super_set_maxbytes`` / the bdi's ``ra_pages``: ``server->rpages *
NFS_MAX_READAHEAD``).

Run inside the VM (each host its own client, nosharecache; a long
attribute timeout so that only the cache's contents decide):

    python3 compose/vm.py run --host a=vers=3,acregmin=30,acregmax=30 \\
        --host b=vers=3,acregmin=30,acregmax=30 --out OUT --timeout 500 \\
        -- python3 compose/probe_readahead.py

Prints, per case, the bytes B's first reads fetched from the server
(``/proc/self/mountstats`` "bytes:" server read bytes) and, for each later
4 KiB read at an offset, whether it returned the old or the new bytes.
Stdlib only.
"""

from __future__ import annotations

import json
import os
import re

SIZE = 4 << 20
PROBES = [4 << 10, 12 << 10, 16 << 10, 28 << 10, 32 << 10, 60 << 10, 64 << 10, 124 << 10,
          128 << 10, 252 << 10, 256 << 10, 508 << 10, 512 << 10, 1 << 20, 2 << 20, 3 << 20]
# What B reads first, kept open: (label, [(offset, size), ...]).
CASES = [
    ("read 4KiB at 0", [(0, 4096)]),
    ("read 4KiB at 0 then at 4KiB", [(0, 4096), (4096, 4096)]),
    ("read 64KiB at 0", [(0, 65536)]),
    ("read 1MiB at 0", [(0, 1 << 20)]),
    ("pread 4KiB at 1MiB", [(1 << 20, 4096)]),
]


def server_read_bytes(point: str) -> int:
    with open("/proc/self/mountstats") as handle:
        text = handle.read()
    block = text.split(f"mounted on {point} ")[1].split("\ndevice ")[0]
    match = re.search(r"^\s+bytes:\s+(.*)$", block, re.M)
    assert match is not None, f"no bytes line for {point}"
    # normalread normalwrite directread directwrite serverread serverwrite ...
    return int(match.group(1).split()[4])


def run(writer_point: str, reader_point: str, index: int, label: str,
        first: list[tuple[int, int]]) -> None:
    name = f"ra{index}"
    with open(f"{writer_point}/{name}", "wb") as handle:
        handle.write(b"o" * SIZE)
    before = server_read_bytes(reader_point)
    fd = os.open(f"{reader_point}/{name}", os.O_RDONLY)
    for offset, size in first:
        got = os.pread(fd, size, offset)
        assert got == b"o" * size, (label, offset)
    fetched = server_read_bytes(reader_point) - before
    writer = os.open(f"{writer_point}/{name}", os.O_WRONLY)
    for offset in range(0, SIZE, 1 << 20):
        os.pwrite(writer, b"n" * (1 << 20), offset)
    os.close(writer)
    seen = []
    for offset in PROBES:
        got = os.pread(fd, 4096, offset)
        which = "old" if got == b"o" * 4096 else "new" if got == b"n" * 4096 else "mixed"
        seen.append(f"{offset // 1024}K={which}")
    os.close(fd)
    print(f"CASE {label}: fetched {fetched} bytes; then " + " ".join(seen), flush=True)


def main() -> None:
    mounts = json.loads(os.environ["NFS_MOUNTS"])
    with open("/proc/mounts") as handle:
        for line in handle:
            if line.split(" ")[2] in ("nfs", "nfs4"):
                print("MOUNT", line.strip())
    names = sorted(mounts)
    for pair in range(0, len(names) - 1, 2):
        writer, reader = mounts[names[pair]], mounts[names[pair + 1]]
        print("PAIR", names[pair], "writes,", names[pair + 1], "reads", flush=True)
        for index, (label, first) in enumerate(CASES):
            run(writer, reader, pair * 100 + index, label, first)
        with open("/proc/self/mountstats") as handle:
            text = handle.read()
        block = text.split(f"mounted on {reader} ")[1].split("\ndevice ")[0]
        print("READER", " ".join(line.strip() for line in block.splitlines()
                                 if line.strip().startswith(("bytes:", "READ:"))))


if __name__ == "__main__":
    main()
