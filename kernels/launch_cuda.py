"""Kernel launches made once and issued many times: what a decode step of the CUDA backend costs
the host (llama.cpp: ggml-cuda launches from C++, and replays CUDA graphs of a step).

A `KernelCall` is a kernel with its launch shape and its arguments. Issued through numba-cuda
(`kernel[grid, block, stream, shmem](*args)`), each launch costs the host far more than the
driver's call: numba-cuda types every argument, looks the compiled kernel up and converts each
argument to its C form every time (about 70 us a launch of a product on an H200's host, against
16.6 us for an empty kernel; docs/lab/2026-12-07-cuda-launches.md).

`PreparedLaunch` does that work once: the compiled function for the arguments' types, and the
argument block (each device array's fields and each scalar as C values, the array of their
addresses) built when it is made; calling it issues cuLaunchKernel (cuda.bindings, which
numba-cuda itself runs on) and nothing else. The device arrays it points to must keep their
addresses while it is used: the CUDA backend makes them, and its launches, once per batch shape.

`CapturedGraph` records a list of prepared launches on a stream once as a CUDA graph and replays
them with one cuGraphLaunch (llama.cpp's ggml-cuda does the same for a decode step). Its kernels
read everything that changes between steps (tokens, positions, the valid mask) from device
buffers the step fills before the replay, so one capture serves every step of a batch shape.

`Copy` is a host <-> device copy of fixed arrays, made once (cuMemcpy*Async on the stream).

Under the CUDA simulator there is no driver: `KernelCall.__call__` and `Copy` fall back to
numba-cuda's own calls, which the simulator implements (the backend's prepared path is then the
simulator's dispatch; what the simulator checks is that the arguments made once stay right).
"""
from __future__ import annotations

import ctypes
import weakref
from typing import NamedTuple

LAUNCH_MODES = ("prepared", "numba")


class KernelCall(NamedTuple):
    kernel: object      # a numba-cuda kernel (cuda.jit)
    grid: int           # blocks
    block: int          # threads per block
    shmem: int          # bytes of dynamic shared memory
    args: tuple         # device arrays and scalars, as the kernel takes them

    def __call__(self, stream=0):
        """Launch through numba-cuda's dispatcher (it types and converts every argument)."""
        self.kernel[self.grid, self.block, stream, self.shmem](*self.args)


def _driver():
    from cuda.bindings import driver
    return driver


def _check(res, what: str):
    # cuda.bindings returns (CUresult, value...) tuples: raise on an error, return the value
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err!r}")
    return res[1] if len(res) > 1 else None


def stream_handle(stream):
    """The driver's handle (a cuda.bindings CUstream) of a numba-cuda stream (0: the default)."""
    return _driver().CUstream(int(stream) if stream else 0)


def _c_value(a):
    # one kernel argument field as a C value: numba-cuda gives ctypes scalars, and plain Python
    # ints for the fields of an array (pointer-sized: meminfo, parent, size, itemsize, data,
    # shape, strides); a boolean scalar stays one byte
    if isinstance(a, ctypes._SimpleCData):
        return a
    if isinstance(a, bool):
        return ctypes.c_uint8(a)
    if isinstance(a, int):
        return ctypes.c_int64(a)
    raise TypeError(f"a kernel argument field of type {type(a).__name__}")


class PreparedLaunch:
    """One launch whose compiled function, launch shape and argument block are made once."""

    __slots__ = ("func", "grid", "block", "shmem", "_holders", "_params", "_argv", "_launch", "_ok")

    def __init__(self, call: KernelCall, stream_h):
        d = _driver()
        k = call.kernel
        compiled = k.compile(tuple(k.typeof_pyval(a) for a in call.args))
        fields, writeback = [], []
        for ty, val in zip(compiled.argument_types, call.args):
            compiled._prepare_args(ty, val, 0, writeback, fields)
        if writeback:
            raise TypeError("a prepared launch takes device arrays only (a host array was given)")
        self._holders = [_c_value(a) for a in fields]
        self._params = (ctypes.c_void_p * len(self._holders))(
            *[ctypes.addressof(h) for h in self._holders])
        self.func = compiled._codelibrary.get_cufunc().handle
        self.grid, self.block, self.shmem = int(call.grid), int(call.block), int(call.shmem)
        # cuLaunchKernel's arguments, all fixed: (function, grid xyz, block xyz, shared memory,
        # stream, the addresses of the argument fields, no `extra`)
        self._argv = (self.func, self.grid, 1, 1, self.block, 1, 1, self.shmem, stream_h,
                      ctypes.addressof(self._params), 0)
        self._launch = d.cuLaunchKernel
        self._ok = d.CUresult.CUDA_SUCCESS

    def __call__(self):
        err, = self._launch(*self._argv)
        if err != self._ok:
            raise RuntimeError(f"cuLaunchKernel: {err!r}")


def prepare(call: KernelCall, stream, mode: str):
    """A function of no arguments that issues `call` on `stream`: a PreparedLaunch ("prepared",
    on a GPU), or numba-cuda's dispatch ("numba", and always under the simulator)."""
    from .cuda_common import SIM
    if mode == "prepared" and not SIM:
        return PreparedLaunch(call, stream_handle(stream))
    return lambda: call(stream)


class CapturedGraph:
    """Prepared launches recorded once on a stream as a CUDA graph; calling it replays them all
    with one cuGraphLaunch. (A GPU only: the simulator cannot capture.)"""

    def __init__(self, launches, stream):
        d = _driver()
        h = stream_handle(stream)
        _check(d.cuStreamBeginCapture(h, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture")
        try:
            for launch in launches:
                launch()
        finally:
            graph = _check(d.cuStreamEndCapture(h), "cuStreamEndCapture")
        self._exec = _check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        weakref.finalize(self, _destroy, self._exec, graph)
        self._stream, self._launch, self._ok = h, d.cuGraphLaunch, d.CUresult.CUDA_SUCCESS
        self.n_kernels = len(launches)

    def __call__(self):
        err, = self._launch(self._exec, self._stream)
        if err != self._ok:
            raise RuntimeError(f"cuGraphLaunch: {err!r}")


def _destroy(graph_exec, graph):
    d = _driver()
    d.cuGraphExecDestroy(graph_exec)
    d.cuGraphDestroy(graph)


def _device_ptr(a) -> int:
    return a.__cuda_array_interface__["data"][0]


class Copy:
    """A copy of `host` (a NumPy array; pinned for an asynchronous copy) to the device array
    `dev` (to_device) or back, of host.nbytes bytes, on `stream`; made once, called per step."""

    def __init__(self, host, dev, to_device: bool, stream, mode: str):
        from .cuda_common import SIM
        self.host, self.dev, self.stream = host, dev, stream
        if mode == "prepared" and not SIM:
            d = _driver()
            h, dp, nb = stream_handle(stream), d.CUdeviceptr(_device_ptr(dev)), host.nbytes
            hp = host.ctypes.data
            if to_device:
                f = d.cuMemcpyHtoDAsync
                self._run = lambda: _check(f(dp, hp, nb, h), "cuMemcpyHtoDAsync")
            else:
                f = d.cuMemcpyDtoHAsync
                self._run = lambda: _check(f(hp, dp, nb, h), "cuMemcpyDtoHAsync")
        elif to_device:
            self._run = lambda: dev.copy_to_device(host, stream=stream)
        else:
            self._run = lambda: dev.copy_to_host(host, stream=stream)

    def __call__(self):
        self._run()
