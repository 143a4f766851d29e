"""Verifying bytes another writer left on a shared CAS root: BLAKE3 and safetensors.

Every byte here is read through plain ``open()`` in chunks and fed to
``blake3.blake3()``; the safetensors check parses the header read the same
way and hands bytes (never a path) to ``safetensors.deserialize``.  The
packages' own file APIs (``update_mmap``, ``safe_open``) do their I/O in
native code, which a simulated NFS client cannot see; reading through
``open`` runs unchanged on real NFS and inside simfs (seed 004).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import blake3
import safetensors

from .fs import StrPath

CHUNK = 1 << 20  # bytes per read: one NFS rsize-sized request stream

# Bytes per element of each safetensors dtype (the format's own table).
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
# A header longer than this is refused before it is read (the package's own
# limit is 100 MB); a corrupt length field must not make us read gigabytes.
MAX_HEADER = 100_000_000
# Files up to this size also go through ``safetensors.deserialize`` on the
# bytes of the hash pass; larger ones get the header check alone.
DESERIALIZE_LIMIT = 256 << 20


class StructureError(ValueError):
    """A safetensors file whose header does not describe its bytes."""


@dataclass(frozen=True)
class FileCheck:
    """One pass over a file: its size, its BLAKE3, and what the structure check found."""

    size: int
    digest: str
    problem: str | None = None


def hash_file(path: StrPath, *, keep_bytes_up_to: int = 0,
              on_chunk: Callable[[bytes], None] | None = None) -> tuple[FileCheck, bytes | None]:
    """One full read of ``path``: size and BLAKE3 hex digest (and the bytes if small).

    Args:
        path: the file to read.
        keep_bytes_up_to: return the file's bytes when it is at most this long.
        on_chunk: called with every chunk read (a structure check, a copy).

    Raises:
        OSError: the read failed (ENOENT, ESTALE of a file another host removed).
    """
    hasher = blake3.blake3()
    kept: list[bytes] | None = [] if keep_bytes_up_to > 0 else None
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
            size += len(chunk)
            if kept is not None:
                if size <= keep_bytes_up_to:
                    kept.append(chunk)
                else:
                    kept = None
            if on_chunk is not None:
                on_chunk(chunk)
    data = b"".join(kept) if kept is not None else None
    return FileCheck(size, hasher.hexdigest()), data


def read_header(path: StrPath) -> tuple[dict[str, object], int, int]:
    """(header, data offset, file size) of a safetensors file, read through ``open``.

    Raises:
        StructureError: the length field or the JSON does not parse.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise StructureError(f"{os.fspath(path)}: {len(prefix)} bytes, no header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(MAX_HEADER, size - 8):
            raise StructureError(f"{os.fspath(path)}: header length {length} does not fit "
                                 f"a file of {size} bytes")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StructureError(f"{os.fspath(path)}: header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise StructureError(f"{os.fspath(path)}: header is {type(header).__name__}, "
                             "not an object")
    return header, 8 + length, size


def check_header(header: dict[str, object], data_start: int, size: int) -> None:
    """Offsets inside the file, contiguous from the data start, dtype sizes adding up.

    Raises:
        StructureError: naming the tensor and the broken constraint.
    """
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise StructureError(f"tensor {name!r}: entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPE_SIZES:
            raise StructureError(f"tensor {name!r}: unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0
                                                   for d in shape)):
            raise StructureError(f"tensor {name!r}: shape {shape!r} is not a list of sizes")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise StructureError(f"tensor {name!r}: data_offsets {offsets!r} are not "
                                 "[begin, end] with begin <= end")
        expected = math.prod(shape) * DTYPE_SIZES[str(dtype)]
        if offsets[1] - offsets[0] != expected:
            raise StructureError(f"tensor {name!r}: {dtype} {shape} needs {expected} bytes, "
                                 f"data_offsets span {offsets[1] - offsets[0]}")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise StructureError(f"tensor {name!r}: starts at {begin}, the previous ends at "
                                 f"{end} (a hole or an overlap)")
        end = stop
    if data_start + end != size:
        raise StructureError(f"tensors end at byte {data_start + end}, the file has {size}")


def check_safetensors(path: StrPath, data: bytes | None) -> str | None:
    """None if ``path`` is a well-formed safetensors file, else what is wrong.

    The header is read and checked through ``open``; when the whole file's
    bytes are at hand (``data``), ``safetensors.deserialize`` parses them too.
    """
    try:
        header, data_start, size = read_header(path)
        check_header(header, data_start, size)
        if data is not None:
            safetensors.deserialize(data)  # type: ignore[no-untyped-call]
    except StructureError as error:
        return str(error)
    except safetensors.SafetensorError as error:
        return f"{os.fspath(path)}: safetensors refused it ({error})"
    return None


def verify_file(path: StrPath, *, structural: bool) -> FileCheck:
    """One full BLAKE3 pass over ``path``, plus the structure check if asked.

    Raises:
        OSError: the file cannot be read.
    """
    check, data = hash_file(path, keep_bytes_up_to=DESERIALIZE_LIMIT if structural else 0)
    if not structural:
        return check
    return FileCheck(check.size, check.digest, check_safetensors(path, data))
