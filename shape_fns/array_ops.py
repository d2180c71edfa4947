"""Shape functions: array ops (reshape family, transpose, fill, shape queries, broadcasting).

Joining/splitting lives in `array_concat_ops.py`; slicing, padding, tiling and gathering in
`array_index_ops.py`; StridedSlice in `strided_slice.py`. They are imported at the end so that
loading this module registers them all.
"""
import numpy as np

from .common import unknown
from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import DTYPE_TO_ENUM, Spec, fmt_shape

I32 = np.dtype(np.int32)


def _vec(spec, what, op, stock=None):
    """Host value of a shape-like input as a list of ints (None when unknown); must be 1-D.
    `stock`: the name stock's message gives the input (then its words are used)."""
    sh = spec.shape
    if sh is not None and len(sh) != 1:
        if stock:
            raise InvalidArgumentError(f"{stock} input must be 1-D, not {fmt_shape(sh)}")
        raise InvalidArgumentError(f"{op}: {what} must be 1-D, got shape {fmt_shape(sh)}")
    v = spec.value
    return None if v is None else v.tolist()


def _scalar(spec, what, op, allow_one=False):
    """Host value of a scalar int input (None when unknown); `allow_one` also takes shape [1]."""
    sh = spec.shape
    if sh is not None and sh != () and not (allow_one and sh in ((1,), (None,))):
        raise InvalidArgumentError(f"{op}: {what} must be a scalar, got shape {fmt_shape(sh)}")
    v = spec.value
    if v is None:
        return None
    if v.size != 1:
        raise InvalidArgumentError(f"{op}: {what} must be a scalar, got shape {fmt_shape(v.shape)}")
    return int(v.item())


def _num(shape):
    """Element count of a shape, None when not fully known."""
    if shape is None:
        return None
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n


def _merge(a, b):
    return b if a is None else a


def _axis(axis, rank, op, what="axis"):
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{op}: {what} = {axis} not in [{-rank}, {rank})")
    return axis + rank if axis < 0 else axis


# --- Bitcast -------------------------------------------------------------------------------

