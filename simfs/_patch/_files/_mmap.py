"""``mmap.mmap`` of a simulated file: a private copy that writes back like ``write()``.

A simulated descriptor is no real file, so the kernel cannot map it (before
this route: EBADF).  The mapping is instead a real *memory* map of a
``memfd`` filled, through the simulated descriptor, with the file's bytes
(``pread``): buffer-protocol users (``numpy.memmap``, ``memoryview``,
``np.frombuffer``) see real memory, and a read-only mapping is really
read-only.  A shared, writable mapping writes its changed pages back with
``pwrite`` on ``flush()``, ``close()`` and when it is dropped inside its
process: the writes reach the host's page cache exactly as ``write()``'s do,
and other hosts see them after the writer's flush and their own open
(close-to-open, docs/design.md, "The NFS model").  The kernel writes back dirty
pages, not the whole mapping (mm/page-writeback.c), so only pages that changed
are written.

Unlike a real shared mapping, another process on the same host does not see
the bytes before that write-back; a mapping dropped outside its process with
unwritten changes fails the run loudly instead of losing them, and
``resize()`` is refused.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from ..._engine._scheduler import Process, current_process
from .._guards._audit import BRIDGED_FDS
from .._registry import escape, outside_world, patch

_PAGE = mmap.PAGESIZE
_real_mmap: Any = mmap.mmap
_real_write = os.write
_real_close = os.close
_real_ftruncate = os.ftruncate


class _SameClass(type):
    """``isinstance(real_map, mmap.mmap)`` still holds after ``mmap.mmap`` is routed."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _real_mmap)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _real_mmap)


class SimulatedMap(_real_mmap, metaclass=_SameClass):  # type: ignore[misc]
    """A mapping of a simulated file (see the module docstring)."""

    _owner: Process
    _fd: int
    _offset: int
    _shared_writable: bool
    _pristine: bytes
    _path: str

    def __new__(cls, fileno: int, length: int, flags: int = mmap.MAP_SHARED,
                prot: int = mmap.PROT_WRITE | mmap.PROT_READ,
                access: int = mmap.ACCESS_DEFAULT, offset: int = 0, **kwargs: Any) -> Any:
        process = current_process()
        if process is None or fileno == -1:
            return _real_mmap(fileno, length, flags, prot, access, offset, **kwargs)
        syscalls = process.syscalls
        if not syscalls.owns_fd(fileno):
            raise escape(process, f"mmap.mmap({fileno}, ...) of a real file descriptor")
        if length < 0 or offset < 0:
            raise OverflowError("memory mapped length must be positive" if length < 0
                                else "memory mapped offset must be positive")
        if offset % mmap.ALLOCATIONGRANULARITY:
            raise OSError(22, "Invalid argument")
        size = syscalls.fstat(fileno).st_size
        if length == 0:
            if size == 0:
                raise ValueError("cannot mmap an empty file")
            if offset >= size:
                raise ValueError("mmap offset is greater than file size")
            length = size - offset
        elif offset > size:
            raise ValueError("mmap offset is greater than file size")
        data = syscalls.pread(fileno, length, offset) if offset < size else b""
        if access == mmap.ACCESS_WRITE:
            flags, prot = mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
        elif access == mmap.ACCESS_READ:
            flags, prot = mmap.MAP_SHARED, mmap.PROT_READ
        elif access == mmap.ACCESS_COPY:
            flags, prot = mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE
        self = cls._map_copy(data, length, flags, prot)
        self._owner = process
        self._fd = syscalls.dup(fileno)  # a mapping keeps its file open, as for real
        self._offset = offset
        self._shared_writable = bool(flags & mmap.MAP_SHARED and prot & mmap.PROT_WRITE)
        self._pristine = bytes(self[:])
        self._path = f"descriptor {fileno}"
        return self

    @classmethod
    def _map_copy(cls, data: bytes, length: int, flags: int, prot: int) -> SimulatedMap:
        with outside_world():
            memfd = os.memfd_create("simfs-mmap")
            try:
                _real_write(memfd, data)
                _real_ftruncate(memfd, length)
                BRIDGED_FDS.add(memfd)
                try:
                    mapped: SimulatedMap = _real_mmap.__new__(cls, memfd, length, flags=flags,
                                                              prot=prot)
                finally:
                    BRIDGED_FDS.discard(memfd)
            finally:
                _real_close(memfd)
        return mapped

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # everything happened in __new__ (mmap.mmap has no __init__ of its own)

    def _write_back(self) -> None:
        """pwrite the pages that changed since the last write-back."""
        if not self._shared_writable or self.closed:
            return
        process = current_process()
        if process is None or process.group is not self._owner.group:
            raise escape(self._owner, f"a writable mmap of {self._path!r} made in process "
                                      f"{self._owner.name!r} was flushed outside it")
        syscalls = process.syscalls
        current = self[:]
        size = syscalls.fstat(self._fd).st_size
        for start in range(0, len(current), _PAGE):
            page = current[start:start + _PAGE]
            if page != self._pristine[start:start + _PAGE]:
                # A page past the end of the file is not written back (on a
                # real mapping, touching it is SIGBUS).
                limit = max(0, min(len(page), size - self._offset - start))
                if limit:
                    syscalls.pwrite(self._fd, page[:limit], self._offset + start)
        self._pristine = current

    def flush(self, *args: Any) -> None:
        self._write_back()

    def size(self) -> int:
        process = current_process()
        syscalls = (process or self._owner).syscalls
        size: int = syscalls.fstat(self._fd).st_size
        return size

    def resize(self, newsize: int) -> None:
        raise escape(self._owner, f"mmap.resize() of the simulated file {self._path!r} is "
                                  "not simulated; truncate the file and map it again")

    def close(self) -> None:
        if self.closed:
            return
        self._write_back()
        _real_mmap.close(self)  # BufferError while a memoryview or array still uses it
        process = current_process()
        if process is not None and process.group is self._owner.group:
            process.syscalls.close(self._fd)
        else:
            self._owner.syscalls.close_quietly(self._fd)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self.closed or not hasattr(self, "_pristine"):
            return  # closed, or __new__ failed before the mapping was complete
        process = current_process()
        if process is not None and process.group is self._owner.group:
            self.close()
        elif self._shared_writable and self[:] != self._pristine:
            # Cannot raise from a finalizer: the world re-raises it from run().
            escape(self._owner, f"a writable mmap of {self._path!r} with unwritten changes "
                                "was dropped outside its process; flush() or close() it")
        else:
            self._owner.syscalls.close_quietly(self._fd)


def install() -> None:
    patch(mmap, "mmap", SimulatedMap)
