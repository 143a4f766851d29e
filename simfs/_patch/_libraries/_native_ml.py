"""torch's, pyarrow's parquet and feather, and h5py's file entry points, routed.

Both libraries open a *path* in C++, below every route: inside a run,
``torch.save(sd, "/shared/x/model.pt")`` failed with the real machine's
``Parent directory /shared/x does not exist.`` (or wrote a real ``/shared``
where one exists), ``torch.load(path, mmap=True)`` with the real ENOENT, and
``pyarrow.parquet.write_table(table, path)`` likewise.  A FUSE mount of the
host's view cannot answer torch: it holds the GIL across its ``open`` and
``write`` (measured: a FUSE server in a thread of the caller's process
deadlocks, ``bench/bench_processes.py``; docs/design.md, "Processes and
native code").  So each entry point hands the library what its own code
accepts in place of a path, opened through the simulated file layer:

- ``torch.save(obj, path)`` = ``torch.save(obj, open(path, "wb"))``: the
  library's own buffer writer (what it does itself for a non-ASCII name);
- ``torch.load(path, mmap=True)`` = the library's own ``load`` of an
  in-memory copy (a ``memfd``) of the bytes read through ``open``, mapped
  private (copy-on-write), as with the real file: the data of the file when
  it was opened, which is what close-to-open promises a reader.  A shared
  mapping (``torch.serialization.set_default_mmap_options(MAP_SHARED)``)
  writes through to the file, which a copy cannot: refused, loudly.
  ``torch.load(path)`` without ``mmap`` already opens through Python;
- ``pyarrow.parquet.ParquetWriter(path)`` (and so ``write_table``) = the
  writer on ``open(path, "wb")``, closed by the writer's own ``close``;
- ``pyarrow.parquet.read_table(path)`` and ``ParquetFile(path)`` = the
  library's reader on a ``BufferReader`` of the bytes read through ``open``
  (a Python file object would be read from Arrow's I/O threads, which are
  not the process's); a directory (a partitioned dataset) is refused loudly;
- ``pyarrow.feather.write_feather(df, path)`` = the writer on ``open(path,
  "wb")``; ``read_table``/``read_feather(path)`` = the reader on a
  ``BufferReader``, as for parquet.

- ``torch.from_file(path, shared=False)`` and ``UntypedStorage.from_file``
  = torch's own call on a ``memfd`` copy, as for ``load``; ``shared=True``
  writes through to the file: refused, loudly;
- ``h5py.File(path, mode)`` = HDF5's ``fileobj`` driver on a simulated file
  opened with the matching mode (HDF5 calls its ``read``/``write``/``seek``
  on the caller's thread), closed with the ``File``; one of HDF5's own
  drivers (``driver="sec2"``...) opens the path in C: refused, loudly.

A path given with an explicit ``filesystem=`` goes to that filesystem, as
the library decides.  pyarrow's filesystem, IPC, CSV, memory maps and
datasets: ``_native_arrow``.  What stays native: docs/compatibility.md.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from types import ModuleType
from typing import Any

from ..._engine._scheduler import Process, current_process
from .._imports import when_imported
from .._registry import escape, outside_world, patch


def _is_path(target: object) -> bool:
    return isinstance(target, str | bytes | os.PathLike)


def _read_all(path: Any) -> bytes:
    with open(path, "rb") as file:
        data: bytes = file.read()
    return data


# -- torch -----------------------------------------------------------------------


def _install_torch_serialization(serialization: ModuleType) -> None:
    import torch

    real_save = serialization.save
    real_load = serialization.load

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if current_process() is None or not _is_path(f):
            real_save(obj, f, *args, **kwargs)
            return None
        with open(f, "wb") as file:
            real_save(obj, file, *args, **kwargs)
        return None

    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None or not _is_path(f) or not _mapped(kwargs.get("mmap")):
            return real_load(f, *args, **kwargs)
        import mmap as mmap_module

        if serialization.get_default_mmap_options() == mmap_module.MAP_SHARED:
            raise escape(process, f"torch.load({os.fsdecode(os.fspath(f))!r}, mmap=True) with "
                         "set_default_mmap_options(MAP_SHARED): a shared mapping writes through "
                         "to the file, which simfs cannot route; use the default MAP_PRIVATE "
                         "or mmap=False")
        return _load_copy(process, real_load, _read_all(f), args, kwargs)

    patch(serialization, "save", save)
    patch(serialization, "load", load)
    # While torch imports, its package binds these names just after this route
    # ran (``from torch.serialization import save, load``) and gets the routes.
    for name in ("save", "load"):
        if hasattr(torch, name):
            patch(torch, name, getattr(serialization, name))


def _mapped(mmap: object) -> bool:
    """``load``'s ``mmap``, with None meaning the library's configured default."""
    if mmap is None:
        from torch.utils.serialization import config

        return bool(config.load.mmap)
    return bool(mmap)


def _load_copy(process: Process, real_load: Any, data: bytes, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
    """The library's own ``load(..., mmap=True)`` of an in-memory copy of the file."""
    memfd = -1
    try:
        with outside_world():
            memfd = os.memfd_create("simfs-torch-load")
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view):]
            return real_load(f"/proc/self/fd/{memfd}", *args, **kwargs)
    finally:
        if memfd >= 0:
            with outside_world():
                os.close(memfd)


