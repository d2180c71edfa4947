"""A strict test device (TensorFlow-free): its buffers are opaque handles around host memory.

Any host access not made through the device raises: numpy conversion, indexing, iteration,
truth value, flags. Its kernels are the CPU kernels, unwrapping handles; an input the runtime
hands over as a host array must be a declared host input (kernels.HOST_INPUTS), and a declared
host input must arrive as a host array. So a program that runs here with stock results has no
host assumption left in the runtime's path: every buffer is allocated, copied in and out
through the device, and only host inputs leave it.
"""
import numpy as np

import kernels
from tf_backend.devices import Capabilities, Device


class HostAccess(AssertionError):
    """The runtime touched a device buffer from the host."""


class Handle:
    __slots__ = ("_a",)

    def __init__(self, a):
        self._a = a

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)

    def _refuse(self, *args, **kwargs):
        raise HostAccess("a strict-device buffer was read on the host")

    __array__ = __getitem__ = __setitem__ = __iter__ = __len__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = __array_ufunc__ = __array_function__ = _refuse

    def __repr__(self):
        return f"<Handle {self._a.dtype}{list(self._a.shape)}>"


CPU = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
       "uint32", "uint64", "bool")


class StrictDevice(Device):
    name = "strict"
    capabilities = Capabilities(CPU, supports_programs=True, host_memory=False, views=True)

    def __init__(self, graphs=False):
        self.counts = {"allocate": 0, "copy_in": 0, "copy_out": 0, "view": 0, "record": 0,
                       "replay": 0}
        if graphs:      # records a run as the body itself, replayed by calling it again
            self.capabilities = Capabilities(CPU, host_memory=False, views=True, graphs=True)

    def record(self, body):
        self.counts["record"] += 1
        body()
        device = self

        class Recorded:
            def replay(self):
                device.counts["replay"] += 1
                body()
        return Recorded()

    def load(self):
        kernels.load("cpu")

    def allocate(self, shape, dtype):
        self.counts["allocate"] += 1
        return Handle(np.empty(shape, dtype))

    def copy_in(self, array):
        self.counts["copy_in"] += 1
        return Handle(np.array(array, copy=True))

    def copy_out(self, buffer, owned=False):
        self.counts["copy_out"] += 1
        if not isinstance(buffer, Handle):
            raise HostAccess(f"copy_out of a {type(buffer).__name__}, not a device buffer")
        return np.array(buffer._a, copy=True)

    def copy_into(self, buffer, array):
        if not isinstance(buffer, Handle):
            raise HostAccess(f"copy_into a {type(buffer).__name__}, not a device buffer")
        buffer._a[...] = array

    def view(self, buffer, shape):
        self.counts["view"] += 1
        return Handle(buffer._a.reshape(shape))

    def lookup(self, op, attrs):
        kdef, reason = kernels.lookup(op, "cpu", attrs)
        if kdef is None:
            return None, reason
        return _Strict(kdef), None

    def registered(self, op):
        return bool(kernels.KERNELS.get((op, "cpu")))

    def prepare(self, program):
        from tf_backend.program import passes
        passes.inplace.run(program)     # buffer reuse, recorded by the runtime; no CPU fusion
        return program.finalize()


class _Strict:
    """A CPU kernel over handles: host inputs must be host arrays, the rest handles."""

    def __init__(self, kdef):
        self.kdef, self.name = kdef, f"strict:{kdef.name}"

    def fn(self, inputs, outputs, attrs):
        host = kernels.host_inputs(self.kdef.op, len(inputs))
        ins = []
        for i, a in enumerate(inputs):
            if i in host:
                if not isinstance(a, np.ndarray):
                    raise HostAccess(f"{self.kdef.op} input {i} is a host input but arrived as "
                                     f"{type(a).__name__}")
                ins.append(a)
            elif isinstance(a, Handle):
                ins.append(a._a)
            else:
                raise HostAccess(f"{self.kdef.op} input {i} arrived as {type(a).__name__}, "
                                 f"not a device buffer")
        outs = []
        for o in outputs:
            if not isinstance(o, Handle):
                raise HostAccess(f"{self.kdef.op} output is {type(o).__name__}")
            outs.append(o._a)
        self.kdef.fn(ins, outs, attrs)
