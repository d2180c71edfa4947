"""The CPU device: numba/numpy/BLAS kernels from kernels/cpu, 64-byte aligned host buffers."""
import importlib
import os

import numpy as np

import kernels

from .. import alloc
from .base import Capabilities, Device

# Device passes run on a loaded program (the host runtime runs them in passes.optimize).
LOAD_PASSES = ("fuse_elementwise", "epilogue", "inplace")
# The services the host runtime asks the device for (base.Device.library)
LIBRARIES = {"fusion": "kernels.cpu.fusion", "loops": "kernels.cpu.loops",
             "blas": "kernels.cpu.gemm", "weight_cache": "kernels.cpu.filter_cache",
             "compiles": "kernels.cpu.deferred", "fused_kernels": "kernels.cpu.fused_kernels",
             "cache": "kernels.cache_prune", "jit": "kernels.cpu.jit"}

# The host CPU path (executor.py, its generated drivers, memo nodes) keeps the CPU device's
# buffers, numpy arrays, next to TensorFlow's tensors in one slot list, and decides in-place
# reuse per call: a value may be written only while it is a buffer of ours that nobody else sees
# (TensorFlow's memory, constants, views and memoised values are made read-only). These tests
# are the CPU device's own; programs on any device through the runtime's core
# (runtime/program.py) record ownership per slot instead.
BUFFER = np.ndarray


def writable(v):
    """May the host CPU path write `v` in place?"""
    return type(v) is BUFFER and v.flags.writeable


def writable_expr(name):
    """`writable` inline, for generated drivers (which bind ND to BUFFER)."""
    return f"(type({name}) is ND and {name}.flags.writeable)"


def shared(v):
    """A buffer of ours as a read-only view (kept and handed out again: never written); other
    values as they are."""
    if type(v) is BUFFER:
        v = v.view()
        v.flags.writeable = False
    return v


class CpuDevice(Device):
    name = "cpu"
    capabilities = Capabilities(
        ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
         "uint32", "uint64", "bool"),
        supports_programs=True, host_memory=True, views=True, streams=False)

    def load(self):
        kernels.load("cpu")

    def allocate(self, shape, dtype):
        return alloc.empty(shape, dtype)

    def copy_in(self, array):
        # zero-copy and read-only: kernels, views and in-place reuse never write the caller's data
        a = np.asarray(array)
        a = a.view() if a.flags.c_contiguous else a.copy(order="C")
        a.flags.writeable = False
        return a

    def copy_out(self, buffer, owned=False):
        # an owned buffer was allocated by this call and is handed over; anything else (a
        # constant, a view of the caller's input) is shared and gets copied
        return buffer if owned else np.array(buffer)

    def view(self, buffer, shape):
        a = buffer
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a) if a.ndim else a.copy()
        v = a.reshape(shape)
        # read-only: the buffer may still be read through its other name (the inplace pass
        # counts readers per slot, and the runtime records a view as borrowed)
        v.flags.writeable = False
        return v

    def lookup(self, op, attrs):
        return kernels.lookup(op, "cpu", attrs)

    def library(self, name):
        mod = LIBRARIES.get(name)
        return None if mod is None else importlib.import_module(mod)

    def prepare(self, program):
        from ..program import passes
        off = {p.strip() for p in os.environ.get("TF_BACKEND_DISABLE_PASSES", "").split(",")}
        for name in LOAD_PASSES:
            if name not in off:
                getattr(passes, name).run(program)
                program.finalize()
        return program

