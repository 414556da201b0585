"""The activations rounded to int8 blocks, as ggml's CPU backend rounds them before an int8 matrix
product (ggml-cpu: quantize_row_q8_0, quantize_row_q8_1, quantize_row_q8_K_ref).

    q8_32_block(xr, i)                 one 32-element block (block_q8_0 / q8_1): the int8 values,
                                       d and sum(q)
    pack_q8_32(x) / pack_q8_k(x)       the blocks chunk-major, as matmul_q8's per-row kernels and
                                       matmul_x16k read them (below)
    quantize_q8_32(x) / quantize_q8_k(x)   the same fields row by row (for the tests)
    _quantize_rows(...)                the 32-element blocks row-major, as matmul_x16 reads them

  - K types (Q2_K .. Q6_K): per 256-element block (block_q8_K) d = max / -127 where max is the
    element of largest magnitude, q = round(x / d) (ties to even), and bsums, the sums of each 16 q's;
  - Q8_0, Q4_0, Q5_0 (block_q8_0) and Q4_1, Q5_1 (block_q8_1): per 32 elements d = max|x| / 127,
    q = round(x / d), s = d * sum(q).
"""
import numpy as np
from numba import njit

from .simd import vabs, vhmax, vhsum_i, vload, vmax, vrint, vstore_i8

_jit = njit(cache=True, fastmath=False)
_inline = njit(fastmath=False, forceinline=True, _nrt=False)


@_inline
def q8_32_block(xr, i):
    # the 32 values at xr[i:] as ggml's quantize_row_q8_0 / q8_1 rounds them: d = max|x| / 127,
    # q = round(x / d) (ties to even) -> (q as four i32x8, d, sum(q))
    v0, v1, v2, v3 = vload(xr, i), vload(xr, i + 8), vload(xr, i + 16), vload(xr, i + 24)
    amax = vhmax(vmax(vmax(vabs(v0), vabs(v1)), vmax(vabs(v2), vabs(v3))))
    d = amax / np.float32(127)
    inv = np.float32(1) / d if d != 0 else np.float32(0)
    q0, q1, q2, q3 = vrint(v0 * inv), vrint(v1 * inv), vrint(v2 * inv), vrint(v3 * inv)
    return q0, q1, q2, q3, d, vhsum_i((q0 + q1) + (q2 + q3))


@_jit
def _quantize_rows(x, qx, dx, sq, sx):
    # x [n_rows, n] -> row-major qx int8 [n_rows * n], per block dx (d), sq (sum q, int32) and sx
    # (s = d * sum q, block_q8_1's s), each [n_rows * nb]
    n_rows, n = x.shape
    nb = n // 32
    for r in range(n_rows):
        xr = x[r]
        for b in range(nb):
            q0, q1, q2, q3, d, isum = q8_32_block(xr, 32 * b)
            o = r * n + 32 * b
            vstore_i8(qx, o, q0)
            vstore_i8(qx, o + 8, q1)
            vstore_i8(qx, o + 16, q2)
            vstore_i8(qx, o + 24, q3)
            dx[r * nb + b] = d
            sq[r * nb + b] = isum
            sx[r * nb + b] = d * np.float32(isum)


# The quantized activations are stored chunk-major, the rows of a chunk side by side (the
# kernels read a tile's R rows at constant offsets from one address): the int8 values as
# qx[chunk of 64, row, 64], the block scales as [block, row] (K) or [chunk, row, 16] (the others).

