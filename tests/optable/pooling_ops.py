"""Op table: MaxPool, AvgPool and their gradients (padding variants, strides, NCHW, ties, NaN)."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, special_floats

HALF = ("float16", "bfloat16")


def _k(h, w):
    return [1, h, w, 1]


# (input shape, ksize, strides, padding, explicit paddings)
POOL_SHAPES = [
    ((1, 4, 4, 1), _k(2, 2), _k(2, 2), "VALID", ()),
    ((2, 5, 7, 3), _k(3, 3), _k(2, 2), "SAME", ()),
    ((1, 6, 6, 2), _k(2, 3), _k(1, 2), "SAME", ()),
    ((2, 7, 5, 3), _k(3, 2), _k(1, 1), "VALID", ()),
    ((1, 2, 2, 3), _k(5, 5), _k(1, 1), "SAME", ()),          # window larger than the input
    ((0, 4, 4, 3), _k(2, 2), _k(2, 2), "VALID", ()),         # empty batch
    ((1, 112, 112, 64), _k(3, 3), _k(2, 2), "SAME", ()),     # ResNet stem pool
    ((2, 9, 8, 3), _k(2, 2), _k(3, 3), "VALID", ()),         # gaps between windows
    ((2, 7, 9, 3), _k(2, 2), _k(2, 2), "SAME", ()),          # tiling, the last ones cut short
    ((2, 26, 26, 32), _k(2, 2), _k(2, 2), "VALID", ()),      # a Keras CNN's pool (tiling)
]


def _pool_samples(dt, rng, no_channels=False):
    out = [(arr(rng, s, dt), k, st, p) for s, k, st, p, _ in POOL_SHAPES]
    if no_channels:   # stock float32 AvgPoolGrad refuses these: AvgPool checks them forward only
        out.append((arr(rng, (1, 4, 4, 0), dt), _k(2, 2), _k(2, 2), "SAME"))
    # few distinct values: ties inside windows (MaxPoolGrad picks the first maximum)
    out.append((rng.integers(0, 3, (2, 6, 6, 4)).astype(dt), _k(3, 3), _k(2, 2), "SAME"))
    out.append((rng.integers(0, 2, (1, 5, 5, 3)).astype(dt), _k(2, 2), _k(1, 1), "VALID"))
    out.append((np.resize(special_floats(dt), (1, 6, 6, 2)), _k(2, 2), _k(2, 2), "VALID"))
    out.append((np.resize(special_floats(dt), (1, 5, 5, 3)), _k(3, 3), _k(2, 2), "SAME"))
    return out


def _max_pool(x, ksize, strides, padding, pads=(), fmt="NHWC"):
    return tf.raw_ops.MaxPool(input=x, ksize=ksize, strides=strides, padding=padding,
                              explicit_paddings=list(pads), data_format=fmt)


def _avg_pool(x, ksize, strides, padding, fmt="NHWC"):
    return tf.raw_ops.AvgPool(value=x, ksize=ksize, strides=strides, padding=padding,
                              data_format=fmt)


def max_pool_samples(dt, rng):
    out = [s + ((),) for s in _pool_samples(dt, rng, no_channels=True)]
    out.append((arr(rng, (1, 5, 6, 2), dt), _k(3, 2), _k(2, 2), "EXPLICIT",
                (0, 0, 1, 2, 0, 1, 0, 0)))
    out.append((arr(rng, (1, 3, 3, 2), dt), _k(2, 2), _k(1, 1), "EXPLICIT",
                (0, 0, 1, 1, 1, 1, 0, 0)))
    # windows of NaN only, and of -Inf and NaN: the result is the dtype's lowest value / -Inf
    nan_win = np.array([np.nan] * 4 + [-np.inf, np.nan, np.nan, -np.inf]).astype(dt)
    out.append((nan_win.reshape(1, 2, 4, 1), _k(2, 2), _k(2, 2), "VALID", ()))
    return out


def avg_pool_samples(dt, rng):
    out = _pool_samples(dt, rng)
    if np.dtype(dt) == np.float16:
        # stock sums float16 windows in float16 (ours in float32): with +-max in one window the
        # answer depends on precision and order (65504 + 1.5 - 65504 is 0 there), so no +-max
        big = np.float16(65504)
        out = [(np.where(np.abs(a[0]) == big, np.float16(1), a[0]),) + a[1:] for a in out]
    return out


def avg_pool_empty_output_samples(dt, rng):
    # eager AvgPool gives a 0x0 output where the window is one larger than the input (graph
    # shape inference rejects it); stock float32 AvgPoolGrad refuses inputs with no channels
    return [(arr(rng, (1, 3, 3, 3), dt), _k(4, 4), _k(1, 1), "VALID"),
            (arr(rng, (2, 3, 4, 2), dt), _k(5, 3), _k(2, 1), "VALID"),
            (arr(rng, (1, 4, 4, 0), dt), _k(2, 2), _k(2, 2), "SAME")]


def _errors(dt, explicit):
    rng = np.random.default_rng(0)
    x = arr(rng, (1, 6, 6, 3), dt)
    out = [(arr(rng, (6, 6, 3), dt), _k(2, 2), _k(2, 2), "VALID"),   # rank 3
           # float64 pools run on TF's own NHWC-only kernels
           (arr(rng, (1, 3, 6, 6), np.float64), [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW"),
           (x, [2, 2, 2, 1], _k(2, 2), "VALID"),                       # batch window
           (x, _k(2, 2), [2, 2, 2, 1], "VALID"),                       # batch stride
           (x, _k(2, 0), _k(2, 2), "VALID"),                           # zero window
           (x, _k(2, 2), [1, 2, 2], "VALID"),                          # strides length
           (x, _k(9, 9), _k(1, 1), "VALID")]                           # negative output size
    if explicit:
        out = [a[:4] + ((),) + a[4:] for a in out]
        out.append((x, _k(2, 2), _k(1, 1), "EXPLICIT", (0, 0, 2, 0, 0, 0, 0, 0)))
    return out


def _max_pool_grad(x, y, dy, ksize, strides, padding, fmt="NHWC"):
    return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=dy, ksize=ksize,
                                  strides=strides, padding=padding, data_format=fmt)


def _out_hw(shape, k, st, padding):
    if padding == "SAME":
        return [-(-shape[i] // st[i]) for i in (1, 2)]
    return [(shape[i] - k[i]) // st[i] + 1 for i in (1, 2)]


def max_pool_grad_samples(dt, rng):
    out = []
    for x, k, st, p in _pool_samples(dt, rng):
        oh, ow = _out_hw(x.shape, k, st, p)
        shape = (x.shape[0], oh, ow, x.shape[3])
        y = np.zeros(shape, dt)   # TF's CPU kernel recomputes the maxima; only the shape counts
        out.append((x, y, arr(rng, shape, dt), k, st, p))
    return out


def max_pool_grad_errors(dt):
    rng = np.random.default_rng(0)
    x = arr(rng, (1, 4, 4, 3), dt)
    y = arr(rng, (1, 2, 2, 3), dt)
    return [(x, arr(rng, (1, 3, 3, 3), dt), y, _k(2, 2), _k(2, 2), "VALID"),    # orig_output
            (x, y, arr(rng, (1, 2, 3, 3), dt), _k(2, 2), _k(2, 2), "VALID"),    # grad shape
            (arr(rng, (4, 4, 3), dt), y, y, _k(2, 2), _k(2, 2), "VALID"),       # rank
            (np.ascontiguousarray(x.transpose(0, 3, 1, 2)), y.transpose(0, 3, 1, 2),
             y.transpose(0, 3, 1, 2), [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW")]


def _avg_pool_grad(sizes, dy, ksize, strides, padding):
    return tf.raw_ops.AvgPoolGrad(orig_input_shape=sizes, grad=dy, ksize=ksize, strides=strides,
                                  padding=padding)


def avg_pool_grad_samples(dt, rng):
    out = []
    samples = avg_pool_samples(dt, rng) + avg_pool_empty_output_samples(dt, rng)[:2]
    for x, k, st, p in samples:
        oh, ow = _out_hw(x.shape, k, st, p)
        out.append((list(x.shape), arr(rng, (x.shape[0], oh, ow, x.shape[3]), dt), k, st, p))
    return out


def _nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def _nchw_attr(v):
    return [v[0], v[3], v[1], v[2]]


def nchw_pool_samples(dt, rng):
    return [(_nchw(x), _nchw_attr(k), _nchw_attr(st), p)
            for x, k, st, p in _pool_samples(dt, rng)[:5]]


def _pool_len(args):
    return args[1][1] * args[1][2]


CASES = [
    # float16/bfloat16: widened to float32, rounded once; stock's float16 pooling sums round in
    # float16 (measured within 1 eps here), inside the reduction bound
    OpCase("MaxPool", "MaxPool", _max_pool, max_pool_samples, dtypes=("float32", "float64") + HALF,
           kind="exact", errors=lambda dt: _errors(dt, True), grad=True, grad_ops=("MaxPoolGrad",)),
    OpCase("AvgPool", "AvgPool", _avg_pool, avg_pool_samples, dtypes=("float32", "float64") + HALF,
           kind="reduction", reduction_len=_pool_len, errors=lambda dt: _errors(dt, False),
           grad=True, grad_ops=("AvgPoolGrad",)),
    OpCase("AvgPool_empty_output", "AvgPool", _avg_pool, avg_pool_empty_output_samples,
           dtypes=("float32", "float64"), kind="reduction", reduction_len=_pool_len,
           shape_check=False),
    # NCHW: float32 only (stock float64 pools are NHWC-only: an error case above); stock
    # MaxPoolGrad rejects NCHW on CPU, so the NCHW MaxPool case checks no gradient
    OpCase("MaxPool_NCHW", "MaxPool",
           lambda x, k, st, p: _max_pool(x, k, st, p, fmt="NCHW"),
           nchw_pool_samples, dtypes=("float32",), kind="exact"),
    OpCase("AvgPool_NCHW", "AvgPool",
           lambda x, k, st, p: _avg_pool(x, k, st, p, fmt="NCHW"),
           nchw_pool_samples, dtypes=("float32",), kind="reduction",
           reduction_len=lambda a: a[1][2] * a[1][3], grad=True, grad_ops=("AvgPoolGrad",)),
    OpCase("MaxPoolGrad", "MaxPoolGrad", _max_pool_grad, max_pool_grad_samples,
           dtypes=("float32", "float64") + HALF, kind="reduction", reduction_len=lambda a: 4 * _pool_len(
               a[2:]), errors=max_pool_grad_errors),
    OpCase("AvgPoolGrad", "AvgPoolGrad", _avg_pool_grad, avg_pool_grad_samples,
           dtypes=("float32", "float64") + HALF, kind="reduction",
           reduction_len=lambda a: 4 * _pool_len(a[1:]),
           errors=lambda dt: [([1, 4, 4, 0], np.zeros((1, 2, 2, 0), np.float32), _k(2, 2),
                               _k(2, 2), "SAME")]),
    # not as errors: a 3-element orig_input_shape (stock oneDNN aborts the process) and a
    # mismatched grad shape (stock does not check; ours hands it back to TensorFlow)
]
