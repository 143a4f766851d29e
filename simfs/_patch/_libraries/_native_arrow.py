"""pyarrow's local filesystem, IPC, CSV, memory maps and datasets, routed.

Arrow opens a local path in C++ (its ``LocalFileSystem``), below every
route.  Rather than one route per reader and writer, a simulated process
gets one Arrow filesystem of its own: a ``pyarrow.fs.PyFileSystem`` whose
handler (``_SimHandler``) answers each call with the Python file calls
that simfs already routes (``os.stat``, ``os.scandir``, ``open``...), so
every answer comes from the process's host's view.  What reaches it:

- ``pyarrow.fs.LocalFileSystem(...)`` made inside a process is that
  filesystem (``isinstance(fs, LocalFileSystem)`` stays true: the name is a
  stand-in class whose instance check accepts both), and so is the
  filesystem ``pyarrow.fs._resolve_filesystem_and_path`` picks for a local
  path, which ``pyarrow.dataset.dataset``, ``write_dataset``, ``parquet``
  (a directory, a ``ParquetDataset``), ``orc`` and ``feather``'s readers
  call.
- Threads.  Measured with pyarrow 26 (a handler recording its thread):
  Arrow *opens* files for reading on the caller's thread and reads them
  from its I/O threads, which are not the process's (simfs refuses a
  simulated file used there), so ``open_input_file`` reads the file whole
  through ``open`` at open time and hands Arrow a ``BufferReader``: the
  data of the file when it was opened, which is what close-to-open promises
  a reader.  Writers given an output stream (``parquet``, ``csv``, IPC)
  write on the caller's thread; ``write_dataset`` opens, writes and closes
  every file on Arrow's threads (``use_threads=False`` too), so it is
  written to Arrow's in-memory ``_MockFileSystem`` and then copied into the
  simulation, file by file, on the caller's thread (its
  ``existing_data_behavior`` checked against the simulated directory).  Any
  other call reaching the handler from a thread that is not the process's
  fails the run with a ``SimulationEscape``.
- Paths handed to Arrow's C++ file functions directly:
  ``pyarrow.csv.read_csv``/``open_csv`` (a ``BufferReader``, decompressed
  by the extension as Arrow does), ``write_csv`` (``open(path, "wb")``),
  ``pyarrow.ipc.new_file``/``new_stream`` and the writer classes
  (``open(path, "wb")``, closed by the writer's ``close``),
  ``open_file``/``open_stream`` and the reader classes (a
  ``BufferReader``), ``pyarrow.input_stream``/``output_stream`` and
  ``pyarrow.memory_map(path)`` read-only (a ``BufferReader``, what
  ``datasets.load_from_disk`` maps); ``memory_map`` in a writing mode
  writes through to the file, which a copy cannot: refused, loudly.

``pyarrow.create_memory_map(path)`` (a writable map) is refused, loudly.
``CSVWriter(path)`` (a stand-in class) writes through ``open``.
``FileSystem.from_uri`` and ``LocalFileSystem.from_uri`` of a ``file:`` URI
or a local path give the simulated filesystem (the names are stand-ins), so
does a ``file:`` URI given as a ``filesystem=`` argument.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from types import ModuleType
from typing import Any

from ..._engine._scheduler import Process, current_process
from .._imports import when_imported
from .._registry import escape, patch


def _pyarrow() -> Any:
    """The ``pyarrow`` package, perhaps still initialising (a route runs while
    ``pyarrow/__init__.py`` imports ``pyarrow.ipc``): never an ``import``
    statement here, which inside a process, with routing off, waits on the
    package's import lock as another thread and hangs (measured: pandas'
    first import inside a process)."""
    return sys.modules["pyarrow"]


def _is_path(target: object) -> bool:
    return isinstance(target, str | bytes | os.PathLike)


def _is_local(path: str) -> bool:
    """A plain path or a ``file:`` URI (another scheme stays Arrow's)."""
    return "://" not in path or path.startswith("file://")


def _local_path(path: Any) -> str:
    text = os.fsdecode(os.fspath(path))
    if text.startswith("file://"):
        text = text[len("file://"):]
    return text


def _read_all(path: Any) -> bytes:
    with open(path, "rb") as file:
        data: bytes = file.read()
    return data


def _codec(pyarrow: Any, path: Any) -> str | None:
    """The compression Arrow infers from a path's extension (``.gz``...), or None."""
    try:
        return str(pyarrow.Codec.detect(os.fsdecode(os.fspath(path))).name)
    except (ValueError, TypeError, pyarrow.ArrowException):
        return None


def _reader(pyarrow: Any, path: Any, *, decompress: bool = False) -> Any:
    """A ``BufferReader`` of the file's bytes read now through ``open``."""
    buffer = pyarrow.BufferReader(_read_all(path))
    codec = _codec(pyarrow, path) if decompress else None
    if codec is None:
        return buffer
    return pyarrow.CompressedInputStream(buffer, codec)


def _writer(pyarrow: Any, path: Any, *, compress: bool = False) -> Any:
    file = open(path, "wb")  # noqa: SIM115 (closed with the stream)
    stream = pyarrow.PythonFile(file, mode="w")
    codec = _codec(pyarrow, path) if compress else None
    if codec is None:
        return stream
    return pyarrow.CompressedOutputStream(stream, codec)


# -- the simulated Arrow filesystem ---------------------------------------------


def _handler_class(pyarrow: Any, fs: Any) -> type:
    class SimHandler(fs.FileSystemHandler):  # type: ignore[misc]
        """Arrow's filesystem calls, answered through the process's routed file calls."""

        def __init__(self, process: Process) -> None:
            self.process = process
            # The bytes of each file listed or looked at on the process's
            # thread, read then: what a scan that opens files ahead on
            # Arrow's threads (a dataset of several files) is handed there.
            self.read_ahead: dict[str, bytes] = {}

        def _remember(self, path: str, entry: os.stat_result | None) -> None:
            if entry is not None and stat.S_ISREG(entry.st_mode):
                self.read_ahead[path] = _read_all(path)

        def _input(self, call: str, path: str) -> Any:
            if current_process() is self.process:
                data = self.read_ahead[path] = _read_all(path)
            elif path in self.read_ahead:
                data = self.read_ahead[path]
            else:
                self._here(call, path)
            return pyarrow.BufferReader(data)

        def _here(self, call: str, path: str) -> None:
            if current_process() is not self.process:
                raise escape(self.process, f"pyarrow filesystem {call}({path!r}) called from a "
                             "thread that is not the process's (one of Arrow's own): simfs "
                             "answers a simulated file on the process's thread only")

        def __eq__(self, other: object) -> bool:
            return isinstance(other, SimHandler) and other.process is self.process

        def __ne__(self, other: object) -> bool:
            return not self == other

        def __hash__(self) -> int:
            return id(self.process)

        def get_type_name(self) -> str:
            return "simfs"

        def normalize_path(self, path: str) -> str:
            return _local_path(path)

        def _info(self, path: str, entry: os.stat_result | None) -> Any:
            if entry is None:
                return fs.FileInfo(path, fs.FileType.NotFound)
            if stat.S_ISDIR(entry.st_mode):
                return fs.FileInfo(path, fs.FileType.Directory, mtime_ns=entry.st_mtime_ns)
            return fs.FileInfo(path, fs.FileType.File, size=entry.st_size,
                               mtime_ns=entry.st_mtime_ns)

        def get_file_info(self, paths: list[str]) -> list[Any]:
            infos = []
            for path in paths:
                self._here("get_file_info", path)
                try:
                    entry: os.stat_result | None = os.stat(path)
                except (FileNotFoundError, NotADirectoryError):
                    entry = None
                self._remember(path, entry)
                infos.append(self._info(path, entry))
            return infos

        def get_file_info_selector(self, selector: Any) -> list[Any]:
            base = selector.base_dir
            self._here("get_file_info", base)
            if not os.path.isdir(base):
                if selector.allow_not_found and not os.path.exists(base):
                    return []
                raise FileNotFoundError(f"Cannot list directory '{base}'")
            infos = []
            pending = [base]
            while pending:
                directory = pending.pop(0)
                with os.scandir(directory) as entries:
                    for entry in sorted(entries, key=lambda e: e.name):
                        path = f"{directory.rstrip('/')}/{entry.name}"
                        found = entry.stat()
                        self._remember(path, found)
                        infos.append(self._info(path, found))
                        if selector.recursive and entry.is_dir():
                            pending.append(path)
            return infos

        def create_dir(self, path: str, recursive: bool) -> None:
            self._here("create_dir", path)
            if recursive:
                os.makedirs(path, exist_ok=True)
            elif not os.path.isdir(path):
                os.mkdir(path)

        def delete_dir(self, path: str) -> None:
            self._here("delete_dir", path)
            shutil.rmtree(path)

        def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
            self._here("delete_dir_contents", path)
            if missing_dir_ok and not os.path.exists(path):
                return
            for name in sorted(os.listdir(path)):
                child = os.path.join(path, name)
                if os.path.isdir(child) and not os.path.islink(child):
                    shutil.rmtree(child)
                else:
                    os.remove(child)

        def delete_root_dir_contents(self) -> None:
            raise escape(self.process, "pyarrow filesystem delete_root_dir_contents() on the "
                         "simulated local filesystem: refused (it would empty '/')")

        def delete_file(self, path: str) -> None:
            self._here("delete_file", path)
            if os.path.isdir(path):
                raise IsADirectoryError(f"Cannot delete file '{path}': it is a directory")
            os.remove(path)

        def move(self, src: str, dest: str) -> None:
            self._here("move", src)
            os.rename(src, dest)

        def copy_file(self, src: str, dest: str) -> None:
            self._here("copy_file", src)
            shutil.copyfile(src, dest)

        def open_input_stream(self, path: str) -> Any:
            return self._input("open_input_stream", path)

        def open_input_file(self, path: str) -> Any:
            return self._input("open_input_file", path)

        def open_output_stream(self, path: str, metadata: Any) -> Any:
            self._here("open_output_stream", path)
            return pyarrow.PythonFile(open(path, "wb"), mode="w")

        def open_append_stream(self, path: str, metadata: Any) -> Any:
            self._here("open_append_stream", path)
            return pyarrow.PythonFile(open(path, "ab"), mode="w")

    return SimHandler


class _Arrow:
    """The routes' shared state: the real classes and the handler class."""

    pyarrow: Any = None
    fs: Any = None
    real_local: Any = None
    real_filesystem: Any = None
    real_os_file: Any = None
    handler: Any = None


def sim_filesystem(process: Process) -> Any:
    """The process's simulated Arrow filesystem (instances of one process compare equal)."""
    return _Arrow.fs.PyFileSystem(_Arrow.handler(process))


def _is_sim(filesystem: Any) -> bool:
    return (_Arrow.fs is not None and isinstance(filesystem, _Arrow.fs.PyFileSystem)
            and isinstance(filesystem.handler, _Arrow.handler))


def stand_in(real: type, inside: Any, doc: str, **routed: Any) -> type:
    """A class standing in for the C class ``real``: calling it outside the
    world makes a ``real``, inside a process ``inside(process, *args)``;
    ``isinstance(x, stand_in)`` accepts both a ``real`` and what ``inside``
    made (checked by ``made(x)``), ``routed`` names class attributes of the
    stand-in's own (static methods), and other attributes are ``real``'s.

    Set in place of the name, never ``patch``ed: the alias sweep would also
    rebind the name inside pyarrow's Cython modules, whose own code makes
    real instances of it.
    """
    made = inside.made

    class Meta(type):
        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, real) or made(instance)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real)

        def __getattr__(cls, name: str) -> Any:
            return getattr(real, name)

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(*args, **kwargs)
        return inside(process, *args, **kwargs)

    return Meta(real.__name__, (), {"__new__": new, "__doc__": (real.__doc__ or "") + doc,
                                     "__module__": real.__module__,
                                     "__qualname__": real.__qualname__, **routed})


