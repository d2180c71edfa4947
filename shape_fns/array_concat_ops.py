"""Shape functions: joining and splitting (ConcatV2, ConcatOffset, Pack, Unpack, Split, SplitV)."""
from .array_ops import _axis, _merge, _scalar
from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape


def _concat_shape(shapes, axis, op):
    """Output shape of concatenating `shapes` (all known rank) along a normalised axis."""
    out = list(shapes[0])
    for s in shapes[1:]:
        for i, d in enumerate(s):
            if i == axis:
                out[i] = None if out[i] is None or d is None else out[i] + d
            elif out[i] is None:
                out[i] = d
            elif d is not None and d != out[i]:
                raise InvalidArgumentError(
                    f"ConcatOp : Dimension {i} in both shapes must be equal: shape[0] = "
                    f"{fmt_shape(shapes[0])} vs. shape[{shapes.index(s)}] = {fmt_shape(s)}")
    return tuple(out)


@shape_fn("ConcatV2")
def concat_v2(inputs, attrs):
    values, a = inputs[:-1], inputs[-1]
    if not values:  # TensorFlow's Python wrapper fails (IndexError) before any kernel
        raise Unsupported("attr:N=0")
    if len(values) < 2:  # the OpDef minimum, which TensorFlow checks before the kernel
        raise InvalidArgumentError(
            f"Value for attr 'N' of {len(values)} must be at least minimum 2 (ConcatV2)")
    dt = values[0].dtype
    axis = _scalar(a, "axis", "ConcatV2", allow_one=True)
    shapes = [v.shape for v in values]
    if axis is not None and None not in shapes:  # the eager case, kept short
        s0 = shapes[0]
        r = len(s0)
        if r and -r <= axis < r:
            ax = axis % r
            pre, post = s0[:ax], s0[ax + 1:]
            total = 0
            for s in shapes:
                if len(s) != r or s[:ax] != pre or s[ax + 1:] != post or s[ax] is None:
                    break
                total += s[ax]
            else:
                return [Spec(pre + (total,) + post, dt)]
    shapes = [s for s in shapes if s is not None]
    if not shapes:
        return [Spec(None, dt)]
    r = len(shapes[0])
    for s in shapes:
        if len(s) != r:
            raise InvalidArgumentError(
                f"ConcatOp : Ranks of all input tensors should match: shape[0] = "
                f"{fmt_shape(shapes[0])} vs. shape[{shapes.index(s)}] = {fmt_shape(s)}")
    if r == 0:
        raise InvalidArgumentError(
            "ConcatOp : Can't concatenate scalars (use tf.stack instead) (ConcatV2)")
    if axis is None:
        return [Spec((None,) * r, dt)]
    if not -r <= axis < r:
        raise InvalidArgumentError(
            f"ConcatOp : Expected concatenating dimensions in the range [{-r}, {r}), but got "
            f"{axis} (ConcatV2 of rank-{r} inputs)")
    if axis < 0:
        axis += r
    out = _concat_shape(shapes, axis, "ConcatV2")
    if len(shapes) < len(values):  # some inputs of unknown rank: the concat dim is unknown
        out = out[:axis] + (None,) + out[axis + 1:]
    return [Spec(out, dt)]


@shape_fn("ConcatOffset", value_free=True)
def concat_offset(inputs, attrs):
    d = inputs[0]
    if d.shape is not None and d.shape != ():
        raise InvalidArgumentError(
            f"Concat dim tensor should be a scalar integer, but got shape {fmt_shape(d.shape)} "
            "(ConcatOffset)")
    out = []
    for s in inputs[1:]:
        if s.shape is not None and len(s.shape) != 1:
            raise InvalidArgumentError(
                f"ConcatOffset: shapes must be vectors, got shape {fmt_shape(s.shape)}")
        out.append(Spec(s.shape or (None,), s.dtype))
    return out


