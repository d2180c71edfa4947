"""CPU kernels: array ops (data movement and shape queries), type-generic through numpy.

The shape fn has validated the inputs and sized the outputs before a kernel runs; kernels
recompute only what they need (cheap host lists) and write every output element.
Index-driven ops (Slice, Pad, Tile, Gather, StridedSlice, segment sums) are in
`array_index_ops.py`, imported at the end.
"""
import numpy as np

from kernels import kernel
from shape_fns.array_ops import broadcast_reduce_axes
from shape_fns.errors import InvalidArgumentError

_copyto = np.copyto


@kernel("Reshape", "Identity", "ExpandDims", "Squeeze", "StopGradient")
def reshape(inputs, outputs, attrs):
    out = outputs[0]
    _copyto(out, inputs[0].reshape(out.shape))


@kernel("Transpose")
def transpose(inputs, outputs, attrs):
    _copyto(outputs[0], inputs[0].transpose(inputs[1].tolist()))


@kernel("InvertPermutation", dtypes=("int32", "int64"))
def invert_permutation(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    n = x.shape[0]
    seen = [False] * n
    for p in x.tolist():
        if not 0 <= p < n:
            raise InvalidArgumentError(f"InvertPermutation: {p} is not between 0 and {n}")
        if seen[p]:
            raise InvalidArgumentError(f"InvertPermutation: {p} is duplicated in the input")
        seen[p] = True
    out[x] = np.arange(n, dtype=out.dtype)


@kernel("ConcatV2")
def concat_v2(inputs, outputs, attrs):
    np.concatenate(inputs[:-1], axis=int(inputs[-1].reshape(-1)[0]), out=outputs[0])


@kernel("ConcatOffset", type_attr=None)
def concat_offset(inputs, outputs, attrs):
    dim = int(inputs[0])
    shapes = [s.tolist() for s in inputs[1:]]
    r = len(shapes[0])
    if not -r <= dim < r:
        raise InvalidArgumentError(f"ConcatOffset: concat dim is out of range: {dim} vs. {r}")
    if dim < 0:
        dim += r
    offset = 0
    for k, (s, out) in enumerate(zip(shapes, outputs)):
        if len(s) != r:
            raise InvalidArgumentError(
                f"ConcatOffset: input {k} should contain {r} elements, but got {len(s)}")
        for i in range(r):
            if i != dim and s[i] != shapes[0][i]:
                raise InvalidArgumentError(
                    f"ConcatOffset: all dimensions except {dim} must match. Input {k} has shape "
                    f"{s} and doesn't match input 0 with shape {shapes[0]}")
        out.fill(0)
        out[dim] = offset
        offset += s[dim]


@kernel("Pack")
def pack(inputs, outputs, attrs):
    np.stack(inputs, axis=attrs.get("axis", 0), out=outputs[0])


@kernel("Unpack")
def unpack(inputs, outputs, attrs):
    if outputs:
        x = np.moveaxis(inputs[0], attrs.get("axis", 0), 0)
        for i, out in enumerate(outputs):
            _copyto(out, x[i])


@kernel("Split")
def split(inputs, outputs, attrs):
    x = inputs[1]
    axis = int(inputs[0])
    axis = axis + x.ndim if axis < 0 else axis
    n = outputs[0].shape[axis]
    _split(x, axis, [n] * len(outputs), outputs)


@kernel("SplitV")
def split_v(inputs, outputs, attrs):
    x = inputs[0]
    axis = int(inputs[2].reshape(-1)[0])
    axis = axis + x.ndim if axis < 0 else axis
    _split(x, axis, [o.shape[axis] for o in outputs], outputs)


def _split(x, axis, sizes, outputs):
    pre = (slice(None),) * axis
    start = 0
    for n, out in zip(sizes, outputs):
        _copyto(out, x[pre + (slice(start, start + n),)])
        start += n


@kernel("Fill")
def fill(inputs, outputs, attrs):
    outputs[0].fill(inputs[1].reshape(-1)[0])


@kernel("ZerosLike")
def zeros_like(inputs, outputs, attrs):
    outputs[0].fill(0)


@kernel("OnesLike")
def ones_like(inputs, outputs, attrs):
    outputs[0].fill(1)


@kernel("Shape", type_attr=None)
def shape(inputs, outputs, attrs):
    outputs[0][:] = inputs[0].shape


@kernel("ShapeN", type_attr=None)
def shape_n(inputs, outputs, attrs):
    for x, out in zip(inputs, outputs):
        out[:] = x.shape


@kernel("Size", type_attr=None)
def size(inputs, outputs, attrs):
    outputs[0][...] = inputs[0].size


@kernel("Rank", type_attr=None)
def rank(inputs, outputs, attrs):
    outputs[0][...] = inputs[0].ndim


@kernel("BroadcastTo")
def broadcast_to(inputs, outputs, attrs):
    _copyto(outputs[0], inputs[0])


@kernel("BroadcastGradientArgs", dtypes=("int32", "int64"))
def broadcast_gradient_args(inputs, outputs, attrs):
    r0, r1 = broadcast_reduce_axes(inputs[0].tolist(), inputs[1].tolist())
    outputs[0][:] = r0
    outputs[1][:] = r1


from . import array_index_ops  # noqa: E402,F401  (registration on import)
