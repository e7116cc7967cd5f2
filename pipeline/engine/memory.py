"""Memory of the decoding process and of its KV caches, read by the process itself.

Peak RSS comes from the kernel's `VmHWM` (/proc/self/status: the high-water mark of resident
memory), which Linux and Android both keep; `resource.getrusage`'s `ru_maxrss` is the fallback
where /proc is not readable (it is the same figure on Linux, in kB). Writing "5" to
/proc/self/clear_refs resets the high-water mark to the current RSS (Linux >= 4.0), which lets
one process measure the peak of each reply — plain and speculative replies share the process.
Where the reset is refused, peaks are cumulative and `reset_peak` says so by returning False.

Torch-free and stdlib-only: it runs on the device with the rest of the runtime.
"""

from __future__ import annotations

from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])  # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_kb() -> int | None:
    """The process's peak resident memory in kB since it started (or since the last `reset_peak`)."""
    value = _status_kb("VmHWM")
    if value is not None:
        return value
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    except (ImportError, OSError):  # resource is POSIX-only
        return None


def rss_kb() -> int | None:
    """The process's resident memory now, in kB."""
    return _status_kb("VmRSS")


def reset_peak() -> bool:
    """Reset the peak to the current RSS; False where the kernel refuses (peaks then accumulate)."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, itemsize: int) -> int:
    """Bytes one token adds to a full KV cache: a key and a value row in every layer."""
    return 2 * num_layers * num_kv_heads * head_dim * itemsize
