"""DT_NEEDED / SONAME from ELF files (checked against this machine's own binaries)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from specdec.pipeline.portable.elf import is_elf, read_dynamic


def test_reads_needed_and_soname_of_host_binaries() -> None:
    python = Path(sys.executable).resolve()
    info = read_dynamic(python)
    assert info.soname is None and any(name.startswith("libc.so") for name in info.needed)
    libc = next(Path(p) for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                  "/lib64/libc.so.6") if Path(p).exists())
    assert read_dynamic(libc).soname == "libc.so.6"


def test_rejects_what_it_cannot_read(tmp_path: Path) -> None:
    text = tmp_path / "script.sh"
    text.write_text("#!/bin/sh\n")
    assert not is_elf(text) and not is_elf(tmp_path / "missing")
    with pytest.raises(ValueError, match="not an ELF"):
        read_dynamic(text)
    elf32 = tmp_path / "elf32"
    elf32.write_bytes(b"\x7fELF" + struct.pack("BB", 1, 1) + bytes(58))
    with pytest.raises(ValueError, match="64-bit little-endian"):
        read_dynamic(elf32)
