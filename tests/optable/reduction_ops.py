"""Op table: reduction ops (Sum, Mean, Max, Min, Prod, All, Any, ArgMax, ArgMin)."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, int_edges, special_floats

NUM = ("float32", "float64", "int32", "int64")


def _reduce(op):
    def fn(x, axis, keep=False):
        # A Python axis becomes an int32 constant (known to graph shape inference); an ndarray
        # axis arrives as a tensor (int64 here) and is a placeholder there.
        if not tf.is_tensor(axis):
            axis = tf.constant(axis, tf.int32)
        return getattr(tf.raw_ops, op)(input=x, axis=axis, keep_dims=keep)
    return fn


def _rlen(args):
    x, axis = np.asarray(args[0]), np.asarray(args[1]).reshape(-1)
    n = 1
    for a in {int(a) % max(x.ndim, 1) for a in axis}:
        n *= x.shape[a]
    return n


_SHAPES_AXES = [
    ((), [], False), ((), [], True), ((7,), 0, False), ((7,), -1, True),
    ((3, 5), [0], False), ((3, 5), [1], True), ((3, 5), [0, 1], False), ((3, 5), [-1, 0], True),
    ((2, 3, 4, 5), [1, 3], False), ((2, 3, 4, 5), [0, 2], True), ((2, 3, 4, 5), [3, 1, 0], False),
    ((2, 3, 4, 5), [], False), ((2, 3, 4, 5), np.array([-2, 1], np.int64), False),
    ((0,), 0, False), ((0, 3), [0], False), ((0, 3), [1], True), ((3, 0), [1], False),
    ((2, 0, 3), [0, 2], True), ((0, 3), [0, 1], False),
]
_BIG = [((600, 500), [0, 1], False), ((600, 500), [0], False), ((600, 500), -1, True)]


def _samples(specials, make=arr):
    def samples(dt, rng):
        out = [(make(rng, s, dt), a, k) for s, a, k in _SHAPES_AXES + _BIG]
        if dt.kind == "f":
            out += [(s, a, k) for s, a, k in specials(dt)]
        else:
            e = int_edges(dt)
            out += [(e, 0, False), (np.stack([e, e[::-1], np.roll(e, 3)]), [1], False),
                    (np.stack([e, e[::-1], np.roll(e, 3)]), 0, True)]
        return out
    return samples


def _order_free_specials(dt):
    # Values whose sum/product does not depend on the order TensorFlow adds them in (no
    # finite overflow races such as max + max - max).
    s = special_floats(dt)
    m = np.array([[np.inf, 1, 2], [-np.inf, 0, 3], [np.inf, -np.inf, 1], [np.nan, 1, 1],
                  [-0.0, -0.0, -0.0], [s[5], -s[5], 1.5], [np.inf, 0, 1]], dtype=dt)
    return [(s, 0, False), (m, [1], False), (m, 0, True)]


def _all_specials(dt):
    s = special_floats(dt)
    rng = np.random.default_rng(5)
    m = np.stack([rng.permutation(s) for _ in range(4)])
    return [(s, 0, False), (m, [1], False), (m, [0], True), (s[1:], 0, False)]


def _near_one(rng, shape, dt):
    """Floats of magnitude 0.7..1.3 with random signs: long products stay clear of a finite
    overflow whose inf-or-not would depend on TensorFlow's multiplication order."""
    x = arr(rng, shape, dt)
    if np.dtype(dt).kind == "f":
        x = (arr(rng, shape, dt, 0.7, 1.3) * np.where(x < 0, -1, 1)).astype(dt)
    return x


def _reduce_errors(dt):
    x = np.ones((2, 3), dt)
    return [(x, [2], False), (x, [-3], False), (x, [0, 0], False), (x, [1, -1], True),
            (np.ones((), dt), 0, False)]


def _case(op, specials, grad_ops=(), make=arr):
    return OpCase(op, op, _reduce(op), _samples(specials, make), dtypes=NUM, kind="reduction",
                  reduction_len=_rlen, errors=_reduce_errors, grad=True, grad_ops=grad_ops)


def _bool_samples(dt, rng):
    return [(arr(rng, s, np.bool_), a, k) for s, a, k in _SHAPES_AXES + _BIG[:1]] + [
        (np.zeros((4, 3), bool), [1], False), (np.ones((4, 3), bool), [0], True)]


def _argfn(op):
    def fn(x, dim, output_type=tf.int64):
        return getattr(tf.raw_ops, op)(input=x, dimension=dim, output_type=output_type)
    return fn


