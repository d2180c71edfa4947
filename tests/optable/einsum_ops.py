"""Op table: Einsum (one and two operands; the Keras attention/EinsumDense equations)."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, int_edges
from .matmul_ops import _specials


def _arr(rng, shape, dt, lo=-3, hi=3):
    return np.asarray(arr(rng, shape, dt, lo, hi))  # 0-d as an array (a tensor)

R = tf.raw_ops
NUM = ("float32", "float64", "int32", "int64")

# (equation, operand shapes)
TWO = [
    ("abc,cd->abd", (2, 3, 4), (4, 5)),                 # EinsumDense
    ("abc,cde->abde", (2, 3, 4), (4, 2, 5)),            # EinsumDense, multi-head projection
    ("abcd,cde->abe", (2, 3, 4, 5), (4, 5, 6)),         # attention output projection
    ("aecd,abcd->acbe", (2, 5, 3, 4), (2, 6, 3, 4)),    # MultiHeadAttention scores
    ("acbe,aecd->abcd", (2, 3, 6, 5), (2, 5, 3, 4)),    # MultiHeadAttention combine
    ("bqhd,bkhd->bhqk", (2, 4, 3, 5), (2, 6, 3, 5)),
    ("ij,jk->ik", (3, 4), (4, 5)), ("ij,kj->ik", (3, 4), (5, 4)), ("i,j->ij", (3,), (4,)),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("ij,ij->ij", (3, 4), (3, 4)),
    ("ij,ij->", (3, 4), (3, 4)), ("ij,kl->ik", (3, 4), (5, 6)), ("ii,ij->ij", (3, 3), (3, 4)),
    ("ij,jk->ki", (3, 4), (4, 5)), ("ab,bc->ca", (3, 4), (4, 2)), ("bi,b->ib", (3, 4), (3,)),
    ("bi,bj->jbi", (2, 3), (2, 4)), ("abc,cde->aedb", (2, 3, 4), (4, 2, 5)),
    ("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),    # broadcasting ellipsis
    ("...ij,jk->...ik", (5, 3, 4), (4, 2)), ("...ij,jk->ik...", (2, 3, 4), (4, 5)),
    ("i...,i...->...", (3, 2, 2), (3, 1, 2)), ("ij,jk->...ik", (3, 4), (4, 2)),
    (",->", (), ()), ("i,->i", (4,), ()), ("ij,jk->ik", (3, 0), (0, 4)),
    ("ij,jk->ik", (0, 3), (3, 4)), ("aB,Bc->ac", (2, 3), (3, 4)),
]
# Long contractions, values in [-1, 1] (the tolerance assumes O(1) products).
BIG = [("ij,jk->ik", (64, 256), (256, 128)), ("abcd,aecd->acbe", (4, 32, 4, 16), (4, 48, 4, 16))]
ONE = [("ij->ji", (3, 4)), ("ii->i", (3, 3)), ("ii->", (4, 4)), ("ij->", (3, 4)),
       ("iij->j", (2, 2, 3)), ("...i->...", (2, 3, 4)), ("ij->j", (0, 3)), ("abc->cab", (2, 3, 4))]


def _einsum(eq, *xs):
    return R.Einsum(inputs=list(xs), equation=eq)


def _special(dt):
    """NaN/Inf/signed zeros/tiny with order-independent results (ints: wrap-around edges);
    +-max would make the result depend on the summation order."""
    if dt.kind == "f" or dt.name == "bfloat16":
        return _specials(dt)
    e = int_edges(dt)
    return e.reshape(1, -1), np.stack([np.ones_like(e), e, e[::-1]], axis=1)


def _two_samples(dt, rng):
    out = [(eq, _arr(rng, a, dt), _arr(rng, b, dt)) for eq, a, b in TWO]
    out += [(eq, _arr(rng, a, dt, -1, 1), _arr(rng, b, dt, -1, 1)) for eq, a, b in BIG]
    a, b = _special(dt)
    return out + [("ij,jk->ik", a, b), ("ij,jk->ki", a, b), ("ij,kj->ik", b.T.copy(), a)]


def _one_samples(dt, rng):
    a, _ = _special(dt)
    return [(eq, _arr(rng, x, dt)) for eq, x in ONE] + [("ij->i", a), ("ij->ji", a)]


def _len(args):
    """Terms summed into one output element: the product of the contracted dimensions."""
    eq, *xs = args
    ins, out = eq.replace("...", "").split("->")
    dims = {}
    for t, x in zip(ins.split(","), xs):
        for c, d in zip(t[::-1], np.shape(x)[::-1]):
            dims[c] = d
    n = 1
    for c, d in dims.items():
        if c not in out:
            n *= d
    return max(1, n)


def _errors(dt):
    z = lambda *s: np.zeros(s, dt)  # noqa: E731
    return [("ij,jk", z(2, 3), z(3, 4)), ("ij,jk->ik", z(2, 3), z(2, 3)),
            ("ijk,jk->ik", z(2, 3), z(3, 4)), ("bij,bjk->bik", z(2, 2, 3), z(1, 3, 4)),
            ("...ij,...jk->...ik", z(2, 2, 3), z(3, 3, 4)), ("...ij,jk->ik", z(5, 2, 3), z(3, 4)),
            ("ij->jk->k", z(2, 3), z(3, 4)), ("ii->i", z(2, 3))]


def _half_samples(dt, rng):
    """0-d bfloat16 tensors cannot be read back here (TensorFlow's __array__ returns an
    ml_dtypes scalar, which numpy 2 refuses): bfloat16 leaves out scalar operands and results."""
    out = _two_samples(dt, rng)
    if dt.name == "bfloat16":
        out = [a for a in out if not a[0].endswith("->") and all(x.ndim for x in a[1:])]
    return out


CASES = [
    # float16/bfloat16: widened to float32, rounded once; stock's float16 contractions sum in
    # float16 (measured 7 eps off over 64 terms), inside the reduction bound; bfloat16 is equal
    OpCase("Einsum_half", "Einsum", _einsum, _half_samples, dtypes=("float16", "bfloat16"),
           kind="reduction", reduction_len=_len, grad=True, grad_args=(1, 2),
           grad_ops=("Einsum",)),
    OpCase("Einsum", "Einsum", _einsum, _two_samples, dtypes=NUM, kind="reduction",
           reduction_len=_len, grad=True, grad_args=(1, 2), grad_ops=("Einsum",),
           errors=_errors),
    OpCase("Einsum_one", "Einsum", _einsum, _one_samples, dtypes=NUM, kind="reduction",
           reduction_len=_len, grad=True, grad_args=(1,)),
    OpCase("Einsum_tf_einsum", "Einsum", lambda eq, a, b: tf.einsum(eq, a, b),
           lambda dt, rng: [(eq, _arr(rng, a, dt), _arr(rng, b, dt)) for eq, a, b in TWO[:6]],
           dtypes=("float32", "float64"), kind="reduction", reduction_len=_len, grad=True,
           grad_args=(1, 2), grad_ops=("Einsum",)),
]