def _local_filesystem(process: Process, *args: Any, **kwargs: Any) -> Any:
    return sim_filesystem(process)


_local_filesystem.made = _is_sim  # type: ignore[attr-defined]


def _from_uri(real_from_uri: Any) -> Any:
    """``FileSystem.from_uri`` inside a process: Arrow parses the URI (a
    ``file:`` URI or an absolute path; parsing reads no file), and a local
    filesystem it would hand back is the process's simulated one."""

    def from_uri(uri: Any) -> Any:
        found, path = real_from_uri(uri)
        process = current_process()
        if process is not None and isinstance(found, _Arrow.real_local):
            return sim_filesystem(process), path
        return found, path

    return staticmethod(from_uri)


def _unmade(instance: object) -> bool:
    return False


def _real_filesystem(process: Process, *args: Any, **kwargs: Any) -> Any:
    return _Arrow.real_filesystem(*args, **kwargs)  # Arrow's own refusal: an abstract class


_real_filesystem.made = _unmade  # type: ignore[attr-defined]


def _install_fs(fs: ModuleType) -> None:
    pyarrow = _pyarrow()

    _Arrow.pyarrow = pyarrow
    _Arrow.fs = fs
    _Arrow.real_local = fs.LocalFileSystem
    _Arrow.real_filesystem = fs.FileSystem
    _Arrow.handler = _handler_class(pyarrow, fs)
    # ``from_uri`` is a static method of a C class, reached as
    # ``FileSystem.from_uri`` (pyarrow.fs's own ``_ensure_filesystem`` and
    # ``_resolve_filesystem_and_path`` look the name up in this module) or
    # ``LocalFileSystem.from_uri``: both names are stand-ins with their own.
    fs.LocalFileSystem = stand_in(  # type: ignore[attr-defined]
        fs.LocalFileSystem, _local_filesystem, (
        "\n\nInside a simulated process (simfs): the process's simulated filesystem."),
        from_uri=_from_uri(fs.LocalFileSystem.from_uri))
    fs.FileSystem = stand_in(  # type: ignore[attr-defined]
        fs.FileSystem, _real_filesystem, (
        "\n\nInside a simulated process (simfs): ``from_uri`` of a local path or "
        "``file:`` URI gives the process's simulated filesystem."),
        from_uri=_from_uri(fs.FileSystem.from_uri))
    real_resolve = fs._resolve_filesystem_and_path

    def resolve(path: Any, filesystem: Any = None, **kwargs: Any) -> Any:
        process = current_process()
        if (process is None or filesystem is not None or not _is_path(path)
                or not _is_local(os.fsdecode(os.fspath(path)))):
            return real_resolve(path, filesystem, **kwargs)
        return sim_filesystem(process), _local_path(path)

    patch(fs, "_resolve_filesystem_and_path", resolve)
    real_ensure = fs._ensure_filesystem

    def ensure(filesystem: Any, **kwargs: Any) -> Any:
        process = current_process()
        found = real_ensure(filesystem, **kwargs)
        if process is not None and isinstance(found, _Arrow.real_local):
            return sim_filesystem(process)  # fsspec's LocalFileSystem, a "file://" URI
        return found

    patch(fs, "_ensure_filesystem", ensure)