# -- pyarrow ---------------------------------------------------------------------


def _install_parquet(core: ModuleType) -> None:
    import pyarrow

    writer_class = core.ParquetWriter
    real_writer_init = writer_class.__init__

    def writer_init(self: Any, where: Any, schema: Any, filesystem: Any = None,
                    *args: Any, **kwargs: Any) -> None:
        if current_process() is None or filesystem is not None or not _is_path(where):
            real_writer_init(self, where, schema, filesystem, *args, **kwargs)
            return None
        file = open(where, "wb")  # noqa: SIM115 (closed by the writer's close())
        try:
            real_writer_init(self, file, schema, None, *args, **kwargs)
        except BaseException:
            file.close()
            raise
        self.where = where
        self.file_handle = file
        return None

    patch(writer_class, "__init__", writer_init)

    def source_of(process: Process, source: Any, filesystem: Any, call: str) -> Any:
        """What to hand the reader in place of a simulated path."""
        if filesystem is not None or not _is_path(source):
            return source
        if os.path.isdir(source):
            return source  # a dataset: read through the process's Arrow filesystem
        return pyarrow.BufferReader(_read_all(source))

    real_read_table = core.read_table

    def read_table(source: Any, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is not None:
            source = source_of(process, source, kwargs.get("filesystem"), "read_table")
            kwargs.pop("memory_map", None)  # a buffer is already in memory
        return real_read_table(source, *args, **kwargs)

    patch(core, "read_table", read_table)
    file_class = core.ParquetFile
    real_file_init = file_class.__init__

    def file_init(self: Any, source: Any, *args: Any, **kwargs: Any) -> None:
        process = current_process()
        if process is not None:
            source = source_of(process, source, kwargs.get("filesystem"), "ParquetFile")
            kwargs.pop("memory_map", None)
        real_file_init(self, source, *args, **kwargs)

    patch(file_class, "__init__", file_init)
    # pyarrow.parquet binds read_table from here after this route ran (``from
    # .core import *``), or, imported earlier, is rebound by install()'s sweep.


def _install_feather(feather: ModuleType) -> None:
    import pyarrow

    real_write = feather.write_feather

    def write_feather(df: Any, dest: Any, *args: Any, **kwargs: Any) -> None:
        if current_process() is None or not _is_path(dest):
            real_write(df, dest, *args, **kwargs)
            return None
        with open(dest, "wb") as file:
            try:
                real_write(df, file, *args, **kwargs)
            except Exception:
                file.close()
                with contextlib.suppress(OSError):
                    os.remove(dest)  # as the library does for a path it could not write
                raise
        return None

    patch(feather, "write_feather", write_feather)
    for name in ("read_table", "read_feather"):
        patch(feather, name, _buffered_reader(pyarrow, getattr(feather, name), name))


def _buffered_reader(pyarrow: Any, real: Any, name: str) -> Any:
    """``real(source, ...)`` with a simulated path read into a ``BufferReader``."""

    def read(source: Any, *args: Any, **kwargs: Any) -> Any:
        if current_process() is not None and _is_path(source):
            source = pyarrow.BufferReader(_read_all(source))
            kwargs.pop("memory_map", None)  # a buffer is already in memory
        return real(source, *args, **kwargs)

    read.__name__ = name
    return read


# -- torch.from_file ---------------------------------------------------------------


def _install_torch_from_file(torch: ModuleType) -> None:
    real_from_file = torch.from_file

    def from_file(filename: Any, shared: Any = None, size: Any = 0, **kwargs: Any) -> Any:
        process = current_process()
        if process is None or not _is_path(filename):
            return real_from_file(filename, shared, size, **kwargs)
        if shared:
            raise escape(process, f"torch.from_file({os.fsdecode(os.fspath(filename))!r}, "
                         "shared=True): a shared mapping writes through to the file, which "
                         "simfs cannot route; use shared=False (a private copy) or torch.save")
        return _on_copy(_read_all(filename),
                        lambda copy: real_from_file(copy, False, size, **kwargs))

    # Set, not patched: the original is also a member of torch's immutable
    # ``_VariableFunctionsClass``, where the alias sweep would try to replace it.
    from_file.__doc__ = real_from_file.__doc__
    torch.from_file = from_file  # type: ignore[attr-defined]
    storage = torch.UntypedStorage
    real_storage_from_file = storage.from_file

    def storage_from_file(cls: Any, filename: Any, shared: Any = False, nbytes: Any = 0) -> Any:
        process = current_process()
        if process is None or not _is_path(filename):
            return real_storage_from_file(filename, shared, nbytes)
        if shared:
            raise escape(process, f"torch.UntypedStorage.from_file("
                         f"{os.fsdecode(os.fspath(filename))!r}, shared=True): a shared mapping "
                         "writes through to the file, which simfs cannot route; use "
                         "shared=False (a private copy)")
        return _on_copy(_read_all(filename),
                        lambda copy: real_storage_from_file(copy, False, nbytes))

    storage_from_file.__doc__ = real_storage_from_file.__doc__
    # Set on torch's Python class, not patched: the original is the C base
    # class's member, which the alias sweep would try to replace there.
    storage.from_file = classmethod(storage_from_file)


def _on_copy(data: bytes, call: Any) -> Any:
    """``call("/proc/self/fd/N")`` on an in-memory copy (a ``memfd``) of ``data``."""
    memfd = -1
    try:
        with outside_world():
            memfd = os.memfd_create("simfs-copy")
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view):]
            return call(f"/proc/self/fd/{memfd}")
    finally:
        if memfd >= 0:
            with outside_world():
                os.close(memfd)


