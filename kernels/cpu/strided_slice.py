"""CPU kernels: StridedSlice and StridedSliceGrad, from the shape fns' cached slicing plan."""
import numpy as np

from kernels import kernel
from shape_fns.strided_slice import plan

_copyto = np.copyto


def _plan(xs, inputs, attrs):
    g = attrs.get
    return plan(xs, tuple(inputs[1].tolist()), tuple(inputs[2].tolist()),
                tuple(inputs[3].tolist()), g("begin_mask", 0), g("end_mask", 0),
                g("ellipsis_mask", 0), g("new_axis_mask", 0), g("shrink_axis_mask", 0))


@kernel("StridedSlice")
def strided_slice(inputs, outputs, attrs):
    x = inputs[0]
    sl, proc, _ = _plan(x.shape, inputs, attrs)
    _copyto(outputs[0].reshape(proc), x[sl])


@kernel("StridedSliceGrad")
def strided_slice_grad(inputs, outputs, attrs):
    out = outputs[0]
    sl, proc, _ = _plan(out.shape, inputs, attrs)
    out.fill(0)
    out[sl] = inputs[4].reshape(proc)
