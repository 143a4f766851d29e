"""The fields of an OS thread's interpreter state that belong to a simulated process.

Why: with a greenlet baton every simulated process runs on one OS thread, so
whatever CPython keeps per OS thread would be shared by all of them.
greenlet already switches the frame stack, ``sys.exc_info()``, the
``contextvars`` context and the recursion depth; it does not switch:

- ``threading.local`` values: kept in the thread state's ``dict`` on 3.11
  and 3.12 (one ``_localdummy`` per local, under ``thread.local.<addr>``), and
  on 3.13 under the thread state's ``threading_local_key`` and
  ``threading_local_sentinel`` (``Include/cpython/pystate.h``); trio's
  ``GLOBAL_RUN_CONTEXT`` and filelock's ``ThreadLocalFileContext`` are such
  locals, so are simfs's own routing record and users' locals;
- the thread state ``dict`` itself (``Py_Repr``'s recursion guard, ctypes'
  errno, asyncio's running-loop holder);
- asyncio's running loop, which ``_asyncio`` also caches per thread id
  (``cached_running_holder``): after the dict is switched the cache must be
  reset through ``_set_running_loop``, or it would name another process's
  loop, or a freed holder;
- the async generator hooks (``async_gen_firstiter`` and
  ``async_gen_finalizer``, what ``sys.set_asyncgen_hooks`` sets), which
  trio's and asyncio's loops install at their start and put back at their
  end.  Shared, two processes' runs crossed: the later one saved the
  earlier one's hooks as "the thread's own" and put them back when it
  ended, so one process's async generators were finalized by another's
  loop, on its host, and every later run on the thread kept that loop and
  its whole world alive.

``ThreadStateSlots`` finds those pointer fields in the running thread's
``PyThreadState`` by value (the address of an object known to sit there), so
no struct layout is hard-coded, and swaps them wholesale: a reference moves
with its pointer, and a process's saved values are released when it ends.
Measured for issue 16: on 3.11, 3.12 and 3.13 each greenlet then sees its
own locals and its own running loop.
"""

from __future__ import annotations

import _thread
import ctypes
import gc
import sys
from typing import Any, Final