# -- paths handed to Arrow's C++ directly ------------------------------------------


def _os_file(process: Process, path: Any, mode: str = "r", **kwargs: Any) -> Any:
    """``pyarrow.OSFile(path, mode)`` (pandas' ``to_parquet`` opens its target so)."""
    pyarrow = _Arrow.pyarrow
    if not _is_path(path):
        return _Arrow.real_os_file(path, mode, **kwargs)
    if mode in ("r", "rb"):
        return pyarrow.BufferReader(_read_all(path))
    if mode in ("w", "wb", "a", "ab"):
        return pyarrow.PythonFile(open(path, mode[0] + "b"), mode="w")
    raise escape(process, f"pyarrow.OSFile({os.fsdecode(os.fspath(path))!r}, {mode!r}): "
                 "mode not routed through the simulation (r, rb, w, wb, a, ab are)")


def _made_os_file(instance: object) -> bool:
    """What ``_os_file`` hands out, counted as an ``OSFile`` inside a process only."""
    pyarrow = _Arrow.pyarrow
    return (current_process() is not None
            and isinstance(instance, pyarrow.BufferReader | pyarrow.PythonFile))


_os_file.made = _made_os_file  # type: ignore[attr-defined]


def _install_lib(pyarrow: ModuleType) -> None:
    _Arrow.pyarrow = pyarrow
    _Arrow.real_os_file = pyarrow.OSFile
    pyarrow.OSFile = stand_in(pyarrow.OSFile, _os_file, (  # type: ignore[attr-defined]
        "\n\nInside a simulated process (simfs): the file read now through the "
        "simulation (a BufferReader), or written through open()."))
    real_memory_map = pyarrow.memory_map

    def memory_map(path: Any, mode: str = "r") -> Any:
        process = current_process()
        if process is None or not _is_path(path):
            return real_memory_map(path, mode)
        if mode != "r":
            raise escape(process, f"pyarrow.memory_map({os.fsdecode(os.fspath(path))!r}, "
                         f"{mode!r}): a writable map writes through to the file, which simfs "
                         "cannot route; map read-only (mode 'r') or write through open()")
        return _reader(pyarrow, path)

    patch(pyarrow, "memory_map", memory_map)
    real_create = pyarrow.create_memory_map

    def create_memory_map(path: Any, size: int) -> Any:
        process = current_process()
        if process is None or not _is_path(path):
            return real_create(path, size)
        raise escape(process, f"pyarrow.create_memory_map({os.fsdecode(os.fspath(path))!r}, "
                     f"{size}): a writable map writes through to the file, which simfs cannot "
                     "route; write through open() or pyarrow.output_stream(path)")

    patch(pyarrow, "create_memory_map", create_memory_map)
    real_input_stream = pyarrow.input_stream

    def input_stream(source: Any, compression: str | None = "detect",
                     buffer_size: int | None = None) -> Any:
        if current_process() is None or not _is_path(source):
            return real_input_stream(source, compression, buffer_size)
        if compression == "detect":
            compression = _codec(pyarrow, source)
        return real_input_stream(pyarrow.BufferReader(_read_all(source)), compression,
                                 buffer_size)

    patch(pyarrow, "input_stream", input_stream)
    real_output_stream = pyarrow.output_stream

    def output_stream(source: Any, compression: str | None = "detect",
                      buffer_size: int | None = None) -> Any:
        if current_process() is None or not _is_path(source):
            return real_output_stream(source, compression, buffer_size)
        if compression == "detect":
            compression = _codec(pyarrow, source)
        return real_output_stream(open(source, "wb"), compression,
                                  buffer_size)

    patch(pyarrow, "output_stream", output_stream)


