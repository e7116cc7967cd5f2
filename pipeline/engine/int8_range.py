"""Refuse a w8a8 bundle whose weight range this CPU's integer kernels would saturate.

onnxruntime multiplies uint8 x int8 on x86 CPUs without VNNI with AVX2/AVX-512BW `vpmaddubsw`,
which adds two products into a saturating int16: with 8-bit weights (+-127) a row of large
activations silently gets wrong sums (measured: tests/pipeline/test_int8_matmul.py runs it on an
emulated Haswell). 7-bit weights (+-63) are exact everywhere; VNNI (32-bit dot products) and arm64
are exact with 8 bits. Checked where the bundle is opened, on the device that runs it.
"""

from __future__ import annotations

import platform
from pathlib import Path

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.quantization import Quantization

_X86 = ("x86_64", "amd64", "i386", "i686")
_VNNI = ("avx_vnni", "avx512_vnni", "avx512vnni")


def x86_without_vnni(machine: str | None = None, cpuinfo: str | None = None) -> bool:
    machine = (machine or platform.machine()).lower()
    if machine not in _X86:
        return False
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return True  # unknown x86: assume the saturating kernel
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return not any(flag in flags for flag in _VNNI)


def check_weight_range(quantization: Quantization | None, *, machine: str | None = None,
                       cpuinfo: str | None = None) -> None:
    if quantization is None:
        return
    wide = [role for role, graph in quantization.graphs.items()
            if quantization.int8_matmuls(role) and (graph.weight_bits or 7) > 7]
    if wide and x86_without_vnni(machine, cpuinfo):
        raise BundleError(f"the {' and '.join(wide)} graph's 8-bit w8a8 weights saturate this CPU's int8 "
                                 "kernels (x86 without VNNI: int16 pair sums)",
                                 "quantize with --w8a8-weight-bits 7 (exact on every CPU)")
