"""A cycle counter read from inside compiled code: the phases of the forward pass timed where they
run (`specnb bench --profile`), with the weights streaming from memory as in a real step, not
each kernel alone with its inputs in cache.

    HAS_CLOCK               whether this CPU has a counter here (x86: the time-stamp counter;
                            AArch64: the virtual counter; elsewhere none)
    cycles()                the counter now (ticks at a fixed rate; a caller converts them to
                            seconds by the wall time of the whole call)
    start(clock)            the first reading (0 with clock None)
    tick(clock, i, t0)      clock[i] += cycles() - t0 and returns the new reading; with clock None
                            it compiles to nothing (the forward pass's normal form)
"""
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload


def _counter_name():
    # x86: llvm.readcyclecounter is rdtsc (a constant-rate counter on every CPU of the last decade);
    # on AArch64 it would read the PMU's cycle counter, which Linux keeps from user code, so there
    # llvm.readsteadycounter (the virtual counter, CNTVCT_EL0); None: no counter on this CPU
    import platform
    machine = platform.machine().lower()
    name = ("llvm.readcyclecounter" if machine in ("x86_64", "amd64", "i686", "i386")
            else "llvm.readsteadycounter" if machine in ("aarch64", "arm64") else None)
    if name is None:
        return None
    try:
        llvm_binding.parse_assembly(f"declare i64 @{name}()\n")
    except RuntimeError:
        return None
    return name


_COUNTER = _counter_name()
HAS_CLOCK = _COUNTER is not None


@intrinsic
def cycles(typingctx):
    if not HAS_CLOCK:
        return None                                   # (a typing error: no counter on this CPU)

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []), _COUNTER)
        return builder.call(fn, [])
    return types.int64(), codegen


def start(clock):
    """cycles(), or 0 with clock None (pure Python: not callable, see the overload)"""
    raise NotImplementedError("specnb.kernels.clock.start is for compiled code")


def _no_clock(clock):
    return clock is None or isinstance(clock, (types.NoneType, types.Omitted))


@overload(start, inline="always")
def _start(clock):
    if _no_clock(clock):
        return lambda clock: 0
    return lambda clock: cycles()


def tick(clock, i, t0):
    """clock[i] += cycles() - t0; returns cycles() (pure Python: not callable, see the overload)"""
    raise NotImplementedError("specnb.kernels.clock.tick is for compiled code")


@overload(tick, inline="always")
def _tick(clock, i, t0):
    if _no_clock(clock):
        return lambda clock, i, t0: t0

    def impl(clock, i, t0):
        t1 = cycles()
        clock[i] += t1 - t0
        return t1
    return impl
