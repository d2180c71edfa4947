"""CPU kernels: array ops (data movement and shape queries), type-generic through numpy.

The shape fn has validated the inputs and sized the outputs before a kernel runs; kernels
recompute only what they need (cheap host lists) and write every output element.
Joining/splitting is in `array_concat_ops.py`, index-driven ops in `array_index_ops.py` and
`strided_slice.py`; all are imported at the end.
"""
import numpy as np

from kernels import kernel, view
from shape_fns.array_ops import broadcast_reduce_axes
from shape_fns.errors import InvalidArgumentError

_copyto = np.copyto


@kernel("Reshape", "Identity", "ExpandDims", "Squeeze", "StopGradient")
def reshape(inputs, outputs, attrs):
    out = outputs[0]
    _copyto(out, inputs[0].reshape(out.shape))


@view("Reshape", "Squeeze", "ExpandDims")
def reshape_view(inputs, out_specs, attrs):
    a = inputs[0]
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a) if a.ndim else a.copy()
    return [a.reshape(out_specs[0].shape)]


@kernel("Bitcast", dtypes=("float16", "bfloat16", "float32", "float64", "int8", "int16",
                           "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
def bitcast(inputs, outputs, attrs):
    """The input's bytes as the output's type (the shape fn sized the output)."""
    out = outputs[0]
    if out.size:
        out.reshape(-1).view(np.uint8)[...] = \
            np.ascontiguousarray(inputs[0]).reshape(-1).view(np.uint8)


@kernel("Transpose")
def transpose(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    perm = inputs[1].tolist()
    if x.size < _BIG_TRANSPOSE:
        _copyto(out, x.transpose(perm))
        return
    shape, perm = _collapse(x.shape, perm)
    x = x.reshape(shape)
    if perm == [1, 0]:
        _transpose_batch(x[None], out.reshape(1, shape[1], shape[0]))
    elif perm == [0, 2, 1]:
        _transpose_batch(x, out.reshape(shape[0], shape[2], shape[1]))
    else:
        _copyto(out.reshape([shape[p] for p in perm]), x.transpose(perm))


_BIG_TRANSPOSE = 1 << 15


def _collapse(shape, perm):
    """Equivalent (shape, perm) with size-1 axes dropped and axes that stay adjacent merged."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    if len(keep) < len(shape):
        pos = {a: i for i, a in enumerate(keep)}
        perm = [pos[p] for p in perm if p in pos]
        shape = [shape[a] for a in keep]
    groups = []
    for p in perm:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = []
    for g in order:
        n = 1
        for a in groups[g]:
            n *= shape[a]
        new_shape.append(n)
    pos = {g: i for i, g in enumerate(order)}
    return new_shape, [pos[g] for g in range(len(groups))]


def _transpose_batch(x, out):
    """out[b] = x[b].T. numpy's element-wise strided copy thrashes the cache when both dims
    are wide; copying bands of one output cache line at a time keeps reads and writes local."""
    rows, cols = x.shape[1], x.shape[2]
    if cols * x.itemsize < 1024:
        _copyto(out, x.transpose(0, 2, 1))
        return
    band = max(64 // x.itemsize, 1)
    for b in range(x.shape[0]):
        xb, ob = x[b], out[b]
        for i in range(0, rows, band):
            _copyto(ob[:, i:i + band], xb[i:i + band].T)


@kernel("InvertPermutation", dtypes=("int32", "int64"))
def invert_permutation(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    n = x.shape[0]
    seen = [False] * n
    for p in x.tolist():
        if not 0 <= p < n:
            raise InvalidArgumentError(f"InvertPermutation: {p} is not between 0 and {n}")
        if seen[p]:
            raise InvalidArgumentError(f"{p} is duplicated in the input.")
        seen[p] = True
    out[x] = np.arange(n, dtype=out.dtype)


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


# Registration happens on import.


# TensorFlow's CPU kernels take real numbers only (no bool: NotFoundError, theirs)
REAL = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
        "uint16", "uint32", "uint64")


@kernel("SpaceToBatchND", dtypes=REAL)
def space_to_batch_nd(inputs, outputs, attrs):
    """Pad the block dims, split each into (size / block, block), move the blocks in front of
    the batch, flatten them into it: TensorFlow's definition, as numpy views and one copy."""
    x, block, pads = inputs
    out = outputs[0]
    if out.size == 0:
        return
    b = [int(v) for v in np.asarray(block).reshape(-1)]
    p = np.asarray(pads).reshape(-1, 2)
    m = len(b)
    padded = np.pad(x, [(0, 0)] + [(int(lo), int(hi)) for lo, hi in p]
                    + [(0, 0)] * (x.ndim - 1 - m))
    split = [x.shape[0]]
    for i, k in enumerate(b):
        split += [padded.shape[1 + i] // k, k]
    rest = list(x.shape[1 + m:])
    r = padded.reshape(split + rest)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + \
        list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    np.copyto(out, r.transpose(perm).reshape(out.shape))


@kernel("BatchToSpaceND", dtypes=REAL)
def batch_to_space_nd(inputs, outputs, attrs):
    """The inverse: blocks out of the batch, interleaved back into each block dim, cropped."""
    x, block, crops = inputs
    out = outputs[0]
    if out.size == 0:
        return
    b = [int(v) for v in np.asarray(block).reshape(-1)]
    c = np.asarray(crops).reshape(-1, 2)
    m = len(b)
    n = x.shape[0] // int(np.prod(b))
    rest = list(x.shape[1 + m:])
    r = x.reshape(b + [n] + list(x.shape[1:]))
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + \
        list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    full = r.transpose(perm).reshape([n] + [x.shape[1 + i] * b[i] for i in range(m)] + rest)
    sl = [slice(None)] + [slice(int(lo), full.shape[1 + i] - int(hi))
                          for i, (lo, hi) in enumerate(c)]
    np.copyto(out, full[tuple(sl)])


@kernel("DepthToSpace")
def depth_to_space(inputs, outputs, attrs):
    """NHWC: out[n, h*b + i, w*b + j, c] = x[n, h, w, (i*b + j)*C' + c], one copy."""
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    b = attrs["block_size"]
    n, h, w, c = x.shape
    np.copyto(out, x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
              .reshape(out.shape))


@kernel("SpaceToDepth")
def space_to_depth(inputs, outputs, attrs):
    """The inverse: each b x b block of pixels becomes b*b*C channels."""
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    b = attrs["block_size"]
    n, h, w, c = x.shape
    np.copyto(out, x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
              .reshape(out.shape))