def _path_reader(pyarrow: Any, real: Any, *, decompress: bool) -> Any:
    """``real(source, ...)`` with a simulated path read now into a ``BufferReader``.

    (A closure, not a default argument: the alias sweep rebinds defaults
    holding an original to its route, which would call itself.)
    """

    def read(source: Any, *args: Any, **kwargs: Any) -> Any:
        if current_process() is not None and _is_path(source):
            source = _reader(pyarrow, source, decompress=decompress)
        return real(source, *args, **kwargs)

    return read


def _install_csv(csv: ModuleType) -> None:
    pyarrow = _pyarrow()

    for name in ("read_csv", "open_csv"):
        patch(csv, name, _path_reader(pyarrow, getattr(csv, name), decompress=True))
    real_write = csv.write_csv

    def write_csv(data: Any, output_file: Any, *args: Any, **kwargs: Any) -> None:
        if current_process() is None or not _is_path(output_file):
            real_write(data, output_file, *args, **kwargs)
            return None
        stream = _writer(pyarrow, output_file, compress=True)
        try:
            real_write(data, stream, *args, **kwargs)
        finally:
            stream.close()
        return None

    patch(csv, "write_csv", write_csv)
    real_writer = csv.CSVWriter

    class SimCSVWriter(real_writer):  # type: ignore[misc, valid-type]
        """``CSVWriter(path)`` on ``open(path, "wb")``, closed with the writer."""

        def __init__(self, sink: Any, *args: Any, **kwargs: Any) -> None:
            self._simfs_sink = _writer(pyarrow, sink, compress=True)
            super().__init__(self._simfs_sink, *args, **kwargs)

        def close(self) -> None:
            try:
                super().close()
            finally:
                self._simfs_sink.close()

    def csv_writer(process: Process, sink: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_path(sink):
            return real_writer(sink, *args, **kwargs)
        return SimCSVWriter(sink, *args, **kwargs)

    csv_writer.made = lambda instance: isinstance(instance, real_writer)  # type: ignore[attr-defined]
    csv.CSVWriter = stand_in(real_writer, csv_writer, (  # type: ignore[attr-defined]
        "\n\nInside a simulated process (simfs): a path is written through open()."))


def _route_ipc_writer(pyarrow: Any, cls: Any) -> None:
    real_init, real_close = cls.__init__, cls.close

    def init(self: Any, sink: Any, *args: Any, **kwargs: Any) -> None:
        if current_process() is not None and _is_path(sink):
            sink = _writer(pyarrow, sink)
            self._simfs_sink = sink
        real_init(self, sink, *args, **kwargs)

    def close(self: Any) -> None:
        try:
            real_close(self)
        finally:
            sink = self.__dict__.pop("_simfs_sink", None)
            if sink is not None:
                sink.close()

    patch(cls, "__init__", init)
    # Set, not patched: the original is the C base class's method, which
    # the alias sweep would try to replace in that immutable type.
    close.__doc__ = real_close.__doc__
    cls.close = close


def _install_ipc(ipc: ModuleType) -> None:
    pyarrow = _pyarrow()

    for name in ("RecordBatchFileWriter", "RecordBatchStreamWriter"):
        _route_ipc_writer(pyarrow, getattr(ipc, name))
    for name in ("RecordBatchFileReader", "RecordBatchStreamReader"):
        cls = getattr(ipc, name)
        patch(cls, "__init__", _reader_init(pyarrow, cls.__init__))


def _reader_init(pyarrow: Any, real_init: Any) -> Any:
    def init(self: Any, source: Any, *args: Any, **kwargs: Any) -> None:
        if current_process() is not None and _is_path(source):
            source = _reader(pyarrow, source)
        real_init(self, source, *args, **kwargs)

    return init


def _install_dataset(dataset: ModuleType) -> None:
    real_write = dataset._filesystemdataset_write

    def filesystemdataset_write(scanner: Any, base_dir: str, basename_template: Any,
                                filesystem: Any, partitioning: Any, preserve_order: Any,
                                file_options: Any, max_partitions: Any, file_visitor: Any,
                                existing_data_behavior: str, *rest: Any) -> None:
        process = current_process()
        if process is None or not _is_sim(filesystem):
            real_write(scanner, base_dir, basename_template, filesystem, partitioning,
                       preserve_order, file_options, max_partitions, file_visitor,
                       existing_data_behavior, *rest)
            return None
        if (existing_data_behavior == "error" and os.path.isdir(base_dir)
                and os.listdir(base_dir)):
            raise _Arrow.pyarrow.ArrowInvalid(
                f"Could not write to {base_dir} as the directory is not empty and "
                "existing_data_behavior is to error")
        staging = _Arrow.fs._MockFileSystem()
        real_write(scanner, base_dir, basename_template, staging, partitioning, preserve_order,
                   file_options, max_partitions, file_visitor, "overwrite_or_ignore", *rest)
        _copy_in(staging, base_dir, delete_matching=existing_data_behavior == "delete_matching")
        return None

    patch(dataset, "_filesystemdataset_write", filesystemdataset_write)


def _copy_in(staging: Any, base_dir: str, *, delete_matching: bool) -> None:
    """Copy what Arrow wrote to ``staging`` under ``base_dir`` into the simulation."""
    fs = _Arrow.fs
    os.makedirs(base_dir, exist_ok=True)
    infos = staging.get_file_info(fs.FileSelector(base_dir, recursive=True))
    directories = sorted(i.path for i in infos if i.type == fs.FileType.Directory)
    files = sorted(i.path for i in infos if i.type == fs.FileType.File)
    for directory in directories:
        os.makedirs(directory, exist_ok=True)
    if delete_matching:  # Arrow's "delete_matching": empty each directory written to
        for directory in sorted({os.path.dirname(path) for path in files}):
            for name in sorted(os.listdir(directory)):
                child = os.path.join(directory, name)
                if not os.path.isdir(child):
                    os.remove(child)
    for path in files:
        with staging.open_input_stream(path) as source, open(path, "wb") as target:
            target.write(source.read())


def install() -> None:
    """Route each package when the program imports it (see ``_imports``)."""
    when_imported("pyarrow.fs", _install_fs)
    when_imported("pyarrow", _install_lib)
    when_imported("pyarrow.csv", _install_csv)
    when_imported("pyarrow.ipc", _install_ipc)
    when_imported("pyarrow.dataset", _install_dataset)

