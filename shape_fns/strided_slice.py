"""Shape functions: StridedSlice and StridedSliceGrad, and the slicing plan the kernels share.

`plan` follows TensorFlow's ValidateStridedSliceOp: the sparse spec (begin/end/strides plus five
bit masks) is expanded to one entry per input dim, canonicalised and clamped, giving the
"processing" shape (one entry per input dim) and the final shape (shrunk dims dropped, new axes
added). For fully known inputs it also gives the Python slices that produce the data.
"""
import functools

from .common import unknown
from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape

_SHRINK, _NEW = -1, -2


def _canonical(x, masked, c, s, d):
    if masked:
        if s > 0:
            return 0 if c == 0 else d
        return d - 1 if c == 0 else -1
    if x < 0:
        x += d
    lo, hi = (0, d) if s > 0 else (-1, d - 1)
    return lo if x < lo else hi if x > hi else x


@functools.lru_cache(maxsize=4096)
def plan(xs, begin, end, strides, bm, em, elm, nam, sam):
    """(slices | None, processing shape, final shape) for input shape `xs` (known rank).

    begin/end are tuples or None (unknown values); strides a tuple.
    """
    n = len(strides)
    if elm & (elm - 1):
        raise InvalidArgumentError("Multiple ellipses in slice spec not allowed")
    seen, add_after = False, 0
    for i in range(n):
        if seen and (nam >> i) & 1:
            add_after += 1
        if (elm >> i) & 1:
            seen = True
    if not seen:  # an implicit ellipsis at the end
        elm |= 1 << n
        n += 1
    dims = len(xs)
    db, de, ds = [0] * dims, [0] * dims, [1] * dims
    dbm = dem = dsam = 0
    gather = []
    full = 0
    for i in range(n):
        if (elm >> i) & 1:
            nxt = min(dims - (n - i) + 1 + add_after, dims)
            while full < nxt:
                dbm |= 1 << full
                dem |= 1 << full
                gather.append(full)
                full += 1
        elif (nam >> i) & 1:
            gather.append(_NEW)
        else:
            if full == dims:
                raise InvalidArgumentError(
                    f"Index out of range using input dim {full}; input has only {dims} dims "
                    f"(StridedSlice of {fmt_shape(xs)})")
            if begin is not None:
                db[full] = begin[i]
            if end is not None:
                de[full] = end[i]
            ds[full] = strides[i]
            if (bm >> i) & 1:
                dbm |= 1 << full
            if (em >> i) & 1:
                dem |= 1 << full
            if (sam >> i) & 1:
                gather.append(_SHRINK)
                dsam |= 1 << full
            else:
                gather.append(full)
            full += 1
    known = begin is not None and end is not None
    proc, slices = [], []
    for i in range(dims):
        b, e, s, d = db[i], de[i], ds[i], xs[i]
        if s == 0:
            raise InvalidArgumentError(f"StridedSlice: strides[{i}] must be non-zero")
        shrink = (dsam >> i) & 1
        if d is None:
            proc.append(1 if shrink else None)
            slices = None
            continue
        if shrink and s <= 0:
            raise InvalidArgumentError("StridedSlice: only stride 1 allowed on non-range indexing.")
        mb, me = (dbm >> i) & 1, (dem >> i) & 1
        if known:
            if shrink:
                x = b + d if b < 0 else b
                if x < 0 or x >= d:
                    raise InvalidArgumentError(
                        f"slice index {b} of dimension {i} out of bounds. "
                        f"(input {fmt_shape(xs)})")
                b, e = x, x + 1
            else:
                b, e = _canonical(b, mb, 0, s, d), _canonical(e, me, 1, s, d)
            length = e - b
        elif shrink:
            length = 1
        elif mb and me and d > 0:
            length = -d if s < 0 else d
        else:
            proc.append(None)
            slices = None
            continue
        if length == 0 or (length < 0) != (s < 0):
            size = 0
        else:
            q, r = divmod(length, s)
            size = q + (r != 0)
        proc.append(size)
        if slices is not None and known:
            if shrink:
                slices.append(slice(b, b + 1))
            elif size == 0:
                slices.append(slice(0, 0))
            else:
                stop = b + (size - 1) * s + (1 if s > 0 else -1)
                slices.append(slice(b, None if stop < 0 else stop, s))
    final = tuple(1 if g == _NEW else proc[g] for g in gather if g != _SHRINK)
    return (tuple(slices) if slices is not None and known else None), tuple(proc), final


def _spec_tuple(spec):
    v = spec.value
    return None if v is None else tuple(v.tolist())


def plan_for(xs, b, e, s, attrs):
    """The plan for spec inputs, or None when the output rank cannot be known."""
    ss = s.shape
    if not (b.shape == e.shape == ss and ss is not None and len(ss) == 1 and ss[0] is not None
            and ss[0] < 32):
        shapes = (b.shape, e.shape, ss)
        n = ss[0] if ss is not None and len(ss) == 1 else None
        for sh in shapes:
            if sh is not None and (len(sh) != 1 or (n is not None and sh[0] not in (n, None))):
                raise InvalidArgumentError(
                    f"Expected begin, end, and strides to be 1D equal size tensors, but got "
                    f"shapes {fmt_shape(shapes[0])}, {fmt_shape(shapes[1])}, and "
                    f"{fmt_shape(shapes[2])} instead.")
        if n is not None and n >= 32:
            raise InvalidArgumentError(f"StridedSlice: at most 31 slice entries, got {n}")
    strides = _spec_tuple(s)
    if xs is None or strides is None:
        return None
    return plan(xs, _spec_tuple(b), _spec_tuple(e), strides, attrs.get("begin_mask", 0),
                attrs.get("end_mask", 0), attrs.get("ellipsis_mask", 0),
                attrs.get("new_axis_mask", 0), attrs.get("shrink_axis_mask", 0))


@shape_fn("StridedSlice")
def strided_slice(inputs, attrs):
    x, b, e, s = inputs
    p = plan_for(x.shape, b, e, s, attrs)
    return [Spec(None if p is None else p[2], x.dtype)]


@shape_fn("StridedSliceGrad")
def strided_slice_grad(inputs, attrs):
    sh, b, e, s, dy = inputs
    if sh.shape is not None and len(sh.shape) != 1:
        raise InvalidArgumentError(
            f"StridedSliceGrad: shape must be 1-D, got shape.shape = {fmt_shape(sh.shape)}")
    if sh.value is None:
        return [unknown(dy.dtype, sh.shape[0] if sh.shape else None)]
    xs = tuple(sh.value.tolist())
    p = plan_for(xs, b, e, s, attrs)
    if p is not None and dy.shape is not None:
        final = p[2]
        if len(final) != len(dy.shape) or any(
                a is not None and c is not None and a != c for a, c in zip(final, dy.shape)):
            raise InvalidArgumentError(
                f"StridedSliceGrad: shape of dy was {fmt_shape(dy.shape)} instead of "
                f"{fmt_shape(final)}")
    return [Spec(xs, dy.dtype)]