# -- h5py ------------------------------------------------------------------------

# h5py's modes, as Python file modes over the simulated file (h5py's "fileobj"
# driver reads and writes through them on the caller's thread).
_H5_MODES = {"r": "rb", "r+": "r+b", "w": "w+b", "w-": "x+b", "x": "x+b"}


def _install_h5py(files: ModuleType) -> None:
    file_class = files.File
    real_init, real_close = file_class.__init__, file_class.close

    def init(self: Any, name: Any, mode: str = "r", driver: Any = None,
             *args: Any, **kwargs: Any) -> None:
        process = current_process()
        if process is None or not _is_path(name) or driver == "fileobj":
            real_init(self, name, mode, driver, *args, **kwargs)
            return None
        if driver is not None:
            raise escape(process, f"h5py.File({os.fsdecode(os.fspath(name))!r}, driver="
                         f"{driver!r}): HDF5's own drivers open the path in C, below the "
                         "simulation; only the default driver is routed (through a file object)")
        python_mode = _H5_MODES.get(mode)
        if mode == "a":
            python_mode = "r+b" if os.path.exists(name) else "x+b"
        if python_mode is None:
            raise escape(process, f"h5py.File({os.fsdecode(os.fspath(name))!r}, {mode!r}): "
                         "mode not routed through the simulation (r, r+, w, w-, x, a are)")
        file = open(name, python_mode)  # noqa: SIM115 (closed by File.close)
        try:
            real_init(self, file, "r+" if mode == "a" else mode, None, *args, **kwargs)
        except BaseException:
            file.close()
            raise
        self._simfs_file = file
        return None

    def close(self: Any) -> None:
        try:
            real_close(self)
        finally:
            file = self.__dict__.pop("_simfs_file", None)
            if file is not None:
                file.close()

    patch(file_class, "__init__", init)
    patch(file_class, "close", close)