def _arg_samples(dt, rng):
    out = [(arr(rng, s, dt), d) for s, d in [
        ((1,), 0), ((7,), 0), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), 3),
        ((2, 3, 4, 5), 0), ((3, 0), 0), ((0, 3), 1), ((600, 500), 0), ((600, 500), 1)]]
    out.append((arr(rng, (4, 6), dt, -1, 1), np.array(1, np.int64)))   # int64 dim, many ties
    if dt.kind == "f":
        s = special_floats(dt)
        rng2 = np.random.default_rng(5)
        m = np.stack([rng2.permutation(s) for _ in range(5)])
        out += [(s, 0), (m, 1), (m, 0), (np.full((3, 4), np.nan, dt), 1),
                (np.array([[np.nan, -np.inf], [-np.inf, np.inf], [-0.0, 0.0]], dt), 1)]
    else:
        e = int_edges(dt)
        out += [(e, 0), (np.stack([e, e[::-1], np.full_like(e, e[0])]), 1)]
    return out


def _half_samples(dt, rng):
    # keep_dims where a result would be 0-d: np.asarray of a 0-d bfloat16 EagerTensor fails
    s = special_floats(dt)
    out = [(arr(rng, sh, dt), a, k or len(sh) == len(np.unique(np.asarray(a) % max(len(sh), 1))))
           for sh, a, k in _SHAPES_AXES if sh != ()]
    return out + [(arr(rng, (60, 50), dt), [0], False), (arr(rng, (60, 50), dt), -1, True),
                  (s[:6], 0, True), (np.full((3, 4), 40000, dt), [0], False)]


def _arg_errors(dt):
    x = np.ones((2, 3), dt)
    return [(x, 2), (x, -3), (np.ones((), dt), 0), (x, [0]), (np.ones((0, 3), dt), 0),
            (np.ones((0,), dt), 0)]


CASES = [
    _case("Sum", _order_free_specials),
    _case("Mean", _order_free_specials),
    _case("Prod", _order_free_specials, grad_ops=("Prod",), make=_near_one),
    # The gradient of Max/Min counts the selected elements with a Sum.
    _case("Max", _all_specials, grad_ops=("Sum",)),
    _case("Min", _all_specials, grad_ops=("Sum",)),
    OpCase("All", "All", _reduce("All"), _bool_samples, dtypes=("bool",), kind="exact",
           errors=lambda dt: [(np.ones((2, 3), bool), [2], False),
                              (np.ones((2, 3), bool), [0, -2], False)]),
    OpCase("Any", "Any", _reduce("Any"), _bool_samples, dtypes=("bool",), kind="exact",
           errors=lambda dt: [(np.ones((2, 3), bool), [-3], False)]),
    OpCase("ArgMax", "ArgMax", _argfn("ArgMax"), _arg_samples, dtypes=NUM, kind="exact",
           errors=_arg_errors),
    OpCase("ArgMin", "ArgMin", _argfn("ArgMin"), _arg_samples, dtypes=NUM, kind="exact",
           errors=_arg_errors),
    OpCase("ArgMax-int32", "ArgMax", lambda x, d: tf.raw_ops.ArgMax(
        input=x, dimension=d, output_type=tf.int32), _arg_samples, dtypes=("float32", "int64"),
        kind="exact"),
    OpCase("ArgMin-int32", "ArgMin", lambda x, d: tf.math.argmin(x, d, output_type=tf.int32),
           _arg_samples, dtypes=("float64", "int32"), kind="exact"),
    OpCase("reduce_sum-public", "Sum", lambda x: tf.reduce_sum(x),
           lambda dt, rng: [(arr(rng, s, dt),) for s in [(), (0,), (3, 4), (2, 3, 4)]],
           dtypes=NUM, kind="reduction", reduction_len=lambda a: a[0].size, grad=True),
    OpCase("reduce_mean-public", "Mean", lambda x: tf.reduce_mean(x, axis=-1, keepdims=True),
           lambda dt, rng: [(arr(rng, s, dt),) for s in [(3,), (3, 4), (2, 0), (2, 3, 4)]],
           dtypes=NUM, kind="reduction", reduction_len=lambda a: a[0].shape[-1], grad=True),
    # float16/bfloat16: summed in float32, rounded once
    OpCase("Sum-half", "Sum", _reduce("Sum"), _half_samples, dtypes=("float16", "bfloat16"),
           kind="reduction", reduction_len=_rlen, grad=True),
    OpCase("Mean-half", "Mean", _reduce("Mean"), _half_samples, dtypes=("float16", "bfloat16"),
           kind="reduction", reduction_len=_rlen, grad=True),
]
