"""Shape functions: Range, Cumsum/Cumprod, TopKV2, ReverseV2.

`range_size` holds TensorFlow's Range checks and size rule (computed in the input dtype, as
its kernel does), for the CPU kernel's use as well.
"""
import numpy as np

from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape

_I64_MAX = np.iinfo(np.int64).max


def _first(v):
    return np.asarray(v).reshape(-1)[0]


def range_size(start, limit, delta):
    """Number of elements of Range(start, limit, delta): values are numpy scalars of one dtype."""
    if delta == 0:
        raise InvalidArgumentError(f"Requires delta != 0: {delta:g}")
    if delta > 0:
        if not start <= limit:
            raise InvalidArgumentError(
                f"Requires start <= limit when delta > 0: {start:g}/{limit:g}")
    elif not start >= limit:
        raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {start:g}/{limit:g}")
    if np.dtype(type(delta)).kind in "iu":
        s, lim, d = int(start), int(limit), abs(int(delta))
        return (abs(lim - s) + d - 1) // d
    with np.errstate(all="ignore"):
        n = np.ceil(np.abs((limit - start) / delta))
    if not n <= type(n)(_I64_MAX):
        raise InvalidArgumentError(f"Requires ((limit - start) / delta) <= {_I64_MAX} "
                                   f"(Range: {start:g}, {limit:g}, {delta:g})")
    return int(n)


@shape_fn("Range")
def range_(inputs, attrs):
    for spec, what in zip(inputs, ("start", "limit", "delta")):
        sh = spec.shape
        if sh is not None and sh != () and sh not in ((1,), (None,)):
            raise InvalidArgumentError(f"Range: {what} must be a scalar, not shape {fmt_shape(sh)}")
    dt = inputs[0].dtype
    if any(s.value is None for s in inputs):
        return [Spec((None,), dt)]
    return [Spec((range_size(*(_first(s.value) for s in inputs)),), dt)]


@shape_fn("Cumsum", "Cumprod", value_free=True)
def scan(inputs, attrs):
    x, a = inputs
    if a.shape is not None and a.shape != ():
        raise InvalidArgumentError(f"ScanOp: axis must be a scalar, not {fmt_shape(a.shape)}")
    return [Spec(x.shape, x.dtype)]


def scan_axis(axis, rank):
    """The normalised scan axis; InvalidArgument outside [-rank, rank) (so always for scalars)."""
    if not -rank <= axis < rank:
        raise InvalidArgumentError(
            f"ScanOp: Expected scan axis in the range [{-rank}, {rank}), but got "
            f"{axis + rank if axis < 0 else axis}")   # stock prints a negative axis + rank
    return axis + rank if axis < 0 else axis


@shape_fn("TopKV2")
def top_k(inputs, attrs):
    x, k = inputs
    xs = x.shape
    idt = attrs.get("index_type", np.dtype(np.int32))
    if k.shape is not None and k.shape != ():
        raise InvalidArgumentError(f"TopKV2: k must be scalar, got shape {fmt_shape(k.shape)}")
    kv = None if k.value is None else int(k.value)
    if kv is not None and kv < 0:
        raise InvalidArgumentError(f"Need k >= 0, got {kv}")
    if xs is None:
        return [Spec(None, x.dtype), Spec(None, idt)]
    if len(xs) < 1:
        raise InvalidArgumentError(f"TopKV2: input must be >= 1-D, got shape {fmt_shape(xs)}")
    if kv is not None and xs[-1] is not None and xs[-1] < kv:
        raise InvalidArgumentError(
            f"TopKV2: input must have at least k columns. Had {xs[-1]}, needed {kv}")
    out = xs[:-1] + (kv,)
    return [Spec(out, x.dtype), Spec(out, idt)]


@shape_fn("ReverseV2", value_free=True)
def reverse(inputs, attrs):
    x, a = inputs
    if a.shape is not None and len(a.shape) != 1:
        raise InvalidArgumentError(f"ReverseV2: 'dims' must be 1-dimension, not {len(a.shape)}")
    return [Spec(x.shape, x.dtype)]


def reverse_axes(axes, rank):
    """Normalised ReverseV2 axes: each in [-rank, rank), none twice."""
    seen = set()
    for i, a in enumerate(axes):
        if not -rank <= a < rank:
            raise InvalidArgumentError(
                f"ReverseV2: 'axis'[{i}] = {a} is out of valid range [0, {rank - 1}]")
        a = a + rank if a < 0 else a
        if a in seen:
            raise InvalidArgumentError(f"ReverseV2: axis {a} specified more than once.")
        seen.add(a)
    return sorted(seen)
