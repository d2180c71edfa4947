"""CPU kernel: Einsum as (per-operand diagonal/sum) + one broadcasting batched matmul (BLAS).

Two operands are brought to [batch..., free, contracted] x [batch..., contracted, free]; the
product lands in the output, or in a transposed view of it, whenever the free labels of each
side are single (as in the Keras attention and EinsumDense equations), otherwise it is
transposed into place. Ellipsis dimensions are batch dimensions that broadcast, as in
TensorFlow. One operand goes to numpy's einsum.
"""
import functools
import string

import numpy as np

from kernels import kernel
from kernels.cpu import gemm
from shape_fns.einsum_ops import ELL, parse
from shape_fns.errors import Unsupported

_LETTERS = string.ascii_letters


def _np_term(t, ell):
    return "".join(ell if c == ELL else c for c in t)


@functools.lru_cache(maxsize=512)
def _plan(equation, ranks):
    """Labels of both operands with "..." expanded into private labels (right-aligned, as
    broadcasting), plus per-operand reductions and the matmul layout."""
    ins, out = parse(equation, 2)
    used = {c for t in ins for c in t if c != ELL}
    spare = [c for c in _LETTERS if c not in used]
    ne = max(r - (len(t) - 1) for t, r in zip(ins, ranks) if ELL in t) if any(
        ELL in t for t in ins) else 0
    if ne > len(spare):
        raise Unsupported("attr:equation")
    ell = spare[:ne]
    terms = []
    for t, r in zip(ins, ranks):
        if ELL in t:
            k = r - (len(t) - 1)
            t = tuple(c for x in t for c in (ell[ne - k:] if x == ELL else [x]))
        terms.append(t)
    out = tuple(c for x in out for c in (ell if x == ELL else [x]))
    a, b = terms
    # Reduce each operand alone: take diagonals, sum labels no one else needs.
    keep_a = tuple(dict.fromkeys(c for c in a if c in out or c in b))
    keep_b = tuple(dict.fromkeys(c for c in b if c in out or c in a))
    batch = tuple(c for c in out if c in keep_a and c in keep_b)
    fa = tuple(c for c in out if c in keep_a and c not in keep_b)
    fb = tuple(c for c in out if c in keep_b and c not in keep_a)
    contract = tuple(c for c in keep_a if c in keep_b and c not in out)
    red_a = None if keep_a == a else f"{''.join(a)}->{''.join(keep_a)}"
    red_b = None if keep_b == b else f"{''.join(b)}->{''.join(keep_b)}"
    perm_a = tuple(keep_a.index(c) for c in batch + fa + contract)
    perm_b = tuple(keep_b.index(c) for c in batch + contract + fb)
    if out == batch + fa + fb:
        mode, perm_out = "direct", None
    elif out == batch + fb + fa:
        mode, perm_out = "swapped", None
    elif len(fa) <= 1 and len(fb) <= 1:  # matmul straight into a transposed view of out
        mode = "view"
        perm_out = tuple(out.index(c) for c in batch + fa + fb)
    else:
        mode = "transpose"
        perm_out = tuple((batch + fa + fb).index(c) for c in out)
    return red_a, red_b, perm_a, perm_b, len(batch), len(fa), len(fb), len(contract), mode, perm_out


def _operand(x, red, perm, nb, n1, n2):
    """x reduced, transposed by perm and reshaped to [batch..., prod(n1 dims), prod(n2 dims)]."""
    if red is not None:
        x = np.einsum(red, x)
    x = x.transpose(perm)
    s = x.shape
    x = x.reshape(s[:nb] + (int(np.prod(s[nb:nb + n1])), int(np.prod(s[nb + n1:]))))
    # numpy's matmul only calls BLAS for row- or column-major matrices
    st, it = x.strides, x.itemsize
    if not ((st[-1] == it and st[-2] >= it * x.shape[-1])
            or (st[-2] == it and st[-1] >= it * x.shape[-2])):
        x = np.ascontiguousarray(x)
    return x


@kernel("Einsum", dtypes=("float32", "float64", "int32", "int64"))
def einsum(inputs, outputs, attrs):
    out = outputs[0]
    eq = attrs["equation"]
    if len(inputs) == 1:
        ins, o = parse(eq, 1)
        sub = f"{_np_term(ins[0], '...')}->{_np_term(o, '...')}"
        np.copyto(out, np.einsum(sub, inputs[0]))
        return
    a, b = inputs
    red_a, red_b, pa, pb, nb, na, nf, nk, mode, perm_out = _plan(eq, (a.ndim, b.ndim))
    if out.size == 0:
        return
    am = _operand(a, red_a, pa, nb, na, nk)
    bm = _operand(b, red_b, pb, nb, nk, nf)
    bshape = np.broadcast_shapes(am.shape[:nb], bm.shape[:nb])
    # Nothing contracted: an outer product per batch, exactly as matmul with K = 1 would be.
    mm = np.multiply if nk == 0 else _matmul
    with np.errstate(all="ignore"):
        if mode == "direct":
            mm(am, bm, out=out.reshape(bshape + (am.shape[-2], bm.shape[-1])))
        elif mode == "swapped":
            mm(bm.swapaxes(-1, -2), am.swapaxes(-1, -2),
               out=out.reshape(bshape + (bm.shape[-1], am.shape[-2])))
        elif mode == "view":
            v = out.transpose(perm_out)
            if na == 0:
                v = v[..., None, :] if nf else v[..., None, None]
            elif nf == 0:
                v = v[..., None]
            mm(am, bm, out=v)
        else:
            r = mm(am, bm).reshape(_unflat_shape(out, perm_out))
            np.copyto(out, r.transpose(perm_out))


def _matmul(a, b, out=None):
    """np.matmul's result; floats through kernels/cpu/gemm.py (numba's team, OpenBLAS never on
    its own threads)."""
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                       + (a.shape[-2], b.shape[-1]), np.result_type(a, b))
    if out.dtype.kind == "f":
        gemm.matmul_nd(a, b, out)
    else:
        np.matmul(a, b, out=out)
    return out


def _unflat_shape(out, perm_out):
    """The [batch..., fa..., fb...] shape whose perm_out transpose is out's shape."""
    shape = [0] * len(perm_out)
    for i, p in enumerate(perm_out):
        shape[p] = out.shape[i]
    return tuple(shape)
