"""Shape functions: index-tuple gathers and scatters (GatherNd, ScatterNd, TensorScatterAdd/
Sub/Update), OneHot, Where.

`scatter_nd_check` holds TensorFlow's ScatterNd validation, in its order, for the CPU kernel's
use as well.
"""
import numpy as np

from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

I64 = np.dtype(np.int64)
POLICIES = ("", "ERROR", "IGNORE")


def _policy(attrs):
    p = attrs.get("bad_indices_policy", "")
    if p not in POLICIES:  # stock TensorFlow has no kernel for it: let it say so
        raise Unsupported(f"attr:bad_indices_policy={p}")
    return p


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


@shape_fn("GatherNd", value_free=True)
def gather_nd(inputs, attrs):
    p, i = inputs
    ps, ids = p.shape, i.shape
    _policy(attrs)
    if ps is not None and len(ps) < 1:
        raise InvalidArgumentError(f"GatherNd: params must be at least a vector, got {fmt_shape(ps)}")
    if ids is not None and len(ids) < 1:
        raise InvalidArgumentError(f"GatherNd: indices must be at least a vector, got {fmt_shape(ids)}")
    if ids is None or ids[-1] is None:
        return [Spec(None, p.dtype)]
    n = ids[-1]
    if ps is None:
        return [Spec(None, p.dtype)]
    if n > len(ps):
        raise InvalidArgumentError(
            f"GatherNd: index innermost dimension length must be <= params rank; saw: {n} vs. "
            f"{len(ps)} (params {fmt_shape(ps)}, indices {fmt_shape(ids)})")
    if n > 7:
        raise InvalidArgumentError(
            f"GatherNd: only indices.shape[-1] values between 0 and 7 are supported, got {n}")
    lead = ids[:-1]
    if None not in ps and None not in lead and _prod(lead) > 0 and _prod(ps) == 0:
        raise InvalidArgumentError(
            f"Requested more than 0 entries, but params is empty.  Params shape: "
            f"{fmt_shape(ps)}")
    return [Spec(lead + ps[n:], p.dtype)]


def scatter_nd_check(ishape, ushape, oshape):
    """TensorFlow's ScatterNd checks on fully known shapes; returns the index depth."""
    def bad(msg):
        raise InvalidArgumentError(
            f"{msg} (ScatterNd: indices {fmt_shape(ishape)}, updates {fmt_shape(ushape)}, "
            f"shape {fmt_shape(oshape)})")

    if len(ishape) < 1:
        bad(f"Indices shape must have rank at least one. Found:{fmt_shape(ishape)}")
    if len(ushape) < 1:
        bad(f"Updates shape must have rank at least one. Found:{fmt_shape(ushape)}")
    for d in oshape:
        if d < 0:
            bad(f"Dimension {d} must be >= 0")
    ni, nu = _prod(ishape), _prod(ushape)

    def valid_empty(n):  # TensorFlow's ValidEmptyOutputShape
        return (ni == 0 and nu == 0) or (n != 0 and ni != 0 and nu != 0)

    if not valid_empty(len(oshape)):
        bad("Indices and updates specified for empty output shape")
    outer = len(ishape) - 1
    for k in range(outer):
        if ishape[k] != ushape[k]:
            raise InvalidArgumentError(
                f"Dimensions [0,{outer}) of indices[shape={fmt_shape(ishape)}] must match "
                f"dimensions [0,{outer}) of updates[shape={fmt_shape(ushape)}]")
    ix = ishape[outer]
    if len(ushape) - outer != len(oshape) - ix:
        bad(f"Dimensions [{ix},{len(oshape)}) of input[shape={fmt_shape(oshape)}] must match "
            f"dimensions [{outer},{len(ushape)}) of updates[shape={fmt_shape(ushape)}]")
    for k in range(len(ushape) - outer):
        if ushape[k + outer] != oshape[ix + k]:
            bad(f"Dimensions [{ix},{len(oshape)}) of input[shape={fmt_shape(oshape)}] must "
                f"match dimensions [{outer},{len(ushape)}) of updates[shape={fmt_shape(ushape)}]")
    if len(oshape) < 1:
        bad("output must be at least 1-D")
    if not valid_empty(_prod(oshape)):
        bad(f"Indices and updates specified for empty output.  indices shape: "
            f"{fmt_shape(ishape)}")
    if ushape[0] != ishape[0]:
        bad(f"Dimensions [0,1) of indices[shape={fmt_shape(ishape)}] = {ishape[0]} must match "
            f"dimensions [0,1) of updates[shape={fmt_shape(ushape)}] = {ushape[0]}")
    # ValidateUpdateShape: rank-1 indices count as a column of scalar indices here.
    sdim = ishape[-1] if len(ishape) > 1 else 1
    bdim = len(ishape) - 1 if len(ishape) > 1 else 1
    if (len(ushape) < bdim or len(oshape) < sdim + len(ushape) - bdim
            or len(ushape) != bdim + len(oshape) - sdim
            or any(ushape[k] != ishape[k] for k in range(bdim))
            or any(ushape[k + bdim] != oshape[k + sdim] for k in range(len(ushape) - bdim))):
        bad("must have updates.shape = indices.shape[:batch_dim] + shape[slice_dim:]")
    if _prod(oshape) > 0 and not 1 <= sdim <= 7:
        # stock's words (its kernels take 1 to 7)
        bad(f"Only indices.shape[-1] values between 1 and 5 are currently supported.  "
            f"Requested rank: {sdim}")
    return sdim


