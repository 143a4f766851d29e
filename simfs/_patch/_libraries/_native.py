"""Native I/O of the packages this project builds on, routed through the simulation.

safetensors (Rust), blake3 (Rust) and numpy (C) open and read files
themselves, below Python: no route and no audit event sees them (measured:
``safetensors.numpy.save_file("model.safetensors")`` inside a run wrote the
real working directory; on ``/shared`` paths each reported ENOENT from the
real machine, which reads exactly like an NFS visibility bug).  Their file
entry points are therefore routed, per call, to the same work done through
the simulated file layer, keeping each library's own format code:

- ``safetensors.serialize_file`` = ``serialize`` (bytes) written as the
  installed Rust writer does (measured with 0.8: a ``.tmpXXXXXX`` file in
  the target's directory, then a rename over the target); ``safe_open`` of a
  simulated path = the real ``safe_open`` of an in-memory copy (a ``memfd``)
  of the bytes read through a simulated ``open``, so every method of the
  handle behaves as the library's own;
- ``blake3.update_mmap(path)`` = ``update`` of the file read through ``open``;
- numpy: ``save``/``load`` already use ``open`` and Python reads and writes,
  except that they hand a real-looking file object to C (``isfileobj``), so
  that test answers False for a simulated file; ``fromfile`` reads through
  ``open``; ``ndarray.tofile`` writes through it; ``memmap`` maps through the
  ``mmap`` route (``_mmap``).

``ndarray`` is an immutable C type: its ``tofile`` is replaced in the type's
own dictionary (and the type's method cache invalidated), which CPython
allows for a C type only this way.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from types import ModuleType
from typing import Any

from ..._engine._scheduler import current_process
from .._files._io import SimRawFile
from .._imports import when_imported
from .._registry import escape, outside_world, patch
from . import _native_arrow, _native_ml

_CHUNK = 1 << 20
_TEMP_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _is_path(target: object) -> bool:
    return isinstance(target, str | bytes | os.PathLike)


def _simulated_file(target: object) -> bool:
    """A file object ``open()`` made inside the world (raw, buffered or text)."""
    for _ in range(3):
        if isinstance(target, SimRawFile):
            return True
        target = getattr(target, "buffer", None) or getattr(target, "raw", None)
    return False


def _read_all(path: Any) -> bytes:
    with open(path, "rb") as file:
        data: bytes = file.read()
    return data


# -- safetensors -----------------------------------------------------------------


def _install_safetensors(safetensors: ModuleType) -> None:
    rust = sys.modules["safetensors._safetensors_rust"]

    real_serialize = safetensors.serialize
    real_serialize_file = safetensors.serialize_file
    real_safe_open = safetensors.safe_open

    def serialize_file(tensor_dict: Any, filename: Any, metadata: Any = None,
                       **kwargs: Any) -> None:
        process = current_process()
        if process is None:
            real_serialize_file(tensor_dict, filename, metadata=metadata, **kwargs)
            return None
        data = bytes(real_serialize(tensor_dict, metadata=metadata))
        target = os.fsdecode(os.fspath(filename))
        directory = os.path.dirname(target) or "."
        rng = process.group_random()
        temp = os.path.join(directory, ".tmp" + "".join(rng.choice(_TEMP_LETTERS)
                                                          for _ in range(6)))
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temp, target)
        return None

    def safe_open(filename: Any, framework: Any, device: Any = "cpu", **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real_safe_open(filename, framework, device, **kwargs)
        return _open_copy(real_safe_open, _read_all(filename), framework, device, **kwargs)

    for name, route in (("serialize_file", serialize_file), ("safe_open", safe_open)):
        patch(safetensors, name, route)
        patch(rust, name, route)


def _open_copy(real_safe_open: Any, data: bytes, *args: Any, **kwargs: Any) -> Any:
    """The library's own ``safe_open`` over an in-memory copy of the file's bytes."""
    with outside_world():
        memfd = os.memfd_create("simfs-safetensors")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view):]
            return real_safe_open(f"/proc/self/fd/{memfd}", *args, **kwargs)
        finally:
            os.close(memfd)


# -- blake3 ----------------------------------------------------------------------


def _install_blake3(blake3: ModuleType) -> None:
    hasher = blake3.blake3
    real_update_mmap = hasher.update_mmap

    def update_mmap(self: Any, path: Any) -> Any:
        if current_process() is None:
            return real_update_mmap(self, path)
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                self.update(chunk)
        return self

    patch(hasher, "update_mmap", update_mmap)


# -- numpy -----------------------------------------------------------------------


def _install_numpy(numpy: ModuleType) -> None:
    try:
        from numpy.lib import _format_impl as format_module
    except ImportError:  # numpy 1.x
        from numpy.lib import format as format_module  # type: ignore[no-redef]
    real_isfileobj = format_module.isfileobj

    def isfileobj(file: Any) -> bool:
        if current_process() is not None and _simulated_file(file):
            return False  # read and write it from Python, not through a C FILE*
        return bool(real_isfileobj(file))

    patch(format_module, "isfileobj", isfileobj)

    real_fromfile = numpy.fromfile

    def fromfile(file: Any, dtype: Any = float, count: int = -1, sep: str = "",
                 offset: int = 0, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real_fromfile(file, dtype, count, sep, offset, **kwargs)
        if not (_is_path(file) or _simulated_file(file)):
            raise escape(process, f"numpy.fromfile({file!r}) of a file simfs did not open")
        item = numpy.dtype(dtype)
        if _is_path(file):
            with open(file, "rb") as opened:
                return _from_open_file(numpy, opened, item, count, sep, offset)
        return _from_open_file(numpy, file, item, count, sep, offset)

    patch(numpy, "fromfile", fromfile)

    real_tofile = numpy.ndarray.tofile

    def tofile(self: Any, fid: Any, sep: str = "", format: str = "%s") -> None:
        process = current_process()
        if process is None:
            real_tofile(self, fid, sep, format)
            return None
        if not (_is_path(fid) or _simulated_file(fid)):
            raise escape(process, f"ndarray.tofile({fid!r}) of a file simfs did not open")
        if sep:
            data = sep.join(format % item for item in self.ravel().tolist()).encode()
        else:
            data = self.tobytes(order="C")  # tofile writes C order whatever the layout
        if _is_path(fid):
            with open(fid, "wb") as file:
                file.write(data)
        else:
            fid.write(data)
        return None

    _replace_in_type(numpy.ndarray, "tofile", tofile)


def _from_open_file(numpy: Any, file: Any, item: Any, count: int, sep: str,
                    offset: int) -> Any:
    if offset:
        file.seek(offset, os.SEEK_CUR)
    if sep:
        text = file.read()
        if isinstance(text, bytes):
            text = text.decode()
        return numpy.fromstring(text, dtype=item, count=count, sep=sep)
    data = file.read() if count < 0 else file.read(count * item.itemsize)
    usable = len(data) - len(data) % item.itemsize
    return numpy.frombuffer(data[:usable], dtype=item).copy()


def _replace_in_type(cls: type, name: str, route: Any) -> None:
    """Set a method on a C type that refuses ``setattr`` (see the module docstring)."""
    namespace = gc.get_referents(cls.__dict__)[0]
    if not isinstance(namespace, dict) or name not in namespace:
        raise TypeError(f"cannot route {cls.__name__}.{name}: unexpected type layout")
    namespace[name] = route
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def install() -> None:
    """Route each package when the program imports it (see ``_imports``)."""
    when_imported("safetensors", _install_safetensors)
    when_imported("blake3", _install_blake3)
    when_imported("numpy", _install_numpy)
    _native_ml.install()  # torch, pyarrow's parquet and feather, h5py, zarr
    _native_arrow.install()  # pyarrow's filesystem, IPC, CSV, memory maps, datasets
