"""CPU kernels: index-tuple gathers and scatters (GatherNd, ScatterNd, TensorScatterAdd/Sub/
Update),
OneHot, Where (numpy).

TF semantics kept here: out-of-range index tuples raise InvalidArgument (zeros instead with
bad_indices_policy="IGNORE"); ScatterNd and TensorScatterAdd add duplicates in index order (bool: logical or), with
TensorScatterUpdate the last duplicate wins;
OneHot leaves rows of out-of-range or negative indices at off_value.
"""
import numpy as np

from kernels import kernel
from shape_fns.errors import InvalidArgumentError
from shape_fns.spec import fmt_shape

ALL = ("float32", "float64", "int32", "int64", "bool")
HALF = ("float16", "bfloat16")   # data movement, or sums rounded per add as Eigen's half types
_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _linear(ix, dims, what, ignore, full, gather=False):
    """Row-major offsets of the index tuples `ix` [m, n] into `dims`, and the bad-row mask
    (None when all are in range). Raises InvalidArgument for a bad row unless `ignore`, in
    stock's words (naming the `full` shape)."""
    m, n = ix.shape
    if n == 0:
        return np.zeros(m, np.intp), None
    lim = np.asarray(dims, np.int64)
    bad = ((ix < 0) | (ix >= lim)).any(axis=1)
    if not bad.any():
        bad = None
    elif not ignore:
        r = int(np.argmax(bad))
        raise InvalidArgumentError(
            f"{what}[{r}] = [{', '.join(str(v) for v in ix[r].tolist())}] does not index into "
            f"{'param ' if gather else ''}shape {fmt_shape(full)}"
            f"{', node name: GatherNd' if gather else ''}")
    if n == 1:
        lin = ix[:, 0].astype(np.intp)
    else:
        strides = np.ones(n, np.int64)
        for k in range(n - 2, -1, -1):
            strides[k] = strides[k + 1] * dims[k + 1]
        lin = (ix.astype(np.int64) * strides).sum(axis=1).astype(np.intp)
    if bad is not None:
        lin[bad] = 0
    return lin, bad


@kernel("GatherNd", dtypes=ALL + HALF, type_attr="Tparams")
def gather_nd(inputs, outputs, attrs):
    p, idx, out = inputs[0], inputs[1], outputs[0]
    n = idx.shape[-1]
    m = _prod(idx.shape[:-1])
    if m == 0:
        return
    ignore = attrs.get("bad_indices_policy", "") == "IGNORE"
    lin, bad = _linear(idx.reshape(m, n), p.shape[:n], "indices", ignore, p.shape, True)
    if out.size == 0:
        return
    rows = out.reshape(m, -1)
    p.reshape(-1, rows.shape[1]).take(lin, 0, rows, "clip")
    if bad is not None:
        rows[bad] = 0


@kernel("ScatterNd", dtypes=ALL + HALF)
def scatter_nd(inputs, outputs, attrs):
    idx, upd, out = inputs[0], inputs[1], outputs[0]
    out.fill(0)
    if out.size == 0:
        return
    n = idx.shape[-1] if idx.ndim > 1 else 1
    ix = idx.reshape(-1, n)
    m = ix.shape[0]
    if m == 0:
        return
    ignore = attrs.get("bad_indices_policy", "") == "IGNORE"
    lin, bad = _linear(ix, out.shape[:n], "indices", ignore, out.shape)
    u = upd.reshape(m, -1)
    if bad is not None:
        lin, u = lin[~bad], u[~bad]
    # np.add.at adds in index order, as TensorFlow's loop does; ints wrap, bools or.
    with np.errstate(all="ignore"):
        if u.shape[1] == 1:
            np.add.at(out.reshape(-1), lin, u.reshape(-1))
        else:
            np.add.at(out.reshape(-1, u.shape[1]), lin, u)
    if out.dtype in _WIDE:  # TensorFlow's CPU threads flush subnormal sums to zero
        out[np.abs(out) < np.finfo(out.dtype).tiny] = 0


def _tensor_scatter(inputs, outputs, attrs, ufunc):
    t, idx, upd, out = inputs[0], inputs[1], inputs[2], outputs[0]
    np.copyto(out, t)
    if out.size == 0 or idx.size == 0:
        return
    n = idx.shape[-1] if idx.ndim > 1 else 1
    ix = idx.reshape(-1, n)
    ignore = attrs.get("bad_indices_policy", "") == "IGNORE"
    lin, bad = _linear(ix, out.shape[:n], "indices", ignore, out.shape)
    u = upd.reshape(ix.shape[0], -1)
    if bad is not None:
        lin, u = lin[~bad], u[~bad]
    rows = out.reshape(-1, u.shape[1])
    if ufunc is None:
        rows[lin] = u          # numpy assigns repeated indices in order: the last one wins
        return
    # ufunc.at applies duplicates in order; float16/bfloat16 round each step from float32,
    # as Eigen's half types do
    with np.errstate(all="ignore"):
        ufunc.at(rows, lin, u)
    if out.dtype in _WIDE:  # TensorFlow's CPU threads flush subnormal sums to zero
        touched = rows[lin]
        touched[np.abs(touched) < np.finfo(out.dtype).tiny] = 0
        rows[lin] = touched


@kernel("TensorScatterUpdate", dtypes=ALL + HALF)
def tensor_scatter_update(inputs, outputs, attrs):
    _tensor_scatter(inputs, outputs, attrs, None)


_ADD = ("float32", "float64", "int32", "int64", "float16", "bfloat16")


@kernel("TensorScatterAdd", dtypes=_ADD)
def tensor_scatter_add(inputs, outputs, attrs):
    _tensor_scatter(inputs, outputs, attrs, np.add)


@kernel("TensorScatterSub", dtypes=_ADD)
def tensor_scatter_sub(inputs, outputs, attrs):
    _tensor_scatter(inputs, outputs, attrs, np.subtract)


@kernel("OneHot", dtypes=ALL)
def one_hot(inputs, outputs, attrs):
    idx, depth, on, off, out = inputs[0], int(inputs[1]), inputs[2], inputs[3], outputs[0]
    out.fill(off[()])
    if out.size == 0:
        return
    axis = attrs.get("axis", -1)
    q = _prod(idx.shape[axis:]) if axis != -1 else 1
    flat = idx.reshape(-1)
    f = np.flatnonzero((flat >= 0) & (flat < depth)) if flat.dtype.kind == "i" \
        else np.flatnonzero(flat < depth)
    i = flat[f].astype(np.intp)
    if q == 1:
        pos = f * depth + i
    else:
        pos = ((f // q) * depth + i) * q + f % q
    out.reshape(-1)[pos] = on[()]


@kernel("Where", dtypes=ALL)
def where(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    if x.ndim == 0 or x.ndim > 8:
        raise InvalidArgumentError(f"WhereOp : Unhandled input dimensions: {x.ndim}")
    if out.shape[0] == 0:
        return
    for k, a in enumerate(np.nonzero(x)):
        out[:, k] = a
