"""pyarrow.parquet with a path reaches the simulation (simfs/_patch/_libraries/_native_ml.py).

Arrow opens a path through its C++ ``LocalFileSystem``: without the routes,
``write_table(table, "/shared/x/t.parquet")`` wrote the real directory of
that name (here ``export``, a real directory at the export's path).
"""

from __future__ import annotations

import time

import pytest

from .conftest import real_listing, two_hosts

pytestmark = pytest.mark.native


def _table():
    import pyarrow as pa

    return pa.table({"n": pa.array(range(1000), pa.int64()),
                     "s": pa.array([f"row{i}" for i in range(1000)])})


def test_write_table_on_one_host_is_read_on_the_other_by_read_table_and_parquetfile(export):
    import pyarrow.parquet as pq

    path = f"{export}/x/t.parquet"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: pq.write_table(_table(), path, row_group_size=300))

    def read():
        time.sleep(1)
        whole = pq.read_table(path, columns=["n"])
        file = pq.ParquetFile(path)
        return whole, file.metadata.num_row_groups, file.read_row_group(3)

    reader = w.spawn(b, read)
    w.run()
    whole, groups, last = reader.result()
    assert whole.column("n").to_pylist() == list(range(1000))
    assert groups == 4 and last.column("s").to_pylist() == [f"row{i}" for i in range(900, 1000)]
    assert w.server.read_bytes(path)[:4] == b"PAR1"
    assert real_listing(export) == ["x"]


def test_a_parquet_writer_kept_open_is_invisible_to_the_other_host_until_it_closes(export):
    # Close-to-open: a's CREATE reached the server at once, its data waits in
    # a's client until close, so b's open at 1 s finds an empty file (Arrow
    # refuses it: no footer); b's open after a's close reads every row.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = f"{export}/x/t.parquet"
    w, a, b = two_hosts(export)

    def write() -> None:
        with pq.ParquetWriter(path, _table().schema) as writer:
            writer.write_table(_table())
            time.sleep(2)
        time.sleep(10)

    def read():
        time.sleep(1)
        try:
            pq.read_table(path)
        except pa.ArrowInvalid as error:
            early = type(error).__name__
        else:
            early = "read"
        time.sleep(2)
        return early, pq.read_table(path).num_rows

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == ("ArrowInvalid", 1000)
    assert real_listing(export) == ["x"]


def test_feather_written_on_one_host_is_read_on_the_other_after_close_to_open(export):
    import pyarrow.feather as feather

    path = f"{export}/x/t.feather"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: feather.write_feather(_table(), path))
    reader = w.spawn(b, lambda: (time.sleep(1), feather.read_table(path, columns=["s"]))[1])
    w.run()
    assert reader.result().column("s").to_pylist() == [f"row{i}" for i in range(1000)]
    assert w.server.read_bytes(path)[:6] == b"ARROW1"
    assert real_listing(export) == ["x"]
