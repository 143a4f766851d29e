"""pyarrow's IPC files, CSV, LocalFileSystem, memory maps and datasets on two hosts.

Routes: simfs/_patch/_libraries/_native_arrow.py.  Arrow opens each of these
paths in C++: without the routes every test below wrote the real directory
at the export's path (``export``, which must stay as it was) or read the
real machine's ENOENT.
"""

from __future__ import annotations

import time

import pytest

from simfs import SimulationEscape

from .conftest import real_listing, two_hosts

pytestmark = pytest.mark.native


def _table(rows: int = 100):
    import pyarrow as pa

    return pa.table({"n": pa.array(range(rows), pa.int64()),
                     "part": pa.array([i % 3 for i in range(rows)], pa.int64())})


def test_an_ipc_file_and_stream_written_on_one_host_are_read_on_the_other(export):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    base = f"{export}/x"
    w, a, b = two_hosts(export)

    def write() -> None:
        with ipc.new_file(f"{base}/t.arrow", _table().schema) as writer:
            writer.write_table(_table())
        with ipc.RecordBatchStreamWriter(f"{base}/t.arrows", _table().schema) as writer:
            writer.write_table(_table())

    def read():
        time.sleep(1)
        whole = ipc.open_file(f"{base}/t.arrow").read_all()
        streamed = ipc.open_stream(f"{base}/t.arrows").read_all()
        mapped = ipc.open_file(pa.memory_map(f"{base}/t.arrow")).read_all()
        return [t.column("n").to_pylist() for t in (whole, streamed, mapped)]

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == [list(range(100))] * 3
    assert w.server.read_bytes(f"{base}/t.arrow")[:6] == b"ARROW1"
    assert real_listing(export) == ["x"]


def test_an_ipc_file_writer_kept_open_is_invisible_to_the_other_host_until_it_closes(export):
    # Close-to-open: b's open at 1 s finds the file a created but not its
    # data (still in a's client cache): Arrow refuses it; after a's close at
    # 2 s, b reads every row.
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path = f"{export}/x/t.arrow"
    w, a, b = two_hosts(export)

    def write() -> None:
        with ipc.new_file(path, _table().schema) as writer:
            writer.write_table(_table())
            time.sleep(2)

    def read():
        time.sleep(1)
        try:
            ipc.open_file(path)
        except pa.ArrowInvalid:
            early = "ArrowInvalid"
        else:
            early = "read"
        time.sleep(2)
        return early, ipc.open_file(path).read_all().num_rows

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == ("ArrowInvalid", 100)
    assert real_listing(export) == ["x"]


@pytest.mark.parametrize("call", ["memory_map", "create_memory_map"])
def test_a_writable_memory_map_of_a_simulated_path_is_refused_naming_the_process(export, call):
    import pyarrow as pa

    w, _, b = two_hosts(export)
    w.server.write_bytes(f"{export}/x/t.bin", b"0123")
    if call == "memory_map":
        w.spawn(b, lambda: pa.memory_map(f"{export}/x/t.bin", "r+"), name="mapper")
    else:
        w.spawn(b, lambda: pa.create_memory_map(f"{export}/x/t.bin", 16), name="mapper")
    with pytest.raises(SimulationEscape) as raised:
        w.run()
    message = str(raised.value)
    assert "mapper" in message and "'b'" in message and f"{export}/x/t.bin" in message
    assert real_listing(export) == ["x"]


def test_csv_written_by_path_on_one_host_is_read_on_the_other_compressed_or_not(export):
    import pyarrow.csv as csv

    base = f"{export}/x"
    w, a, b = two_hosts(export)

    def write() -> None:
        csv.write_csv(_table(), f"{base}/t.csv")
        csv.write_csv(_table(), f"{base}/t.csv.gz")

    def read():
        time.sleep(1)
        plain = csv.read_csv(f"{base}/t.csv").column("n").to_pylist()
        packed = csv.read_csv(f"{base}/t.csv.gz").column("n").to_pylist()
        streamed = csv.open_csv(f"{base}/t.csv").read_all().num_rows
        return plain, packed, streamed

    w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == (list(range(100)), list(range(100)), 100)
    assert w.server.read_bytes(f"{base}/t.csv").startswith(b'"n","part"\n0,0\n')
    assert w.server.read_bytes(f"{base}/t.csv.gz")[:2] == b"\x1f\x8b"  # gzip's magic
    assert real_listing(export) == ["x"]


def test_a_csv_writer_given_a_path_writes_what_the_other_host_reads_after_close(export):
    import pyarrow as pa
    import pyarrow.csv as csv

    path = f"{export}/x/w.csv"
    w, a, b = two_hosts(export)

    def write() -> bool:
        with csv.CSVWriter(path, _table().schema) as writer:
            writer.write_table(_table())
        return isinstance(writer, csv.CSVWriter)

    def read():
        time.sleep(1)
        return csv.read_csv(path).column("n").to_pylist()

    writer = w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert writer.result() is True and isinstance(object(), csv.CSVWriter) is False
    assert reader.result() == list(range(100))
    assert isinstance(csv.CSVWriter(pa.BufferOutputStream(), _table().schema), csv.CSVWriter)
    assert real_listing(export) == ["x"]


