"""The device contract: what the host runtime and loaded programs need from a device.

A device owns memory (buffers), kernels and an order of execution. Buffers are whatever the
device's kernels read and write (numpy arrays on the host, CuPy arrays on a GPU); the runtime
only moves them between kernels, and copies in/out at the edges. TensorFlow-free.
"""
import numpy as np

import kernels


class DeviceError(Exception):
    """A device is unknown, broken, or cannot run what was asked."""


class Capabilities:
    """What a device can do; the runtime asks these instead of naming devices.

    dtypes: numpy dtypes its kernels take; supports_programs: runs whole programs (not only
    single ops); host_memory: buffers are numpy arrays the host can read without a copy (when
    False, the runtime hands kernels their host inputs, kernels.HOST_INPUTS, as host arrays and
    touches nothing else); views: Reshape/Squeeze/ExpandDims are `view`s of a buffer; streams:
    kernels are queued asynchronously (the runtime calls `synchronize` only before a value
    crosses to the host); graphs: `record(body)` captures a run for replay (a CUDA graph).
    """

    __slots__ = ("dtypes", "supports_programs", "host_memory", "views", "streams", "graphs")

    def __init__(self, dtypes, supports_programs=True, host_memory=True, views=True,
                 streams=False, graphs=False):
        self.dtypes = frozenset(np.dtype(d) for d in dtypes)
        self.supports_programs, self.host_memory = supports_programs, host_memory
        self.views, self.streams, self.graphs = views, streams, graphs

    def as_dict(self):
        return {"dtypes": sorted(d.name for d in self.dtypes),
                "supports_programs": self.supports_programs, "host_memory": self.host_memory,
                "views": self.views, "streams": self.streams, "graphs": self.graphs}


class Device:
    """Base class and contract. A device plugin subclasses it and sets `name` and
    `capabilities`; the defaults below suit a device whose buffers are host numpy arrays and
    whose kernels are registered in the shared `kernels` registry under `name`.

    Kernels follow kernels/__init__.py: `fn(inputs, outputs, attrs)` over this device's buffers,
    writing preallocated outputs. `lookup` returns `(kernel, None)` — an object with `.fn` and
    `.name`, e.g. a `kernels.KernelDef` — or `(None, reason)`.
    """

    name = None
    capabilities = Capabilities(())

    def load(self):
        """Import/compile what lookups need (idempotent); called before the first lookup."""
        kernels.load(self.name)

    def allocate(self, shape, dtype):
        """An uninitialised buffer of this shape and dtype."""
        return np.empty(shape, dtype)

    def copy_in(self, array):
        """A buffer holding a host numpy array's data (kernels never write it)."""
        return np.asarray(array)

    def copy_out(self, buffer, owned=False):
        """A host numpy array the caller owns, with the buffer's data. owned: the runtime
        allocated this buffer in this call and nobody else holds it (a host-memory device may
        hand it over without a copy). Waits for queued work that writes the buffer."""
        return np.array(buffer)

    def copy_into(self, buffer, array):
        """Write a host array's data into an existing buffer (recorded runs' inputs)."""
        buffer[...] = array

    def view(self, buffer, shape):
        """The buffer's data in another shape (Reshape/Squeeze/ExpandDims, when
        `capabilities.views`); the runtime never writes through it."""
        return buffer.reshape(shape)

    def record(self, body):
        """Run `body()` once while recording its kernels; returns an object whose `replay()`
        runs them again on the same buffers (only with `capabilities.graphs`)."""
        raise DeviceError(f"device {self.name!r} does not record runs")

    def lookup(self, op, attrs):
        """The kernel for a TensorFlow op type with these canonical attrs: (kernel, None) or
        (None, reason)."""
        return kernels.lookup(op, self.name, attrs)

    def registered(self, op):
        """Does any kernel for `op` exist on this device (whatever the attrs)?"""
        return bool(kernels.KERNELS.get((op, self.name)))

    def synchronize(self):
        """Wait until queued work is done (a no-op for synchronous devices)."""

    def prepare(self, program):
        """Device-specific rewrites of a loaded program (e.g. fusion); returns the program."""
        return program

    def library(self, name):
        """The device's implementation of a service the host runtime asks for by name, or None
        where the device has none (the runtime then does without: no fused loops, no compiled
        regions, no thread holds, nothing kept). Names: "fusion" (generated elementwise loops
        for fused nodes: fusable, plan, build, run, alias_of, build_rows_sum, run_rows_sum,
        splits), "loops" (compiled loops and regions: build, build_region, region_source,
        compile_elsewhere), "blas" (thread holds of BLAS-backed kernels: single_thread_enter/
        exit; choice_stats), "weight_cache" (weight forms kept between calls: stats, clear),
        "compiles" (kernel compiles in the background), "fused_kernels" (bias_relu_product: a
        product with its bias and Relu in one pass, half precision before one rounding;
        max_pool_grad_relu: MaxPoolGrad and the ReluGrad that reads it), "cache" (upkeep of
        the generated kernels' directory: maybe_start), "jit" (the kernel compiler's own set-up,
        done once at start-up before the imports are frozen: prepare_target)."""
        return None

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


REQUIRED = ("name", "capabilities", "load", "allocate", "copy_in", "copy_out", "lookup",
            "synchronize", "prepare")


def check(device, origin):
    """Raise DeviceError unless `device` implements the contract."""
    missing = [a for a in REQUIRED if getattr(device, a, None) is None]
    if missing:
        raise DeviceError(f"device from {origin} does not implement the device contract: "
                          f"missing {', '.join(missing)}")
    if not isinstance(device.capabilities, Capabilities):
        raise DeviceError(f"device from {origin}: capabilities must be a "
                          f"tf_backend.devices.Capabilities")
    return device
