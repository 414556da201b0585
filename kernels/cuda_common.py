"""What the CUDA kernels share (numba-cuda; llm.c's dev/cuda/common.h): the simulator switch,
exact float helpers, unsigned array indices, the device-function decorator and the fixed-order
block reductions.

Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, for tests without a GPU) two libdevice calls are
swapped for NumPy twins (the simulator does not implement libdevice) and device functions stay
plain Python functions (the simulator runs them the same; its own device-function wrapper costs
about 40 us a call).
"""
import numba
import numpy as np
from numba import cuda

SIM = bool(numba.config.ENABLE_CUDASIM)
MAX_THREADS = 1024          # threads per block on every CUDA GPU

if SIM:
    import struct as _struct
    _I32, _F32 = _struct.Struct("<i"), _struct.Struct("<f")

    def fmul(a, b):
        # a * b rounded once (never fused into a following add)
        return np.float32(a) * np.float32(b)

    def as_f32(bits):
        # float32 with the bit pattern of the int32 `bits`
        return np.float32(_F32.unpack(_I32.pack(int(bits)))[0])

else:
    from numba.cuda import libdevice
    fmul = libdevice.fmul_rn
    as_f32 = libdevice.int_as_float

# array indices as unsigned: Numba then skips its negative-index wraparound (a plain int under
# the simulator, where it only costs time)
ix = int if SIM else np.uint64

# device functions, inlined into the kernels (plain Python functions under the simulator)
dev = (lambda f: f) if SIM else cuda.jit(device=True, inline=True)


# ---- block reductions ----------------------------------------------------------------------
# Every thread of the block writes its value to sh[tid] and calls the reduction; the result is
# combined by a fixed tree whose shape depends on the block size only (so a row's result never
# depends on the batch). Barriers are skipped when the block has a single thread (the same
# result, and the simulator runs barriers very slowly).

@cuda.jit(device=True, inline=True)
def block_sync(T):
    if T > 1:
        cuda.syncthreads()


def _block_reduce(combine):
    # a block reduction by combine(sh, i, j): sh[i] <- sh[i] (+) sh[j], over a fixed tree
    @cuda.jit(device=True, inline=True)
    def reduce(sh, tid, T):
        # -> the reduction of sh[0:T] (every thread of the block calls this after writing sh[tid];
        # sh is free again once every thread has read the result: call block_sync first)
        block_sync(T)
        p2 = 1
        while p2 < T:
            p2 *= 2
        stride = p2 // 2
        while stride > 0:
            if tid < stride and tid + stride < T:
                combine(sh, tid, tid + stride)
            block_sync(T)
            stride //= 2
        return sh[0]
    return reduce


@cuda.jit(device=True, inline=True)
def _add(sh, i, j):
    sh[i] += sh[j]


@cuda.jit(device=True, inline=True)
def _max(sh, i, j):
    if sh[j] > sh[i]:
        sh[i] = sh[j]


block_sum = _block_reduce(_add)
block_max = _block_reduce(_max)
