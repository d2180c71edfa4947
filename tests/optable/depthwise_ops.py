"""Op table: DepthwiseConv2dNative and its backprops (strides, padding variants, dilations,
channel multipliers; NCHW where stock takes it).

Stock runs float32 on oneDNN and float64 on Eigen kernels that accept less (no dilations, no
unequal strides, NHWC only) and raise other classes; the error lists hold both.
"""
import ml_dtypes
import numpy as np
import tensorflow as tf

from . import OpCase, arr, special_floats
from .conv_ops import _out_shape

S1, S2 = [1, 1, 1, 1], [1, 2, 2, 1]
F32, F64 = np.float32, np.float64
HALF = ("float16", "bfloat16")   # widened to float32, rounded once


def _dw(x, f, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=f, strides=strides, padding=padding, dilations=dilations,
        explicit_paddings=list(pads), data_format=fmt)


def _bi(sizes, f, dy, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
        input_sizes=sizes, filter=f, out_backprop=dy, strides=strides, padding=padding,
        dilations=dilations, explicit_paddings=list(pads), data_format=fmt)


def _bf(x, sizes, dy, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
        input=x, filter_sizes=sizes, out_backprop=dy, strides=strides, padding=padding,
        dilations=dilations, explicit_paddings=list(pads), data_format=fmt)


def _x(rng, shape, dt):
    return arr(rng, shape, dt, -1, 1)


# (input shape, filter shape, strides, padding, explicit paddings)
SHAPES = [
    ((1, 5, 5, 3), (3, 3, 3, 1), S1, "SAME", ()),
    ((2, 7, 6, 3), (3, 2, 3, 2), S1, "VALID", ()),            # channel multiplier 2
    ((2, 9, 9, 4), (3, 3, 4, 1), S2, "SAME", ()),
    ((1, 8, 8, 2), (5, 5, 2, 3), S2, "VALID", ()),
    ((1, 6, 6, 3), (3, 3, 3, 2), S1, "EXPLICIT", (0, 0, 1, 2, 0, 1, 0, 0)),
    ((1, 2, 2, 3), (3, 3, 3, 1), S1, "SAME", ()),             # filter larger than the input
    ((1, 3, 3, 3), (3, 3, 3, 1), S1, "VALID", ()),            # 1x1 output
    ((2, 4, 4, 5), (1, 1, 5, 2), S1, "VALID", ()),            # pointwise
    ((1, 10, 10, 3), (3, 3, 3, 1), S2, "VALID", ()),
    ((1, 112, 112, 32), (3, 3, 32, 1), S1, "SAME", ()),       # MobileNetV2-sized layer
]

# oneDNN (float32) only: dilations
F32_SHAPES = [
    ((1, 9, 9, 2), (3, 3, 2, 1), S1, "SAME", (), [1, 2, 2, 1]),
    ((1, 10, 11, 2), (3, 2, 2, 2), S2, "VALID", (), [1, 2, 3, 1]),
]


def dw_unequal_samples(dt, rng):
    # oneDNN (float32) only; rows strided and columns not, or the other way round
    return [(_x(rng, (2, 9, 8, 3), dt), _x(rng, (3, 3, 3, 1), dt), [1, 2, 1, 1], "SAME", S1, ()),
            (_x(rng, (1, 8, 11, 4), dt), _x(rng, (3, 2, 4, 2), dt), [1, 1, 2, 1], "VALID", S1, ()),
            (_x(rng, (1, 30, 20, 8), dt), _x(rng, (3, 3, 8, 1), dt), [1, 3, 1, 1], "SAME", S1, ())]


def _special(dt):
    sp = special_floats(dt)
    # no +-max: whether a sum of huge terms overflows depends on the summation order
    return sp[np.abs(sp) != ml_dtypes.finfo(dt).max]


def dw_samples(dt, rng, big=True):
    shapes = SHAPES if big else SHAPES[:-1]
    out = [(_x(rng, xs, dt), _x(rng, fs, dt), st, pad, S1, p) for xs, fs, st, pad, p in shapes]
    sp = np.resize(_special(dt), (1, 6, 6, 2))
    out.append((sp, _x(rng, (3, 3, 2, 2), dt), S1, "VALID", S1, ()))
    out.append((sp, _x(rng, (3, 3, 2, 1), dt), S2, "SAME", S1, ()))
    return out


