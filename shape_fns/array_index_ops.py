"""Shape functions: index-driven array ops (Slice, Pad/PadV2, Tile, GatherV2, UnsortedSegmentSum).

`slice_bounds`, `pad_amounts` and `gather_axes` are shared with the CPU kernels, so the
validation and the arithmetic are written once.
"""
from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape


def slice_bounds(xs, begin, size):
    """Validated [(begin, size)] per dim of a fully known shape (TensorFlow's Slice rules)."""
    out = []
    for i, d in enumerate(xs):
        b, s = begin[i], size[i]
        if d == 0:
            if b != 0 or s not in (0, -1):
                raise InvalidArgumentError(
                    f"Expected begin[{i}] == 0 (got {b}) and size[{i}] == 0 (got {s}) when "
                    f"input.dim_size({i}) == 0 (Slice of {fmt_shape(xs)})")
            out.append((0, 0))
            continue
        if not 0 <= b <= d:
            raise InvalidArgumentError(
                f"Expected begin[{i}] in [0, {d}], but got {b} (input {fmt_shape(xs)})")
        if s == -1:
            s = d - b
        if not 0 <= s <= d - b:
            raise InvalidArgumentError(
                f"Expected size[{i}] in [0, {d - b}], but got {s} (input {fmt_shape(xs)})")
        out.append((b, s))
    return out


@shape_fn("Slice")
def slice_(inputs, attrs):
    x, b, s = inputs
    xs, bs, ss = x.shape, b.shape, s.shape
    r = len(xs) if xs is not None else None
    for sh in (bs, ss):
        if sh is not None and (len(sh) != 1 or (r is not None and sh[0] not in (r, None))):
            raise InvalidArgumentError(
                f"Expected begin and size arguments to be 1-D tensors of size {r}, but got "
                f"shapes {fmt_shape(bs)} and {fmt_shape(ss)} instead. (input {fmt_shape(xs)})")
    bv, sv = b.value, s.value
    if bv is not None and sv is not None and xs is not None and None not in xs:
        return [Spec([n for _, n in slice_bounds(xs, bv.tolist(), sv.tolist())], x.dtype)]
    if r is None:
        r = bs[0] if bs else (ss[0] if ss else None)
        if r is None:
            return [Spec(None, x.dtype)]
    if sv is None:
        return [Spec((None,) * r, x.dtype)]
    sizes = sv.tolist()
    out = []
    for i, n in enumerate(sizes):
        if n == -1:
            d = xs[i] if xs is not None else None
            n = None if d is None or bv is None else d - int(bv[i])
        out.append(n)
    return [Spec(out, x.dtype)]


def pad_amounts(xs, paddings, op):
    """Validated [(before, after)] per dim from a [rank, 2] paddings value."""
    out = []
    for i, (lo, hi) in enumerate(paddings):
        if lo < 0 or hi < 0:
            raise InvalidArgumentError(
                f"Paddings must be non-negative: {lo} {hi} (dim {i} of {fmt_shape(xs)})")
        out.append((lo, hi))
    return out


@shape_fn("Pad", "PadV2")
def pad(inputs, attrs):
    x, p = inputs[0], inputs[1]
    xs, ps = x.shape, p.shape
    op = "PadV2" if len(inputs) == 3 else "Pad"
    if ps is not None and (len(ps) != 2 or ps[1] not in (2, None)):
        raise InvalidArgumentError(f"{op}: paddings must be a matrix with 2 columns: {fmt_shape(ps)}")
    if xs is not None and ps is not None and ps[0] not in (len(xs), None):
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs{fmt_shape(ps)} "
            f"{fmt_shape(xs)}")
    if op == "PadV2":
        cs = inputs[2].shape
        if cs is not None and cs != ():
            raise InvalidArgumentError(f"constant_values must be a scalar. Found: {fmt_shape(cs)}")
    pv = p.value
    if pv is None or xs is None:
        r = len(xs) if xs is not None else (ps[0] if ps else None)
        return [Spec(None if r is None else (None,) * r, x.dtype)]
    amounts = pad_amounts(xs, pv.tolist(), op)
    return [Spec([None if d is None else d + lo + hi for d, (lo, hi) in zip(xs, amounts)], x.dtype)]