@_jit
def _quantize_q8_k(x, qx, dx, bs):
    # x [n_rows, n] -> qx int8 [n / 64, n_rows, 64], dx [n / 256, n_rows], bs int16
    # [n / 256, n_rows, 16] (ggml's quantize_row_q8_K_ref: iscale = -127 / max, where max is the
    # first element of largest magnitude, q = min(127, nearest(iscale * x)), d = 1 / iscale, bs
    # the sums of each 16 q)
    n_rows, n = x.shape
    for r in range(n_rows):
        xr = x[r]
        for b in range(n // 256):
            i0 = 256 * b
            # the largest magnitude in 2 x 8 lanes (maxnum skips NaNs, as ggml's a > amax does),
            # then the first element that has it: the same element as ggml's scan, in a third
            # of the time of its compare-and-branch chain
            m0, m1 = vabs(vload(xr, i0)), vabs(vload(xr, i0 + 8))
            for j in range(i0 + 16, i0 + 256, 16):
                m0, m1 = vmax(m0, vabs(vload(xr, j))), vmax(m1, vabs(vload(xr, j + 8)))
            amax = vhmax(vmax(m0, m1))
            mx = np.float32(0)
            if amax != amax:                                 # all NaN: ggml keeps max 0
                amax = np.float32(0)
            elif amax != 0:
                for j in range(i0, i0 + 256):
                    if abs(xr[j]) == amax:
                        mx = xr[j]
                        break
            iscale = np.float32(-127) / mx if amax != 0 else np.float32(0)
            for c in range(4):
                qc = qx[4 * b + c, r]
                for h in range(4):
                    i = i0 + 64 * c + 16 * h
                    q0 = vrint(vload(xr, i) * iscale)
                    q1 = vrint(vload(xr, i + 8) * iscale)
                    vstore_i8(qc, 16 * h, q0)
                    vstore_i8(qc, 16 * h + 8, q1)
                    bs[b, r, 4 * c + h] = vhsum_i(q0 + q1)
            dx[b, r] = np.float32(1) / iscale if amax != 0 else np.float32(0)


@_jit
def _quantize_q8_32(x, qx, dx16, sx16):
    # x [n_rows, n] -> qx int8 [npad / 64, n_rows, 64] (npad: n rounded up to 64, the rest zero)
    # and per chunk c of 64: dx16 [c, row] = [d_2c] * 8 + [d_2c+1] * 8, sx16 the same of
    # s = d * sum(q); per 32-block d = max|x| / 127, q = round(x / d) (ties to even)
    n_rows, n = x.shape
    for r in range(n_rows):
        xr = x[r]
        for b in range(2 * qx.shape[0]):
            c, h = b // 2, 32 * (b % 2)
            qc = qx[c, r]
            d = np.float32(0)
            s = np.float32(0)
            if 32 * b < n:
                q0, q1, q2, q3, d, isum = q8_32_block(xr, 32 * b)
                vstore_i8(qc, h, q0)
                vstore_i8(qc, h + 8, q1)
                vstore_i8(qc, h + 16, q2)
                vstore_i8(qc, h + 24, q3)
                s = d * np.float32(isum)
            else:
                qc[h:h + 32] = 0
            dx16[c, r, h // 4:h // 4 + 8] = d
            sx16[c, r, h // 4:h // 4 + 8] = s


@_jit
def _alloc_q8_k(n_rows, n):
    return (np.empty((n // 64, n_rows, 64), np.int8), np.empty((n // 256, n_rows), np.float32),
            np.empty((n // 256, n_rows, 16), np.int16))


@_jit
def _alloc_q8_32(n_rows, n):
    nch = (n + 63) // 64
    return (np.empty((nch, n_rows, 64), np.int8), np.empty((nch, n_rows, 16), np.float32),
            np.empty((nch, n_rows, 16), np.float32))


def pack_q8_k(x):
    """[n_rows, n] float32 -> the block_q8_K activations as the K kernels read them, chunk-major
    (above): (qx int8 [n / 64, n_rows, 64], d float32 [n / 256, n_rows], bsums int16
    [n / 256, n_rows, 16])."""
    x = np.ascontiguousarray(x, np.float32)
    qx, dx, bs = _alloc_q8_k(*x.shape)
    _quantize_q8_k(x, qx, dx, bs)
    return qx, dx, bs


def pack_q8_32(x):
    """[n_rows, n] float32 -> the block_q8_0 / block_q8_1 activations as the 32-block kernels
    read them, chunk-major (above): (qx int8 [npad / 64, n_rows, 64], d and s float32
    [npad / 64, n_rows, 16], each block's value 8 times)."""
    x = np.ascontiguousarray(x, np.float32)
    qx, dx16, sx16 = _alloc_q8_32(*x.shape)
    _quantize_q8_32(x, qx, dx16, sx16)
    return qx, dx16, sx16


def quantize_q8_k(x):
    """[n_rows, n] float32 -> ggml's block_q8_K fields, row by row: (qx int8 [n_rows, n],
    d [n_rows, n / 256], bsums int16 [n_rows, n / 16])."""
    qx, dx, bs = pack_q8_k(x)
    n_rows, n = np.shape(x)
    return (qx.transpose(1, 0, 2).reshape(n_rows, n), dx.T.copy(),
            bs.transpose(1, 0, 2).reshape(n_rows, n // 16))


def quantize_q8_32(x):
    """[n_rows, n] float32 -> ggml's block_q8_0 / block_q8_1 fields, row by row: (qx int8
    [n_rows, n], d [n_rows, n / 32], s [n_rows, n / 32])."""
    qx, dx16, sx16 = pack_q8_32(x)
    n_rows, n = np.shape(x)
    nb = n // 32
    return (qx.transpose(1, 0, 2).reshape(n_rows, -1)[:, :n],
            dx16[:, :, ::8].transpose(1, 0, 2).reshape(n_rows, -1)[:, :nb],
            sx16[:, :, ::8].transpose(1, 0, 2).reshape(n_rows, -1)[:, :nb])


__all__ = ["q8_32_block", "pack_q8_32", "pack_q8_k", "quantize_q8_32", "quantize_q8_k"]