def dw_special_filter_samples(dt, rng):
    fsp = np.resize(_special(dt), (3, 3, 2, 1))
    out = [(_x(rng, (1, 6, 6, 2), dt), fsp, S1, "VALID", S1, ())]
    if dt == F32:
        # TF's float64 kernel multiplies padding zeros by the filter (NaN for Inf): not ours
        out.append((_x(rng, (1, 6, 6, 2), dt), fsp, S2, "SAME", S1, ()))
    return out


def dw_empty_samples(dt, rng):
    # float64 only: stock float32 (oneDNN) returns input-shaped results, which we leave to TF
    return [(_x(rng, (0, 5, 5, 3), dt), _x(rng, (3, 3, 3, 1), dt), S1, "SAME", S1, ()),
            (_x(rng, (1, 5, 5, 3), dt), _x(rng, (3, 3, 3, 0), dt), S1, "SAME", S1, ()),
            (_x(rng, (1, 5, 5, 3), dt), _x(rng, (0, 3, 3, 2), dt), S1, "SAME", S1, ())]


def dw_zero_output_samples(dt, rng):
    return [(_x(rng, (1, 2, 2, 3), dt), _x(rng, (3, 3, 3, 1), dt), S1, "VALID", S1, ())]


def dw_f32_samples(dt, rng):
    return [(_x(rng, xs, dt), _x(rng, fs, dt), st, pad, dil, p) for xs, fs, st, pad, p, dil
            in F32_SHAPES]


def _nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def _nchw_attr(v):
    return [v[0], v[3], v[1], v[2]]


def _nchw_pads(p):
    return tuple(np.array(p).reshape(4, 2)[[0, 3, 1, 2]].ravel()) if p else ()


def dw_nchw_samples(dt, rng):
    # no explicit padding: its gradient would need NCHW backprops with explicit padding, which
    # stock runs on its NHWC-only Eigen kernels
    return [(_nchw(x), f, _nchw_attr(st), pad, _nchw_attr(dil), _nchw_pads(p))
            for x, f, st, pad, dil, p in dw_samples(dt, rng, big=False) if pad != "EXPLICIT"]


def dw_errors(dt):
    rng = np.random.default_rng(0)
    x, x64 = _x(rng, (1, 5, 5, 3), dt), _x(rng, (1, 5, 5, 3), F64)
    f, f64 = _x(rng, (3, 3, 3, 2), dt), _x(rng, (3, 3, 3, 2), F64)
    return [
        (x, _x(rng, (3, 3, 2, 2), dt)),                         # depth not a multiple
        (x, f[..., 0]),                                         # filter rank
        (x, f, [2, 1, 1, 1]),                                   # batch stride
        (x, f, [1, 0, 0, 1]),                                   # zero stride
        (x, f, S1, "SAME", [2, 1, 1, 1]),                       # batch dilation
        (x, f[:, :, :, :0]),                                    # empty filter (oneDNN)
        (x, _x(rng, (7, 7, 3, 1), dt), S1, "VALID"),            # negative output size
        # float64 runs TF's Eigen kernel: NHWC only, no dilations, equal strides, same depth
        (x64, f64, [1, 2, 1, 1]),
        (x64, f64, S1, "SAME", [1, 2, 2, 1]),
        (x64, f64, [2, 1, 1, 1]),
        (_nchw(x64), f64, S1, "SAME", S1, (), "NCHW"),
        (_x(rng, (1, 5, 5, 6), F64), f64),
        (x64[0], f64),                                          # input rank (oneDNN aborts)
        (x64, f64, S1, "SAME", S1, (0, 0, 1, 1, 1, 1, 0, 0)),   # explicit pads with SAME
        (x64, f64, S1, "EXPLICIT", S1, (0, 0, 1, 1, 1, 1, 0)),
        (x64, f64, S1, "EXPLICIT", S1, (0, 0, -1, 1, 1, 1, 0, 0)),
        (x64, f64, S1, "EXPLICIT", S1, (1, 0, 1, 1, 1, 1, 0, 0)),
    ]


