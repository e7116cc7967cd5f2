"""A compiled target's KV cache policy: which rows it keeps (`full` or `window`) in which dtype.

The policy is chosen at compile time and recorded in the manifest (`buckets.kv_policy`), because
it shapes the graphs (the rotary tables of a window policy reach past the context) and it is part
of the target: plain decoding under a policy is the reference speculative decoding must equal.

`window` keeps S "sink" slots (the first S positions) and the last W positions, StreamingLLM-style:
a query at position p sees the keys at positions 0 … S - 1 and p - W + 1 … p (a tree node: those
of its ancestors). Positions stay absolute — a token's position is its index in the sequence, the
one its key was rotated with when it was written — so every distance inside the window is the
trained one, while the sinks' distance grows with the reply (StreamingLLM instead renumbers the
cache; that needs keys re-rotated as the window moves, which the fused kernels' pre-rotated cache
rules out). A reply may run to `POSITIONS_PER_CONTEXT` × max_context positions: the rotary tables
are built that long. Layers that have a window of their own (Gemma 3, Mistral) keep it.

`float16` stores the rows in half precision; GroupQueryAttention then runs in float16 (cast
around it), so a call's own rows are seen as they are stored.

`int8` stores every key and value row as int8 with one static scale per layer, KV head and channel
(onnxruntime's GroupQueryAttention quantizes rows as it writes them and dequantizes inside the
attention), the scales calibrated at compile time.

Any policy other than `full` in the graph's dtype changes the target's output: it is lossy, off by
default, and `specdec compile` measures it against the full float cache (the quality report).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# How far past max_context a window policy's rotary tables reach (reply positions).
POSITIONS_PER_CONTEXT = 8


class KVDtype(str, enum.Enum):
    float32 = "float32"  # the graphs' own dtype: exact
    float16 = "float16"  # half the bytes; the attention runs in float16 (lossy)
    int8 = "int8"  # per-channel int8 rows, static scales calibrated at compile time (lossy)


class KVCache(str, enum.Enum):
    full = "full"  # every position of the context, max_context slots
    window = "window"  # sinks + the last W positions, any reply length


@dataclass(frozen=True)
class KVPolicy:
    cache: KVCache = KVCache.full
    sinks: int = 0  # window: the first positions every query keeps seeing
    window: int = 0  # window: how many of the latest positions a query sees, itself included
    dtype: KVDtype = KVDtype.float32

    def __post_init__(self) -> None:
        if self.cache is KVCache.window and self.window < 1:
            raise ValueError("a window policy needs a window of at least 1 position")
        if self.cache is KVCache.full and (self.sinks or self.window):
            raise ValueError("sinks and window apply to the window policy only")
        if self.sinks < 0:
            raise ValueError("sinks cannot be negative")

    @property
    def windowed(self) -> bool:
        return self.cache is KVCache.window

    @property
    def lossy(self) -> bool:
        return self.cache is not KVCache.full or self.dtype is not KVDtype.float32

    @property
    def quantized(self) -> bool:
        return self.dtype is KVDtype.int8

    def positions(self, max_context: int) -> int:
        """The positions a reply may reach: the context, or past it under a window."""
        return max_context * POSITIONS_PER_CONTEXT if self.windowed else max_context

    def describe(self, dtype: str) -> str:
        """"full float32", "window S=4 W=256 float32"."""
        shape = f"window S={self.sinks} W={self.window}" if self.windowed else "full"
        return f"{shape} {dtype if self.dtype is KVDtype.float32 else self.dtype.value}"