def test_local_filesystem_made_in_a_process_answers_from_its_hosts_view(export):
    import pyarrow.fs as fs

    base = f"{export}/x"
    w, a, b = two_hosts(export)

    def write():
        local = fs.LocalFileSystem()
        local.create_dir(f"{base}/d/e")
        with local.open_output_stream(f"{base}/d/e/f.bin") as stream:
            stream.write(b"hello")
        local.move(f"{base}/d/e/f.bin", f"{base}/d/g.bin")
        return isinstance(local, fs.LocalFileSystem)

    def read():
        time.sleep(1)
        local = fs.LocalFileSystem()
        listing = [(i.path, i.type.name, i.size) for i in
                   local.get_file_info(fs.FileSelector(f"{base}/d", recursive=True))]
        with local.open_input_file(f"{base}/d/g.bin") as file:
            data = file.read()
        local.delete_file(f"{base}/d/g.bin")
        return listing, data, local.get_file_info(f"{base}/d/g.bin").type.name

    writer = w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert writer.result() is True
    assert reader.result() == ([(f"{base}/d/e", "Directory", None),
                                (f"{base}/d/g.bin", "File", 5)], b"hello", "NotFound")
    assert sorted(w.server.listdir(f"{base}/d")) == ["e"]
    assert real_listing(export) == ["x"]


def test_from_uri_of_a_file_uri_or_a_path_answers_from_the_processs_host(export):
    # FileSystem.from_uri is a static method of a C class: routed by name
    # (pyarrow.fs.FileSystem and LocalFileSystem are stand-ins inside the world).
    import pyarrow.dataset as ds
    import pyarrow.fs as fs
    import pyarrow.parquet as pq

    base = f"{export}/x"
    w, a, b = two_hosts(export)

    def write():
        local, path = fs.FileSystem.from_uri(f"file://{base}/u.bin")
        with local.open_output_stream(path) as stream:
            stream.write(b"by uri")
        other, path = fs.LocalFileSystem.from_uri(f"{base}/v.bin")
        with other.open_output_stream(path) as stream:
            stream.write(b"by path")
        pq.write_table(_table(), "t.parquet", filesystem=f"file://{base}")
        return isinstance(local, fs.FileSystem), isinstance(other, fs.LocalFileSystem)

    def read():
        time.sleep(1)
        local, path = fs.FileSystem.from_uri(f"file://{base}/u.bin")
        with local.open_input_file(path) as file:
            data = file.read()
        rows = ds.dataset("t.parquet", filesystem=f"file://{base}").to_table().num_rows
        return data, rows

    writer = w.spawn(a, write)
    reader = w.spawn(b, read)
    w.run()
    assert writer.result() == (True, True)
    assert reader.result() == (b"by uri", _table().num_rows)
    assert w.server.read_bytes(f"{base}/v.bin") == b"by path"
    assert real_listing(export) == ["x"]
    # Outside the world the names are Arrow's own.
    local, path = fs.FileSystem.from_uri(f"file://{export}/x")
    assert type(local).__name__ == "LocalFileSystem" and path == f"{export}/x"


def test_a_partitioned_dataset_written_on_one_host_is_read_on_the_other(export):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    base = f"{export}/x/ds"
    w, a, b = two_hosts(export)
    w.spawn(a, lambda: ds.write_dataset(_table(), base, format="parquet",
                                        partitioning=["part"]))

    def read():
        time.sleep(1)
        scanned = ds.dataset(base, format="parquet", partitioning=["part"]).to_table()
        whole = pq.read_table(base)
        return sorted(scanned.column("n").to_pylist()), whole.num_rows

    reader = w.spawn(b, read)
    w.run()
    assert reader.result() == (list(range(100)), 100)
    assert sorted(w.server.listdir(base)) == ["0", "1", "2"]
    assert real_listing(export) == ["x"]


def test_write_dataset_into_a_non_empty_directory_errors_as_arrow_does_by_default(export):
    import pyarrow as pa
    import pyarrow.dataset as ds

    base = f"{export}/x/ds"
    w, a, _ = two_hosts(export)

    def write_twice():
        ds.write_dataset(_table(), base, format="parquet")
        try:
            ds.write_dataset(_table(), base, format="parquet")
        except pa.ArrowInvalid as error:
            return str(error)
        return "written"

    writer = w.spawn(a, write_twice)
    w.run()
    assert "directory is not empty" in writer.result()
    assert real_listing(export) == ["x"]