def _bi_samples(dt, rng, nchw=False):
    out = []
    for x, f, st, pad, dil, p in dw_samples(dt, rng, big=False) + dw_special_filter_samples(
            dt, rng):
        if nchw and pad == "EXPLICIT":
            continue   # stock backprops with explicit padding run on Eigen: NHWC only
        dy = _x(rng, _out_shape(x.shape, f.shape[:2] + (1, f.shape[2] * f.shape[3]), st, pad,
                                dil, p), dt)
        if not nchw:
            out.append((list(x.shape), f, dy, st, pad, dil, p))
        else:
            xs = x.shape
            out.append(([xs[0], xs[3], xs[1], xs[2]], f, _nchw(dy), _nchw_attr(st), pad,
                        _nchw_attr(dil), _nchw_pads(p)))
    return out


def bi_samples(dt, rng):
    out = _bi_samples(dt, rng)
    # gradient of the MobileNetV2-sized layer
    out.append(([1, 56, 56, 96], _x(rng, (3, 3, 96, 1), dt), _x(rng, (1, 28, 28, 96), dt),
                S2, "SAME", S1, ()))
    # Eigen (float64, and explicit padding) multiplies padding zeros by the filter: only
    # finite filters there
    out = [a for a in out if np.isfinite(a[1]).all() or (dt == F32 and a[4] != "EXPLICIT")]
    return out


def _bf_samples(dt, rng, nchw=False):
    out = []
    for sizes, f, dy, st, pad, dil, p in _bi_samples(dt, rng, nchw):
        x = _x(rng, sizes, dt)
        if not np.isfinite(f).all():
            x = np.resize(_special(dt), sizes)
        out.append((x, list(f.shape), dy, st, pad, dil, p))
    return out


def bf_samples(dt, rng):
    out = _bf_samples(dt, rng)
    out.append((_x(rng, (1, 56, 56, 96), dt), [3, 3, 96, 1], _x(rng, (1, 28, 28, 96), dt),
                S2, "SAME", S1, ()))
    sp = np.resize(_special(dt), (1, 6, 6, 2))
    if dt == F32:
        # Eigen (float64) multiplies padded input zeros by out_backprop (NaN for Inf)
        out.append((_x(rng, (1, 6, 6, 2), dt), [3, 3, 2, 1], sp, S1, "SAME", S1, ()))
    out.append((_x(rng, (1, 8, 8, 2), dt), [3, 3, 2, 1], sp, S1, "VALID", S1, ()))
    return out


def bi_errors(dt):
    rng = np.random.default_rng(0)
    f, f64 = _x(rng, (3, 3, 3, 2), dt), _x(rng, (3, 3, 3, 2), F64)
    dy, dy64 = _x(rng, (1, 5, 5, 6), dt), _x(rng, (1, 5, 5, 6), F64)
    return [
        ([1, 5, 5, 4], f, _x(rng, (1, 5, 5, 8), dt)),           # depth not a multiple
        ([1, 5, 5, 3], f[..., 0], dy),                          # filter rank
        ([1, 5, 5, 3], f, dy, [2, 1, 1, 1]),                    # batch stride
        ([1, 5, 5, 3], f64, dy64[:, :4]),                       # out_backprop rows (Eigen)
        ([5, 5], f64, dy64),                                    # input_sizes length (Eigen)
        ([1, -5, 5, 3], f64, dy64),                             # negative size (oneDNN aborts)
        ([1, 5, 5, 3], f64, dy64[:, ::2], [1, 2, 1, 1]),        # unequal strides (Eigen)
        ([1, 3, 5, 5], f64, _nchw(dy64), S1, "SAME", S1, (), "NCHW"),
        ([1, 5, 5, 4], f64, _x(rng, (1, 5, 5, 8), F64)),        # depth (Eigen)
    ]


def bf_errors(dt):
    rng = np.random.default_rng(0)
    x, x64 = _x(rng, (1, 5, 5, 3), dt), _x(rng, (1, 5, 5, 3), F64)
    dy, dy64 = _x(rng, (1, 5, 5, 6), dt), _x(rng, (1, 5, 5, 6), F64)
    return [
        (x, [3, 3, 4, 2], _x(rng, (1, 5, 5, 8), dt)),           # depth not a multiple
        (x, [3, 3, 6], dy),                                     # filter_sizes length
        (x, [3, 3, 3, 2], dy, [1, 1, 1, 2]),                    # depth stride
        (x64, [3, 3, 3, 2], dy64[:, :4]),                       # out_backprop rows (Eigen)
        (x64, [3, 3, 2, 3], dy64),                              # depth (Eigen)
        (_nchw(x64), [3, 3, 3, 2], _nchw(dy64), S1, "SAME", S1, (), "NCHW"),
    ]