# -- zarr's event-loop thread ---------------------------------------------------


def _install_zarr_sync(sync: ModuleType) -> None:
    """zarr 3 runs its I/O on one event-loop thread per OS process, kept in
    ``zarr.core.sync``'s globals (``loop``, ``iothread``, ``_lock``,
    ``_executor``) and made on first use.  Where simulated processes share
    that module (zarr imported by the test itself is shared: numcodecs, an
    extension package, imports it), the first process's loop thread served
    every other process, on the first process's host: another host's
    writes went through its client (measured: two hosts writing two arrays,
    every file renamed by host b's threads), and once that process had
    ended, the next caller waited on its dead loop (a ``Deadlock``; zarr's
    own ``LocalStore`` suite, 12 of 100 tests).  A real process has globals
    of its own; so here each simulated process gets its own values of
    those four, swapped in when it calls into zarr (the test process keeps
    its own too), and zarr makes each process its own loop, as in a forked
    child (``reset_resources_after_fork``).
    """
    names = ("_lock", "_executor")
    outside = object()
    held: list[object] = [outside]  # whose values the module's globals hold now
    saved: dict[object, tuple[Any, Any, Any, Any]] = {}

    def own_values() -> None:
        process = current_process()
        owner = outside if process is None else process.group
        if held[0] is owner:
            return
        saved[held[0]] = (sync.loop[0], sync.iothread[0], *(getattr(sync, n) for n in names))
        values = saved.pop(owner, (None, None, None, None))
        sync.loop[0], sync.iothread[0] = values[0], values[1]
        for name, value in zip(names, values[2:], strict=True):
            setattr(sync, name, value)
        held[0] = owner
        for key in [key for key, (_, thread, _, _) in saved.items()
                    if key is not outside and getattr(getattr(thread, "_simfs_process", None),
                                                      "done", True)]:
            # A process whose loop thread has ended: its loop goes with it,
            # closed, as a process's exit takes it without a ResourceWarning.
            loop = saved.pop(key)[0]
            if loop is not None and not loop.is_running() and not loop.is_closed():
                loop.close()

    def routed(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            own_values()
            return real(*args, **kwargs)

        return call

    for name in ("sync", "_get_loop", "_get_lock", "_get_executor", "cleanup_resources"):
        patch(sync, name, routed(getattr(sync, name)))
    if current_process() is None:
        # zarr's own exit handler (atexit, registered as zarr was imported:
        # the original function, which reads the globals directly) must
        # find the test process's values, not those of the last process
        # that called zarr; handlers run last registered first.
        atexit.register(own_values)


def install() -> None:
    """Route each package when the program imports it (see ``_imports``)."""
    when_imported("zarr.core.sync", _install_zarr_sync)
    when_imported("torch", _install_torch_from_file)
    when_imported("h5py._hl.files", _install_h5py)
    when_imported("torch.serialization", _install_torch_serialization)
    when_imported("pyarrow.parquet.core", _install_parquet)
    when_imported("pyarrow.feather", _install_feather)
