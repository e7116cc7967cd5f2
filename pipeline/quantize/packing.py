"""Integer codes, scales and zero points <-> onnxruntime's `com.microsoft::MatMulNBits` layout.

Every algorithm produces the same three arrays for a weight W[K, N] (x @ W): integer codes[K, N]
(0..15 for 4 bits, 0..255 for 8 bits), scales[N, k_blocks] and zero_points[N, k_blocks], with
W ~= (codes - zero_point) * scale per block of `block_size` rows of one column. This module packs
them the way the MatMulNBits kernel reads them:

- B: uint8 [N, k_blocks, block_size * bits / 8]; column n, block b holds rows b*block..; for
  4 bits element 2i is the low nibble and 2i+1 the high nibble of byte i.
- scales: [N * k_blocks] in the activation dtype (float32 or float16).
- zero_points: uint8 [N * ceil(k_blocks * bits / 8)], each column padded to whole bytes, two per
  byte (low nibble first) for 4 bits. Omitted for symmetric weights: the kernel then uses
  2^(bits-1), which the codes of symmetric quantizers are centred on.

`dequantize` is the numpy reference the tests hold both this packer and the kernel to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUPPORTED_BITS = (4, 8)


def symmetric_zero_point(bits: int) -> int:
    return 1 << (bits - 1)


def max_code(bits: int) -> int:
    return (1 << bits) - 1


@dataclass(frozen=True)
class Packed:
    weight: np.ndarray  # uint8 [N, k_blocks, blob]
    scales: np.ndarray  # [N * k_blocks], float32 or float16
    zero_points: np.ndarray | None  # uint8 [N * ceil(k_blocks * bits / 8)]; None when symmetric
    bits: int
    block_size: int
    K: int
    N: int

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + self.scales.nbytes + (0 if self.zero_points is None else self.zero_points.nbytes)


def _check(codes: np.ndarray, scales: np.ndarray, bits: int, block_size: int) -> tuple[int, int, int]:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"MatMulNBits packing supports {SUPPORTED_BITS} bits, not {bits}")
    if codes.ndim != 2:
        raise ValueError(f"codes must be [K, N], got shape {codes.shape}")
    k, n = codes.shape
    if k % block_size:
        raise ValueError(f"block size {block_size} does not divide K = {k}")
    blocks = k // block_size
    if scales.shape != (n, blocks):
        raise ValueError(f"scales must be [N, k_blocks] = {(n, blocks)}, got {scales.shape}")
    if codes.size and int(codes.max()) > max_code(bits):
        raise ValueError(f"codes exceed {max_code(bits)} for {bits} bits")
    return k, n, blocks


def _nibbles(values: np.ndarray) -> np.ndarray:
    """[..., 2m] uint8 in 0..15 -> [..., m] bytes, element 2i in the low nibble."""
    return (values[..., 0::2] & 0x0F) | ((values[..., 1::2] & 0x0F) << 4)


def pack(codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, *, bits: int,
         block_size: int) -> Packed:
    """Pack codes [K, N], scales [N, kb] and zero points [N, kb] (None: symmetric) for MatMulNBits."""
    k, n, blocks = _check(codes, scales, bits, block_size)
    per_column = np.ascontiguousarray(codes.T.astype(np.uint8)).reshape(n, blocks, block_size)
    weight = _nibbles(per_column) if bits == 4 else per_column
    packed_zp: np.ndarray | None = None
    if zero_points is not None:
        if zero_points.shape != (n, blocks):
            raise ValueError(f"zero points must be [N, k_blocks] = {(n, blocks)}, got {zero_points.shape}")
        zp = zero_points.astype(np.uint8)
        if bits == 4:
            if blocks % 2:  # the unused nibble holds the neutral 8, as ORT's packer writes it
                zp = np.concatenate([zp, np.full((n, 1), symmetric_zero_point(bits), np.uint8)], axis=1)
            zp = _nibbles(zp)
        packed_zp = np.ascontiguousarray(zp).reshape(-1)
    return Packed(np.ascontiguousarray(weight), np.ascontiguousarray(scales).reshape(-1), packed_zp, bits,
                  block_size, k, n)


def unpack(weight: np.ndarray, zero_points: np.ndarray | None, *, K: int, N: int, bits: int,
           block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits B (and zero points) back to codes [K, N] and zero points [N, kb]."""
    blocks = K // block_size
    raw = weight.reshape(N, blocks, -1)
    per_column = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(N, blocks, -1) if bits == 4 else raw
    codes = np.ascontiguousarray(per_column.reshape(N, K).T)
    if zero_points is None:
        return codes, np.full((N, blocks), symmetric_zero_point(bits), np.uint8)
    zp = zero_points.reshape(N, -1)
    if bits == 4:
        zp = np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(N, -1)
    return codes, np.ascontiguousarray(zp[:, :blocks])


def dequantize(codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, block_size: int) -> np.ndarray:
    """W[K, N] = (codes - zero_point) * scale, blockwise along K; float32 like the kernel."""
    k, n = codes.shape
    if k % block_size == 0:
        # per block row, broadcast along N: contiguous throughout (the repeat-and-transpose form
        # below strides across N and took half of an AWQ search's time)
        blocks = k // block_size
        block_scales = scales.astype(np.float32).reshape(n, -1)[:, :blocks].T[:, None, :]
        block_zeros = zero_points.astype(np.float32).reshape(n, -1)[:, :blocks].T[:, None, :]
        shaped = codes.reshape(blocks, block_size, n).astype(np.float32)
        dequantized: np.ndarray = ((shaped - block_zeros) * block_scales).reshape(k, n)
        return dequantized
    scale_rows = np.repeat(scales.astype(np.float32).reshape(n, -1), block_size, axis=1).T[:k]
    zp_rows = np.repeat(zero_points.astype(np.float32).reshape(n, -1), block_size, axis=1).T[:k]
    return ((codes.astype(np.float32) - zp_rows) * scale_rows).astype(np.float32)
