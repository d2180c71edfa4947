"""The CUDA device: CuPy buffers in GPU memory, kernels from kernels/gpu, CUDA-graph replay.

Memory: CuPy's caching pool. Host inputs (kernels.HOST_INPUTS: shapes, axes, paddings) stay on
the host; everything else lives on the GPU and crosses only at copy_in/copy_out. Kernels are
queued on the calling thread's current stream; `copy_out` waits for them. `record(body)` runs
a program body twice on the device's own capture stream: once to size the memory pool, once
under stream capture into a CUDA graph; every allocation made while recording stays with the
graph, so nothing else can be handed the memory a replay writes. At load (`prepare`) inference
batch-norm affines after a product are folded into its weights, and chains of elementwise ops
become one generated kernel. TensorFlow-free.
"""
import numpy as np

import kernels

from .base import Capabilities, Device, DeviceError

class CudaDevice(Device):
    name = "cuda"
    capabilities = Capabilities(("float16", "float32", "float64", "int32", "int64", "bool"),
                                supports_programs=True, host_memory=False, views=True,
                                streams=True, graphs=True)

    def __init__(self):
        self._cp = None

    def load(self):
        if self._cp is not None:
            return
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001 - no CuPy, no driver, no GPU
            raise DeviceError(f"device 'cuda' needs CuPy and an NVIDIA GPU: "
                              f"{type(e).__name__}: {e}") from None
        kernels.load("cuda")
        self._cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def allocate(self, shape, dtype):
        return self._cp.empty(shape, dtype)

    def copy_in(self, array):
        a = np.asarray(array)      # (np.ascontiguousarray would make a 0-d array 1-d)
        return self._cp.asarray(a if a.flags.c_contiguous else a.copy())

    def copy_out(self, buffer, owned=False):
        self.stream.synchronize()          # a replay queued there writes this buffer
        return self._cp.asnumpy(buffer)    # the current stream: waits for its kernels

    def copy_into(self, buffer, array):
        a = np.asarray(array)
        buffer.set(a if a.flags.c_contiguous else a.copy(), stream=self.stream)

    def view(self, buffer, shape):
        return buffer.reshape(shape)

    def synchronize(self):
        self._cp.cuda.get_current_stream().synchronize()

    def lookup(self, op, attrs):
        return kernels.lookup(op, "cuda", attrs)

    def registered(self, op):
        return bool(kernels.KERNELS.get((op, "cuda")))

    def record(self, body):
        cp = self._cp
        pool = cp.get_default_memory_pool()
        keep = []

        def alloc(size):
            m = pool.malloc(size)
            keep.append(m)
            return m

        cp.cuda.Device().synchronize()
        with self.stream, cp.cuda.using_allocator(alloc):
            body()                         # sizes the pool for this stream
        self.stream.synchronize()
        keep.clear()
        with self.stream, cp.cuda.using_allocator(alloc):
            self.stream.begin_capture()
            try:
                body()
            finally:
                graph = self.stream.end_capture()
        return _Graph(graph, self.stream, keep)

    def prepare(self, program):
        from . import cuda_passes
        cuda_passes.fold_affine(program, self)
        program.finalize()
        cuda_passes.fuse_elementwise(program, self)
        program.finalize()
        from ..program.passes import inplace
        inplace.run(program)
        return program


class _Graph:
    __slots__ = ("graph", "stream", "keep")

    def __init__(self, graph, stream, keep):
        self.graph, self.stream, self.keep = graph, stream, keep

    def replay(self):
        self.graph.launch(self.stream)
