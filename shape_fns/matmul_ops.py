"""Shape functions: matmul ops (MatMul, BatchMatMul, BatchMatMulV2, BatchMatMulV3)."""
from .common import broadcast_shapes, same_dtype
from .errors import InvalidArgumentError, Unsupported
from .host import onednn_runs
from .registry import shape_fn
from .spec import Spec, fmt_shape


def _inner_check(a, b, ka, kb, adj=""):
    """`adj`: BatchMatMul's message ends with its adj_x and adj_y flags (stock's words)."""
    if ka is not None and kb is not None and ka != kb:
        raise InvalidArgumentError(
            f"Matrix size-incompatible: In[0]: {fmt_shape(a.shape)}, In[1]: "
            f"{fmt_shape(b.shape)}{adj}")


def _rank_check(specs, lo, exact=False):
    for i, s in enumerate(specs):
        if s.shape is not None and (len(s.shape) < lo or (exact and len(s.shape) != lo)):
            need = f"== {lo}" if exact and len(s.shape) > lo else f">= {lo}"   # stock's words
            raise InvalidArgumentError(
                f"In[{i}] ndims must be {need}: {len(s.shape)} (shape {fmt_shape(s.shape)})")


def _generic_rank_check(specs, exact):
    """TensorFlow's generic CPU kernel for MatMul and BatchMatMul (BaseBatchMatMulOp: where
    oneDNN does not run the dtype, host.onednn_runs): both ranks first, in its words."""
    a, b = specs
    if a.shape is None or b.shape is None:
        return
    if len(a.shape) != len(b.shape):
        raise InvalidArgumentError(
            f"In[0] and In[1] has different ndims: {fmt_shape(a.shape)} vs. {fmt_shape(b.shape)}")
    n = len(a.shape)
    if exact and n != 2:
        raise InvalidArgumentError(f"In[0] and In[1] ndims must be == 2: {n}")
    if n < 2:
        raise InvalidArgumentError(f"In[0] and In[1] ndims must be >= 2: {n}")


@shape_fn("MatMul", value_free=True)
def matmul(inputs, attrs):
    a, b = inputs
    dt = same_dtype(inputs, "MatMul")
    if not onednn_runs(dt):
        _generic_rank_check(inputs, exact=True)
    _rank_check(inputs, 2, exact=True)
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    sa = a.shape if a.shape is not None else (None, None)
    sb = b.shape if b.shape is not None else (None, None)
    m, ka = (sa[1], sa[0]) if ta else sa
    kb, n = (sb[1], sb[0]) if tb else sb
    _inner_check(a, b, ka, kb)
    return [Spec((m, n), dt)]


def _batch_matmul(inputs, attrs, dtype, broadcast):
    x, y = inputs
    if not broadcast and not onednn_runs(dtype):
        _generic_rank_check(inputs, exact=False)
    _rank_check(inputs, 2)
    if x.shape is None or y.shape is None:
        return [Spec(None, dtype)]
    if not broadcast and len(x.shape) != len(y.shape):
        raise InvalidArgumentError(
            f"In[0] and In[1] has different ndims: {fmt_shape(x.shape)} vs. {fmt_shape(y.shape)}")
    m, kx = x.shape[-2:][::-1] if attrs.get("adj_x", False) else x.shape[-2:]
    ky, n = y.shape[-2:][::-1] if attrs.get("adj_y", False) else y.shape[-2:]
    bx, by = x.shape[:-2], y.shape[:-2]
    if broadcast:
        try:
            batch = broadcast_shapes(bx, by)
        except InvalidArgumentError:
            raise InvalidArgumentError(
                f"In[0] and In[1] must have compatible batch dimensions: "
                f"{fmt_shape(x.shape)} vs. {fmt_shape(y.shape)}") from None
    else:
        batch = []
        for i, (p, q) in enumerate(zip(bx, by)):
            if p is not None and q is not None and p != q:
                raise InvalidArgumentError(
                    f"In[0].dim({i}) and In[1].dim({i}) must be the same: "
                    f"{fmt_shape(x.shape)} vs {fmt_shape(y.shape)}")
            batch.append(p if p is not None else q)
    adj = f" {int(bool(attrs.get('adj_x')))} {int(bool(attrs.get('adj_y')))}"
    _inner_check(x, y, kx, ky, adj)
    return [Spec(tuple(batch) + (m, n), dtype)]


@shape_fn("BatchMatMul", value_free=True)
def batch_matmul(inputs, attrs):
    return _batch_matmul(inputs, attrs, same_dtype(inputs, "BatchMatMul"), broadcast=False)


@shape_fn("BatchMatMulV2", value_free=True)
def batch_matmul_v2(inputs, attrs):
    return _batch_matmul(inputs, attrs, same_dtype(inputs, "BatchMatMulV2"), broadcast=True)


@shape_fn("BatchMatMulV3", value_free=True)
def batch_matmul_v3(inputs, attrs):
    out = attrs.get("Tout")
    # TensorFlow's CPU kernels for mixed types (int8 x int8 -> int32 ...) are not ours.
    if inputs[0].dtype != out or inputs[1].dtype != out:
        raise Unsupported("attr:Ta/Tb/Tout mixed")
    return _batch_matmul(inputs, attrs, out, broadcast=True)