@shape_fn("Tile")
def tile(inputs, attrs):
    x, m = inputs
    xs, ms = x.shape, m.shape
    if ms is not None and len(ms) != 1:
        raise InvalidArgumentError(f"Expected multiples to be 1-D, but got shape {fmt_shape(ms)}")
    if xs is not None and ms is not None and ms[0] not in (len(xs), None):
        raise InvalidArgumentError(
            f"Expected multiples argument to be a vector of length {len(xs)} but got length {ms[0]} "
            f"(input {fmt_shape(xs)})")
    mv = m.value
    if mv is None or xs is None:
        r = len(xs) if xs is not None else (ms[0] if ms else None)
        return [Spec(None if r is None else (None,) * r, x.dtype)]
    mults = mv.tolist()
    for i, k in enumerate(mults):
        if k < 0:
            raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {k}")
    return [Spec([None if d is None else d * k for d, k in zip(xs, mults)], x.dtype)]


def gather_axes(pr, ir, axis, batch_dims):
    """Normalised (axis, batch_dims) for GatherV2 on params of rank pr and indices of rank ir."""
    if pr < 1:
        raise InvalidArgumentError("GatherV2: params must be at least 1 dimensional")
    if not -pr <= axis < pr:
        # stock's kernel runs GatherV2's shape function first, which words it so
        raise InvalidArgumentError(
            f"Shape must be at least rank {axis + 1 if axis >= 0 else -axis} but is rank {pr} "
            f"(GatherV2: axis {axis} of params of rank {pr})")
    if axis < 0:
        axis += pr
    if batch_dims:
        if not -ir <= batch_dims <= ir:
            raise InvalidArgumentError(
                f"GatherV2: expected batch_dims in the range [{-ir}, {ir}], but got {batch_dims}")
        if batch_dims < 0:
            batch_dims += ir
        if batch_dims >= pr:
            raise InvalidArgumentError(
                f"batch_dims ({batch_dims}) must be less than rank(params) ({pr}). (GatherV2)")
        if axis < batch_dims:
            raise InvalidArgumentError(
                f"GatherV2: batch_dims ({batch_dims}) must be less than or equal to axis ({axis})")
    return axis, batch_dims


@shape_fn("GatherV2")
def gather_v2(inputs, attrs):
    p, i, a = inputs
    ps, ids = p.shape, i.shape
    if a.shape is not None and a.shape != ():
        raise InvalidArgumentError(f"GatherV2: axis must be scalar, got shape {fmt_shape(a.shape)}")
    bd = attrs.get("batch_dims", 0)
    if ps is None or ids is None:
        return [Spec(None, p.dtype)]
    av = a.value
    if av is None:
        return [Spec((None,) * (len(ps) + len(ids) - 1 - (bd + len(ids) if bd < 0 else bd)),
                     p.dtype)]
    axis, bd = gather_axes(len(ps), len(ids), int(av), bd)
    for k in range(bd):
        if ps[k] is not None and ids[k] is not None and ps[k] != ids[k]:
            raise InvalidArgumentError(
                f"GatherV2: params.shape[{k}]: {ps[k]} should be equal to indices.shape[{k}]: "
                f"{ids[k]} (params {fmt_shape(ps)}, indices {fmt_shape(ids)})")
    return [Spec(ps[:axis] + ids[bd:] + ps[axis + 1:], p.dtype)]


@shape_fn("UnsortedSegmentSum")
def unsorted_segment_sum(inputs, attrs):
    d, s, n = inputs
    ds, ss = d.shape, s.shape
    if n.shape is not None and n.shape != ():
        raise InvalidArgumentError(
            f"UnsortedSegmentSum: num_segments should be a scalar, not shape {fmt_shape(n.shape)}")
    num = None if n.value is None else int(n.value)
    if num is not None and num < 0:
        raise InvalidArgumentError(
            f"Input num_segments == {num} must not be negative.")
    if ds is None or ss is None:
        return [Spec(None, d.dtype)]
    k = len(ss)
    if len(ds) < k or any(a is not None and b is not None and a != b for a, b in zip(ds, ss)):
        raise InvalidArgumentError(
            f"UnsortedSegmentSum: data.shape = {fmt_shape(ds)} does not start with "
            f"segment_ids.shape = {fmt_shape(ss)}")
    return [Spec((num,) + ds[k:], d.dtype)]