@shape_fn("ScatterNd")
def scatter_nd(inputs, attrs):
    i, u, s = inputs
    _policy(attrs)
    ss = s.shape
    if ss is not None and len(ss) != 1:
        raise InvalidArgumentError(f"Shape must be a vector (ScatterNd: got {fmt_shape(ss)})")
    if s.value is None:
        r = ss[0] if ss else None
        return [Spec(None if r is None else (None,) * r, u.dtype)]
    out = [int(d) for d in s.value.reshape(-1)]
    for d in out:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0 (ScatterNd shape {out})")
    if i.fully_defined and u.fully_defined:
        scatter_nd_check(i.shape, u.shape, out)
    return [Spec(out, u.dtype)]


def tensor_scatter_check(ishape, ushape, tshape):
    """TensorFlow's TensorScatter* checks (its kernel's, then ScatterNd's); returns the depth."""
    def bad(msg):
        raise InvalidArgumentError(
            f"{msg} (TensorScatter: tensor {fmt_shape(tshape)}, indices {fmt_shape(ishape)}, "
            f"updates {fmt_shape(ushape)})")

    if len(ishape) < 1 or len(ushape) < 1:
        bad("indices and updates must have rank at least one")
    n, ni, nu = _prod(tshape), _prod(ishape), _prod(ushape)
    if not ((ni == 0 and nu == 0) or (n != 0 and ni != 0 and nu != 0)):
        bad("Indices and updates specified for empty output shape")
    outer = len(ishape) - 1
    if any(ishape[k] != ushape[k] for k in range(outer)):
        raise InvalidArgumentError(
            f"Outer dimensions of indices and update must match. Indices shape: "
            f"{fmt_shape(ishape)}, updates shape:{fmt_shape(ushape)}")
    ix = ishape[outer]
    if (len(ushape) - outer != len(tshape) - ix
            or any(ushape[k + outer] != tshape[ix + k] for k in range(len(ushape) - outer))):
        bad(f"Inner dimensions of output shape must match inner dimensions of updates shape. "
            f"Output: {fmt_shape(tshape)} updates: {fmt_shape(ushape)}")
    return scatter_nd_check(ishape, ushape, tshape)


@shape_fn("TensorScatterAdd", "TensorScatterSub", "TensorScatterUpdate", value_free=True)
def tensor_scatter(inputs, attrs):
    t, i, u = inputs
    _policy(attrs)
    if t.fully_defined and i.fully_defined and u.fully_defined:
        tensor_scatter_check(i.shape, u.shape, t.shape)
    return [Spec(t.shape, t.dtype)]


def _scalar(spec, what, op):
    if spec.shape is not None and spec.shape != ():
        raise InvalidArgumentError(f"{op}: {what} must be a scalar, but got: {fmt_shape(spec.shape)}")


@shape_fn("OneHot")
def one_hot(inputs, attrs):
    i, d, on, off = inputs
    _scalar(d, "depth", "OneHot")
    _scalar(on, "on_value", "OneHot")
    _scalar(off, "off_value", "OneHot")
    depth = None if d.value is None else int(d.value)
    if depth is not None and depth < 0:
        raise InvalidArgumentError(f"OneHot: depth must be non-negative, got: {depth}")
    axis = attrs.get("axis", -1)
    ids = i.shape
    if ids is None:
        return [Spec(None, on.dtype)]
    if axis != -1 and not 0 <= axis <= len(ids):
        raise InvalidArgumentError(
            f"Expected axis to be -1 or between [0, {len(ids) + 1}).  But received: {axis}")
    a = len(ids) if axis == -1 else axis
    return [Spec(ids[:a] + (depth,) + ids[a:], on.dtype)]


@shape_fn("Where")
def where(inputs, attrs):
    x = inputs[0]
    r = x.rank
    n = None if x.value is None else int(np.count_nonzero(x.value))
    return [Spec((n, r), I64)]
