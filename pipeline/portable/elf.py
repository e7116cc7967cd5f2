"""The two facts the runtime's library closure needs from an ELF file: SONAME and DT_NEEDED.

Written here rather than taken from pyelftools: it is one table of one section (about fifty
lines), and the archive build should not add a dependency to every specdec install for it.
Only 64-bit little-endian files are read (every ABI in recipe.ABIS); others raise ValueError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14


@dataclass(frozen=True)
class DynamicInfo:
    soname: str | None
    needed: tuple[str, ...]


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_dynamic(path: Path) -> DynamicInfo:
    data = path.read_bytes()
    if data[:4] != ELF_MAGIC:
        raise ValueError(f"{path} is not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + index * phentsize)
        if p_type == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return DynamicInfo(None, ())  # static executable or the loader itself

    def file_offset(vaddr: int) -> int:
        for start, offset, size in loads:
            if start <= vaddr < start + size:
                return offset + vaddr - start
        raise ValueError(f"{path}: address {vaddr:#x} is in no loaded segment")

    entries: list[tuple[int, int]] = []
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab = file_offset(next(value for tag, value in entries if tag == _DT_STRTAB))

    def string(offset: int) -> str:
        start = strtab + offset
        return data[start:data.index(b"\0", start)].decode()

    soname = next((string(value) for tag, value in entries if tag == _DT_SONAME), None)
    return DynamicInfo(soname, tuple(string(value) for tag, value in entries if tag == _DT_NEEDED))
