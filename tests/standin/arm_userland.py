"""Run arm64 programs on the stand-in: qemu-user through SPECDEC_EXEC_WRAPPER.

This machine has no binfmt_misc, so the portable runtime's launcher prefixes its arm64 loader
with `$SPECDEC_EXEC_WRAPPER` (CMake's CROSSCOMPILING_EMULATOR idea). qemu 7.2 does not fake
/proc/cpuinfo for an arm64 guest, and onnxruntime's cpuinfo parser crashes on the host's x86
one: the wrapper bind-mounts an ARM cpuinfo over it inside a private mount namespace
(`unshare -m` as root, `unshare -r -m` in a user namespace otherwise), for that program only.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

# Two Cortex-A76-like cores; what onnxruntime's cpuinfo library reads on a phone.
ARM_CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp "
    "asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
    "CPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n"
    for i in range(2)
)
TOOLS = ("qemu-aarch64", "unshare", "mount")


def _tool(name: str) -> str | None:
    return shutil.which(name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")


@functools.cache
def unshare_argv() -> tuple[list[str] | None, str]:
    """(`unshare` prefix that allows a bind mount, or None, and why not)."""
    missing = [name for name in TOOLS if _tool(name) is None]
    if missing:
        return None, f"{', '.join(missing)} not installed (apt-get install qemu-user util-linux mount)"
    unshare, mount = _tool("unshare"), _tool("mount")
    attempts = ([[unshare, "-m", "--"]] if os.geteuid() == 0 else []) + [[unshare, "-r", "-m", "--"]]
    errors = []
    for prefix in attempts:
        probe = subprocess.run([*prefix, mount, "--bind", "/dev/null", "/proc/cpuinfo"], capture_output=True,
                               text=True, timeout=30, check=False)
        if probe.returncode == 0:
            return prefix, ""
        errors.append(f"{' '.join(prefix[:-1])}: {(probe.stderr.strip() or 'failed')[:120]}")
    return None, "cannot bind-mount a fake /proc/cpuinfo (" + "; ".join(errors) + "): needs root or user namespaces"


def skip_reason() -> str | None:
    """Why arm64 programs cannot run on the stand-in here, or None."""
    return unshare_argv()[1] or None


def exec_wrapper(directory: Path) -> dict[str, str]:
    """Write the wrapper and its cpuinfo into `directory`; the device environment that uses it."""
    prefix, why = unshare_argv()
    if prefix is None:
        raise RuntimeError(why)
    directory.mkdir(parents=True, exist_ok=True)
    cpuinfo = directory / "cpuinfo"
    cpuinfo.write_text(ARM_CPUINFO)
    q = shlex.quote
    mount, qemu = _tool("mount") or "mount", _tool("qemu-aarch64") or "qemu-aarch64"
    inner = f"{q(mount)} --bind {q(str(cpuinfo))} /proc/cpuinfo && exec {q(qemu)} \"$@\""
    wrapper = directory / "qemu-arm64"
    # Absolute paths: the device's PATH holds toybox applets only.
    wrapper.write_text(f"#!/bin/sh\nexec {' '.join(q(p) for p in prefix)} /bin/sh -c {q(inner)} qemu \"$@\"\n")
    wrapper.chmod(0o755)
    return {"SPECDEC_EXEC_WRAPPER": str(wrapper)}