@shape_fn("Bitcast", value_free=True)
def bitcast(inputs, attrs):
    """The same bytes as another type: equal sizes keep the shape, a narrower type adds a last
    dim of the size ratio, a wider one needs (and removes) that last dim."""
    x = inputs[0]
    if attrs.get("T") is None or attrs.get("type") is None:   # complex, quantized: TensorFlow's
        raise Unsupported("dtype")
    src, dst = np.dtype(attrs["T"]), np.dtype(attrs["type"])
    a, b = src.itemsize, dst.itemsize
    if x.shape is None:
        return [Spec(None, dst)]
    if a == b:
        return [Spec(x.shape, dst)]
    if a > b:
        return [Spec(x.shape + (a // b,), dst)]
    if not x.shape or x.shape[-1] not in (None, b // a):
        raise InvalidArgumentError(f"Cannot bitcast from {DTYPE_TO_ENUM.get(src, src)} to "
                                   f"{DTYPE_TO_ENUM.get(dst, dst)}")
    return [Spec(x.shape[:-1], dst)]


# --- reshape family ------------------------------------------------------------------------

@shape_fn("Reshape")
def reshape(inputs, attrs):
    x, s = inputs
    if s.shape == ():   # TensorFlow's kernel still takes a scalar shape as one dim (eager only:
        s = Spec((1,), s.dtype, None if s.value is None else s.value.reshape(1))   # graphs refuse)
    dims = _vec(s, "shape", "Reshape", stock="sizes")
    if dims is None:
        return [unknown(x.dtype, s.shape[0] if s.shape else None)]
    wild = -1
    product, has_zero = 1, False
    for i, d in enumerate(dims):
        if d == -1:
            if wild != -1:
                raise InvalidArgumentError(
                    f"Only one input size may be -1, not both {wild} and {i}")
            wild = i
        elif d < 0:
            raise InvalidArgumentError(f"Size {i} must be non-negative, not {d}")
        elif d == 0:
            has_zero = True
        else:
            product *= d
    xs = x.shape
    if xs is None or None in xs:
        if wild != -1:
            dims[wild] = None
        return [Spec(dims, x.dtype)]
    # TensorFlow's rule: zero dims of the input are left out of the count when the requested
    # shape has a zero too, so that [-1, 0] and [0, -1] still infer the other dim.
    n = 1
    for d in xs:
        if d > 0 or not has_zero:
            n *= d
    if wild != -1:
        missing = n // product
        if missing * product != n:
            raise InvalidArgumentError(   # stock's words first (tests match them), then ours
                f"Input to reshape is a tensor with {n} values, but the requested shape "
                f"requires a multiple of {product} (input {fmt_shape(xs)}, requested "
                f"{fmt_shape(dims)})")
        dims[wild] = missing
    total = 1
    for d in dims:
        total *= d
    n = 1
    for d in xs:
        n *= d
    if total != n:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor with {n} values, but the requested shape has "
            f"{total} (input {fmt_shape(xs)}, requested {fmt_shape(dims)})")
    return [Spec(dims, x.dtype)]


@shape_fn("Identity", "ZerosLike", "OnesLike", "StopGradient", value_free=True)
def same(inputs, attrs):
    x = inputs[0]
    return [Spec(x.shape, x.dtype)]


@shape_fn("ExpandDims")
def expand_dims(inputs, attrs):
    x, a = inputs
    v = a.value
    if (v.size if v is not None else _num(a.shape)) not in (1, None):
        raise InvalidArgumentError(
            f"ExpandDims: 'dim' must be a tensor with a single value, got shape {fmt_shape(a.shape)}")
    xs = x.shape
    if xs is None:
        return [Spec(None, x.dtype)]
    r = len(xs)
    if v is None:
        return [Spec((None,) * (r + 1), x.dtype)]
    axis = int(v.item())
    if not -r - 1 <= axis <= r:
        raise InvalidArgumentError(
            f"Tried to expand dim index {axis} for tensor with {len(xs)} dimensions. "
            f"(input {fmt_shape(xs)})")
    if axis < 0:
        axis += r + 1
    return [Spec(xs[:axis] + (1,) + xs[axis:], x.dtype)]


# Not value_free: Keras hands squeeze_dims as an (unhashable) TrackedList, which the spec
# cache cannot key on.
@shape_fn("Squeeze")
def squeeze(inputs, attrs):
    x = inputs[0]
    xs = x.shape
    axes = attrs.get("squeeze_dims") or ()
    if xs is None:
        return [Spec(None, x.dtype)]
    r = len(xs)
    if not axes:
        if None in xs:
            return [Spec(None, x.dtype)]
        return [Spec(tuple(d for d in xs if d != 1), x.dtype)]
    drop = set()
    for a in axes:
        if not -r <= a < r:
            raise InvalidArgumentError(
                f"Tried to squeeze dim index {a} for tensor with {r} dimensions. "
                f"(input {fmt_shape(xs)})")
        if a < 0:
            a += r
        if xs[a] is not None and xs[a] != 1:
            raise InvalidArgumentError(
                f"Can not squeeze dim[{a}], expected a dimension of 1, got {xs[a]} "
                f"(input {fmt_shape(xs)})")
        drop.add(a)
    return [Spec(tuple(d for i, d in enumerate(xs) if i not in drop), x.dtype)]


@shape_fn("Transpose")
def transpose(inputs, attrs):
    x, p = inputs
    perm = _vec(p, "perm", "Transpose")
    xs = x.shape
    if perm is None:
        n = len(xs) if xs is not None else (p.shape[0] if p.shape else None)
        return [Spec(None if n is None else (None,) * n, x.dtype)]
    if xs is None:
        return [Spec((None,) * len(perm), x.dtype)]
    return [Spec(tuple(xs[i] for i in check_perm(perm, len(xs), "Transpose")), x.dtype)]


def check_perm(perm, r, op):
    """Normalised permutation (negative entries count from the end, as TensorFlow allows)."""
    if len(perm) != r:
        raise InvalidArgumentError(
            f"{op.lower()} expects a vector of size {r}. But input(1) is a vector of size "
            f"{len(perm)}")
    out = [p + r if p < 0 else p for p in perm]
    seen = [False] * r
    for p in out:
        if not 0 <= p < r:
            raise InvalidArgumentError(f"{op}: {p} is out of range [0 .. {r}) in perm {perm}")
        seen[p] = True
    if not all(seen):   # stock's words: the first index missing, the perm as given
        missing = seen.index(False)
        raise InvalidArgumentError(
            f"{missing} is missing from {{{','.join(str(p) for p in out)}}}.")
    return out


@shape_fn("InvertPermutation", value_free=True)
def invert_permutation(inputs, attrs):
    x = inputs[0]
    if x.shape is not None and len(x.shape) != 1:
        raise InvalidArgumentError(
            f"invert_permutation expects a 1D vector. (got shape {fmt_shape(x.shape)})")
    return [Spec(x.shape or (None,), x.dtype)]


# --- creation and shape queries --------------------------------------------------------------

@shape_fn("Fill")
def fill(inputs, attrs):
    d, v = inputs
    if d.shape is not None and len(d.shape) > 1:
        raise InvalidArgumentError(f"dims must represent a vector, got shape "
                                   f"{fmt_shape(d.shape)} (Fill)")
    if v.shape not in ((), (1,), (None,), None):  # TensorFlow also takes a 1-element vector
        raise InvalidArgumentError(f"value must represent a scalar, got shape {fmt_shape(v.shape)}")
    dims = d.value
    if dims is None:
        n = d.shape[0] if d.shape and len(d.shape) == 1 else None
        return [Spec(None if n is None else (None,) * n, v.dtype)]
    dims = dims.reshape(-1).tolist()
    for x in dims:
        if x < 0:
            raise InvalidArgumentError(f"Dimension {x} must be >= 0 (dims {dims})")
    return [Spec(dims, v.dtype)]


@shape_fn("Shape", value_free=True)
def shape(inputs, attrs):
    s = inputs[0].shape
    return [Spec((None if s is None else len(s),), attrs.get("out_type") or I32)]


@shape_fn("ShapeN", value_free=True)
def shape_n(inputs, attrs):
    if not inputs:  # TensorFlow's Python wrapper fails (IndexError) before any kernel
        raise Unsupported("attr:N=0")
    dt = attrs.get("out_type") or I32
    return [Spec((None if x.shape is None else len(x.shape),), dt) for x in inputs]


@shape_fn("Size", value_free=True)
def size(inputs, attrs):
    return [Spec((), attrs.get("out_type") or I32)]


@shape_fn("Rank", value_free=True)
def rank(inputs, attrs):
    return [Spec((), I32)]


def _broadcastable(a, b):
    return all(x == y or x == 1 or y == 1 for x, y in zip(a[::-1], b[::-1]))


@shape_fn("BroadcastTo")
def broadcast_to(inputs, attrs):
    x, s = inputs
    if s.shape is not None and len(s.shape) != 1:
        raise InvalidArgumentError(f"shape must be a vector of {{int32,int64}}, got shape "
                                   f"{fmt_shape(s.shape)} (BroadcastTo)")
    dims = _vec(s, "shape", "BroadcastTo")
    xs = x.shape
    if dims is None:
        return [unknown(x.dtype, s.shape[0] if s.shape else None)]
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0 (BroadcastTo to {dims})")
    if xs is not None:
        if len(xs) > len(dims):
            raise InvalidArgumentError(
                f"Rank of input ({len(xs)}) must be no greater than rank of output shape "
                f"({len(dims)}). (input {fmt_shape(xs)}, output {fmt_shape(dims)})")
        for a, b in zip(xs[::-1], dims[::-1]):
            if a is not None and a != b and a != 1:
                # stock's BCast: shapes that broadcast together, to another shape than the
                # target, and shapes that do not broadcast at all are worded differently
                raise InvalidArgumentError(
                    f"Unable to broadcast tensor of shape {fmt_shape(xs)} to tensor of shape "
                    f"{fmt_shape(dims)} (BroadcastTo)" if _broadcastable(xs, dims) else
                    f"Incompatible shapes: {fmt_shape(xs)} vs. {fmt_shape(dims)} (BroadcastTo)")
    return [Spec(dims, x.dtype)]


def broadcast_reduce_axes(s0, s1):
    """TensorFlow's BroadcastGradientArgs: the axes each input's gradient sums over."""
    n = max(len(s0), len(s1))
    a = [1] * (n - len(s0)) + list(s0)
    b = [1] * (n - len(s1)) + list(s1)
    r0, r1 = [], []
    for i in range(n):
        x, y = a[i], b[i]
        if x != y and x != 1 and y != 1:
            raise InvalidArgumentError(f"Incompatible shapes: {fmt_shape(s0)} vs. {fmt_shape(s1)}")
        if x == 1:
            r0.append(i)
        if y == 1:
            r1.append(i)
    return r0, r1


@shape_fn("BroadcastGradientArgs")
def broadcast_gradient_args(inputs, attrs):
    s0, s1 = inputs
    for i, s in enumerate(inputs):
        if s.shape is not None and len(s.shape) != 1:
            raise InvalidArgumentError(
                f"In[{i}] must be a vector.{fmt_shape(s.shape)}")
    dt = s0.dtype
    if s0.value is None or s1.value is None:
        return [Spec((None,), dt), Spec((None,), dt)]
    r0, r1 = broadcast_reduce_axes(s0.value.tolist(), s1.value.tolist())
    return [Spec((len(r0),), dt), Spec((len(r1),), dt)]


# Registration happens on import.


# SpaceToBatchND / BatchToSpaceND: ours for well-formed inputs; any malformed block shape,
# paddings/crops or divisibility goes back to TensorFlow (Unsupported), whose kernel words it.

def _blocks(block, pads, x, op):
    """(block sizes, [(before, after)]) from the host inputs, or None when a value is unknown."""
    if block.value is None or pads.value is None or x.shape is None:
        return None
    b = np.asarray(block.value)
    p = np.asarray(pads.value)
    m = b.size
    if b.ndim != 1 or p.shape != (m, 2) or len(x.shape) < 1 + m or (b < 1).any() or (p < 0).any():
        raise Unsupported(f"{op}: malformed block_shape/paddings")
    return [int(v) for v in b], [(int(lo), int(hi)) for lo, hi in p]


@shape_fn("SpaceToBatchND")
def space_to_batch_nd(inputs, attrs):
    x, block, pads = inputs
    bp = _blocks(block, pads, x, "SpaceToBatchND")
    if bp is None:
        return [unknown(x.dtype, None if x.shape is None else len(x.shape))]
    b, p = bp
    shape = list(x.shape)
    out = [None if shape[0] is None else shape[0] * int(np.prod(b))]
    for i, (k, (lo, hi)) in enumerate(zip(b, p)):
        d = shape[1 + i]
        if d is None:
            out.append(None)
            continue
        if (d + lo + hi) % k:
            raise Unsupported("SpaceToBatchND: padded size not divisible by the block size")
        out.append((d + lo + hi) // k)
    return [Spec(tuple(out + shape[1 + len(b):]), x.dtype)]


@shape_fn("BatchToSpaceND")
def batch_to_space_nd(inputs, attrs):
    x, block, crops = inputs
    bp = _blocks(block, crops, x, "BatchToSpaceND")
    if bp is None:
        return [unknown(x.dtype, None if x.shape is None else len(x.shape))]
    b, c = bp
    shape = list(x.shape)
    n = int(np.prod(b))
    if shape[0] is not None and shape[0] % n:
        raise Unsupported("BatchToSpaceND: batch not divisible by the block sizes")
    out = [None if shape[0] is None else shape[0] // n]
    for i, (k, (lo, hi)) in enumerate(zip(b, c)):
        d = shape[1 + i]
        if d is None:
            out.append(None)
            continue
        if d * k - lo - hi < 0:
            raise Unsupported("BatchToSpaceND: crops larger than the block")
        out.append(d * k - lo - hi)
    return [Spec(tuple(out + shape[1 + len(b):]), x.dtype)]


def _depth_block(x, attrs, op):
    """(N, H, W, C, b) of an NHWC DepthToSpace/SpaceToDepth; anything else goes back to
    TensorFlow (NCHW layouts, small blocks, ranks), whose kernel words the error."""
    b = attrs.get("block_size")
    if attrs.get("data_format", "NHWC") != "NHWC" or b is None or b < 2:
        raise Unsupported(f"{op}: layout or block_size")
    if x.shape is None:
        return None
    if len(x.shape) != 4:
        raise Unsupported(f"{op}: rank")
    return (*x.shape, b)


@shape_fn("DepthToSpace", value_free=True)
def depth_to_space(inputs, attrs):
    x = inputs[0]
    g = _depth_block(x, attrs, "DepthToSpace")
    if g is None:
        return [unknown(x.dtype, 4)]
    n, h, w, c, b = g
    if c is not None and c % (b * b):
        raise Unsupported("DepthToSpace: depth not divisible by block_size squared")
    return [Spec((n, None if h is None else h * b, None if w is None else w * b,
                  None if c is None else c // (b * b)), x.dtype)]


@shape_fn("SpaceToDepth", value_free=True)
def space_to_depth(inputs, attrs):
    x = inputs[0]
    g = _depth_block(x, attrs, "SpaceToDepth")
    if g is None:
        return [unknown(x.dtype, 4)]
    n, h, w, c, b = g
    if (h is not None and h % b) or (w is not None and w % b):
        raise Unsupported("SpaceToDepth: height or width not divisible by block_size")
    return [Spec((n, None if h is None else h // b, None if w is None else w // b,
                  None if c is None else c * b * b), x.dtype)]