# A thread's state fields are near its start; this bounds the scan.
_SCAN_BYTES: Final = 1024
_WORD: Final = ctypes.sizeof(ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyThreadState_Get.restype = ctypes.c_void_p
_api.PyThreadState_Get.argtypes = []
# A borrowed reference: as py_object ctypes would take it for a new one and
# drop a reference the thread state owns (measured: the dict was freed).
_api.PyThreadState_GetDict.restype = ctypes.c_void_p
_api.PyThreadState_GetDict.argtypes = []
_api.Py_DecRef.restype = None
_api.Py_DecRef.argtypes = [ctypes.c_void_p]


class SlotsUnavailable(RuntimeError):
    """This interpreter's thread state cannot be switched per greenlet."""


def unsupported_reason() -> str | None:
    """Why this interpreter cannot switch thread-local state, or None if it can."""
    if sys.implementation.name != "cpython":
        return f"needs CPython, not {sys.implementation.name}"
    if not (3, 11) <= sys.version_info[:2] <= (3, 13):
        # 3.14 keeps asyncio's running loop in a private thread-state field.
        return f"measured on CPython 3.11 to 3.13 only, not {sys.version.split()[0]}"
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        return "needs the GIL (a free-threaded build shares no baton)"
    return None


def _offset_of(tstate: int, target: int, field: str) -> int:
    """Where in the thread state the pointer ``target`` is kept."""
    hits = [offset for offset in range(0, _SCAN_BYTES, _WORD)
            if ctypes.c_void_p.from_address(tstate + offset).value == target]
    if len(hits) != 1:
        raise SlotsUnavailable(f"the thread state field {field} was found {len(hits)} times "
                               "(expected once); cannot switch it per greenlet")
    return hits[0]


def _pair_at(tstate: int, first: int, second: int, fields: str) -> Any:
    """Two adjacent pointer fields as one 16-byte value: a collection run
    between two separate writes (3.12+ collects at the next bytecode
    boundary) could run finalizers that see one process's first field with
    another's second."""
    if second != first + _WORD:
        raise SlotsUnavailable(f"{fields} are not adjacent in this thread state")
    return (ctypes.c_char * (2 * _WORD)).from_address(tstate + first)


class ThreadStateSlots:
    """The per-thread pointer fields of the calling OS thread, to swap per greenlet.

    Raises:
        SlotsUnavailable: the interpreter is not one this was measured on, or
            a field could not be found exactly once.
    """

    def __init__(self) -> None:
        reason = unsupported_reason()
        if reason is not None:
            raise SlotsUnavailable(reason)
        tstate = _api.PyThreadState_Get()
        self._dict = ctypes.c_ssize_t.from_address(
            tstate + _offset_of(tstate, _api.PyThreadState_GetDict(), "dict"))
        # 3.13: the local key and sentinel: written apart, a local made
        # between the writes would lose its values when the wrong process ends.
        # Pairs of adjacent pointer fields, each read and written as one
        # 16-byte value (one C-level copy).
        pairs = []
        if sys.version_info >= (3, 13):
            pairs.append(_pair_at(tstate, *self._local_offsets(tstate),
                                  "threading_local_key and threading_local_sentinel"))
        pairs.append(_pair_at(tstate, *self._asyncgen_offsets(tstate),
                              "async_gen_firstiter and async_gen_finalizer"))
        self._pairs: tuple[Any, ...] = tuple(pairs)
        # What a thread that has not used any of them yet holds: NULLs, each
        # filled lazily by the interpreter on first use (NULL hooks read as None).
        self.fresh: tuple[Any, ...] = (0, *(bytes(2 * _WORD) for _ in pairs))

    @staticmethod
    def _local_offsets(tstate: int) -> tuple[int, int]:
        """3.13: ``threading_local_key`` and ``threading_local_sentinel``."""
        probe = _thread._local()
        probe.seen = True  # creates this thread's key and sentinel
        referents = gc.get_referents(probe)
        keys = [key for item in referents if isinstance(item, dict) for key in item]
        sentinels = [ref() for item in referents if isinstance(item, set) for ref in item]
        if len(keys) != 1 or len(sentinels) != 1:
            raise SlotsUnavailable("threading.local's per-thread key was not found")
        return (_offset_of(tstate, id(keys[0]), "threading_local_key"),
                _offset_of(tstate, id(sentinels[0]), "threading_local_sentinel"))

    @staticmethod
    def _asyncgen_offsets(tstate: int) -> tuple[int, int]:
        """``async_gen_firstiter`` and ``async_gen_finalizer``, found by setting
        them to two known functions (then put back as they were)."""
        def firstiter(agen: object) -> None:
            pass

        def finalizer(agen: object) -> None:
            pass

        before = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
        try:
            return (_offset_of(tstate, id(firstiter), "async_gen_firstiter"),
                    _offset_of(tstate, id(finalizer), "async_gen_finalizer"))
        finally:
            sys.set_asyncgen_hooks(firstiter=before.firstiter, finalizer=before.finalizer)

    def swap(self, incoming: tuple[Any, ...]) -> tuple[Any, ...]:
        """Install ``incoming`` and return what was installed (its references move too).

        The values are the dict's address, then each pair of fields (on
        3.13 the local key and sentinel; the asyncgen hooks) as 16 raw bytes.
        """
        cell = self._dict
        outgoing = (cell.value, *(pair.raw for pair in self._pairs))
        cell.value = incoming[0]
        for pair, value in zip(self._pairs, incoming[1:]):
            pair.raw = value
        return outgoing

    @staticmethod
    def release(saved: tuple[Any, ...]) -> None:
        """Drop the references held by values no thread will install again.

        Freeing a process's dict and local key ends its ``threading.local``
        values, as a real thread's exit does; its asyncgen hooks go with it.
        """
        addresses = [saved[0]]
        for pair in saved[1:]:
            addresses += [int.from_bytes(pair[:_WORD], sys.byteorder),
                          int.from_bytes(pair[_WORD:], sys.byteorder)]
        for address in addresses:
            if address:
                _api.Py_DecRef(address)