@shape_fn("Pack", value_free=True)
def pack(inputs, attrs):
    if not inputs:
        raise Unsupported("attr:N=0")
    dt = inputs[0].dtype
    shape = None
    for k, v in enumerate(inputs):
        s = v.shape
        if s is None:
            continue
        if shape is None:
            shape, first = list(s), k
            continue
        if len(s) != len(shape) or any(
                a is not None and b is not None and a != b for a, b in zip(shape, s)):
            raise InvalidArgumentError(
                f"Shapes of all inputs must match: values[{first}].shape = {fmt_shape(shape)} "
                f"!= values[{k}].shape = {fmt_shape(s)}")
        shape = [_merge(a, b) for a, b in zip(shape, s)]
    if shape is None:
        return [Spec(None, dt)]
    r = len(shape) + 1
    axis = _axis(attrs.get("axis", 0), r, "Pack")
    shape.insert(axis, len(inputs))
    return [Spec(shape, dt)]


@shape_fn("Unpack", value_free=True)
def unpack(inputs, attrs):
    x = inputs[0]
    num = attrs["num"]
    xs = x.shape
    if xs is None:
        return [Spec(None, x.dtype)] * num
    axis = _axis(attrs.get("axis", 0), len(xs), "Unpack")
    if xs[axis] is not None and xs[axis] != num:
        raise InvalidArgumentError(
            f"Input shape axis {axis} must equal {num}, got shape {fmt_shape(xs)}")
    return [Spec(xs[:axis] + xs[axis + 1:], x.dtype) for _ in range(num)]


def _split_dim(axis, rank, op):
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"-input rank(-{rank}) <= split_dim < input rank ({rank}), "
                                   f"but got {axis} ({op})")
    return axis + rank if axis < 0 else axis


@shape_fn("Split")
def split(inputs, attrs):
    a, x = inputs
    n = attrs["num_split"]
    axis = _scalar(a, "split_dim", "Split")
    xs = x.shape
    if xs is None or axis is None:
        return [Spec(None if xs is None else (None,) * len(xs), x.dtype)] * n
    axis = _split_dim(axis, len(xs), "Split")
    d = xs[axis]
    if d is not None and d % n:
        raise InvalidArgumentError(
            f"Number of ways to split should evenly divide the split dimension, but got "
            f"split_dim {axis} (size = {d}) and num_split {n} (input {fmt_shape(xs)})")
    part = xs[:axis] + (None if d is None else d // n,) + xs[axis + 1:]
    return [Spec(part, x.dtype)] * n


@shape_fn("SplitV")
def split_v(inputs, attrs):
    x, sz, a = inputs
    n = attrs["num_split"]
    xs = x.shape
    if sz.shape is not None and (len(sz.shape) != 1 or sz.shape[0] not in (n, None)):
        raise InvalidArgumentError(
            f"SplitV: size_splits must be 1-D with {n} elements, got shape {fmt_shape(sz.shape)}")
    axis = _scalar(a, "split_dim", "SplitV", allow_one=True)
    sizes = None if sz.value is None else sz.value.tolist()
    if xs is None or axis is None:
        return [Spec(None if xs is None else (None,) * len(xs), x.dtype)] * n
    axis = _split_dim(axis, len(xs), "SplitV")
    d = xs[axis]
    if sizes is None:
        return [Spec(xs[:axis] + (None,) + xs[axis + 1:], x.dtype)] * n
    if n == 1:
        if d is not None and sizes[0] != d:
            raise InvalidArgumentError(
                f"If there is only one output, it must have the same size as the input. Input "
                f"size: {d} output size: {sizes[0]}")
        sizes = [d]
    else:
        neg = [i for i, s in enumerate(sizes) if s == -1]
        if len(neg) > 1:
            raise InvalidArgumentError(
                f"There can only be one -1 in the input. (SplitV: sizes {sizes})")
        for i, s in enumerate(sizes):
            if s < -1 or (s == -1 and i not in neg):
                raise InvalidArgumentError(
                    f"Split size at index {i} must be >= 0. Got: {s} (SplitV: sizes {sizes})")
        total = sum(s for s in sizes if s != -1)
        if d is not None:
            if (not neg and total != d) or (neg and total > d):
                raise InvalidArgumentError(
                    "Determined shape must either match input shape along split_dim exactly if "
                    "fully specified, or be less than the size of the input along split_dim if "
                    f"not fully specified.  Got: {total} (SplitV: sizes {sizes}, dimension "
                    f"{axis} of {fmt_shape(xs)})")
            if neg:
                sizes[neg[0]] = d - total
        elif neg:
            sizes[neg[0]] = None
    return [Spec(xs[:axis] + (s,) + xs[axis + 1:], x.dtype) for s in sizes]