def _dw_len(args):
    return args[1].shape[0] * args[1].shape[1]


def _bi_len(args):
    return args[1].shape[0] * args[1].shape[1] * args[1].shape[3]


def _bf_len(args):
    return max(1, args[2].size // max(1, args[1][2] * args[1][3]))


GRAD_OPS = ("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")

CASES = [
    OpCase("DepthwiseConv2dNative", "DepthwiseConv2dNative", _dw, dw_samples,
           dtypes=("float32", "float64") + HALF, kind="reduction", reduction_len=_dw_len,
           errors=dw_errors, grad=True, grad_ops=GRAD_OPS),
    # no gradient: stock backprops ignore dilations, so we leave dilated backprops to TF
    OpCase("DepthwiseConv2dNative_dilated_f32", "DepthwiseConv2dNative", _dw, dw_f32_samples,
           dtypes=("float32",), kind="reduction", reduction_len=_dw_len),
    OpCase("DepthwiseConv2dNative_unequal_strides_f32", "DepthwiseConv2dNative", _dw,
           dw_unequal_samples, dtypes=("float32",), kind="reduction", reduction_len=_dw_len,
           grad=True, grad_ops=GRAD_OPS),
    OpCase("DepthwiseConv2dNative_special_filter", "DepthwiseConv2dNative", _dw,
           dw_special_filter_samples, dtypes=("float32", "float64"), kind="reduction",
           reduction_len=_dw_len),
    # no gradient: stock float64 filter gradients of empty inputs are uninitialised memory
    OpCase("DepthwiseConv2dNative_empty_f64", "DepthwiseConv2dNative", _dw, dw_empty_samples,
           dtypes=("float64",), kind="reduction", reduction_len=_dw_len),
    # TF's graph shape inference rejects a filter larger than a VALID input; eager float64 gives
    # a 0x0 output
    OpCase("DepthwiseConv2dNative_zero_output_f64", "DepthwiseConv2dNative", _dw,
           dw_zero_output_samples, dtypes=("float64",), kind="reduction", reduction_len=_dw_len,
           shape_check=False),
    OpCase("DepthwiseConv2dNative_NCHW", "DepthwiseConv2dNative",
           lambda x, f, st, pad, dil, p: _dw(x, f, st, pad, dil, p, "NCHW"), dw_nchw_samples,
           dtypes=("float32",), kind="reduction", reduction_len=_dw_len, grad=True,
           grad_ops=GRAD_OPS),
    OpCase("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropInput", _bi,
           bi_samples, dtypes=("float32", "float64") + HALF, kind="reduction", reduction_len=_bi_len,
           errors=bi_errors, grad=True),
    OpCase("DepthwiseConv2dNativeBackpropInput_NCHW", "DepthwiseConv2dNativeBackpropInput",
           lambda s, f, dy, st, pad, dil, p: _bi(s, f, dy, st, pad, dil, p, "NCHW"),
           lambda dt, rng: _bi_samples(dt, rng, nchw=True), dtypes=("float32",),
           kind="reduction", reduction_len=_bi_len),
    OpCase("DepthwiseConv2dNativeBackpropFilter", "DepthwiseConv2dNativeBackpropFilter", _bf,
           bf_samples, dtypes=("float32", "float64") + HALF, kind="reduction", reduction_len=_bf_len,
           errors=bf_errors, grad=True),
    OpCase("DepthwiseConv2dNativeBackpropFilter_NCHW", "DepthwiseConv2dNativeBackpropFilter",
           lambda x, s, dy, st, pad, dil, p: _bf(x, s, dy, st, pad, dil, p, "NCHW"),
           lambda dt, rng: _bf_samples(dt, rng, nchw=True), dtypes=("float32",),
           kind="reduction", reduction_len=_bf_len),
]
