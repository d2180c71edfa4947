"""Op table: Conv2D and its backprops (NHWC and NCHW, strides, dilations, padding variants)."""
import ml_dtypes
import numpy as np
import tensorflow as tf

from . import OpCase, arr, special_floats

S1, S2 = [1, 1, 1, 1], [1, 2, 2, 1]

HALF = ("float16", "bfloat16")


def _conv(x, f, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.Conv2D(input=x, filter=f, strides=strides, padding=padding,
                             dilations=dilations, explicit_paddings=list(pads), data_format=fmt)


def _x(rng, shape, dt):
    # values in [-1, 1): sums of kh*kw*cin products stay O(sqrt(n)), as the tolerance assumes
    return arr(rng, shape, dt, -1, 1)


# (input shape, filter shape, strides, padding, dilations, explicit paddings)
CONV_SHAPES = [
    ((1, 5, 5, 3), (3, 3, 3, 4), S1, "SAME", S1, ()),
    ((2, 7, 6, 3), (3, 2, 3, 5), S1, "VALID", S1, ()),
    ((2, 9, 9, 4), (3, 3, 4, 6), S2, "SAME", S1, ()),
    ((1, 8, 7, 3), (3, 3, 3, 2), [1, 2, 1, 1], "VALID", S1, ()),
    ((1, 9, 9, 2), (3, 3, 2, 3), S1, "SAME", [1, 2, 2, 1], ()),
    ((1, 10, 10, 2), (2, 2, 2, 3), S2, "VALID", [1, 2, 2, 1], ()),
    ((2, 6, 6, 8), (1, 1, 8, 4), S1, "VALID", S1, ()),
    ((1, 7, 7, 4), (1, 1, 4, 3), S2, "SAME", S1, ()),
    ((1, 6, 6, 3), (3, 3, 3, 4), S1, "EXPLICIT", S1, (0, 0, 1, 2, 0, 1, 0, 0)),
    ((1, 2, 2, 3), (3, 3, 3, 4), S1, "SAME", S1, ()),          # filter larger than the input
    ((1, 3, 3, 3), (3, 3, 3, 2), S1, "VALID", S1, ()),          # 1x1 output
    ((1, 56, 56, 64), (3, 3, 64, 64), S1, "SAME", S1, ()),      # ResNet-sized layer
    # Winograd F(2x2,3x3) (kernels/cpu/winograd.py): odd output sizes (partial edge tiles),
    # batches, VALID, uneven explicit padding
    ((2, 17, 23, 16), (3, 3, 16, 24), S1, "VALID", S1, ()),
    ((3, 15, 11, 17), (3, 3, 17, 16), S1, "SAME", S1, ()),
    ((1, 25, 30, 20), (3, 3, 20, 16), S1, "EXPLICIT", S1, (0, 0, 2, 0, 1, 3, 0, 0)),
    ((1, 7, 7, 32), (3, 3, 32, 24), S1, "SAME", S1, ()),       # 16 tiles: im2col here
]


def _dilated(shapes):
    return [s for s in shapes if max(s[4]) > 1]


def _shapes(dt):
    # stock float64 runs TF's reference kernels, whose backprops reject dilations: float64
    # dilated convolutions are checked forward only (Conv2D_dilated_f64) and as errors
    # (float16 too: its backprops raise the same error, ours as well)
    if np.dtype(dt) in (np.float64, np.float16):
        return [s for s in CONV_SHAPES if max(s[4]) == 1]
    return CONV_SHAPES


def conv_samples(dt, rng, shapes=None):
    out = [(_x(rng, xs, dt), _x(rng, fs, dt), st, pad, dil, p)
           for xs, fs, st, pad, dil, p in (shapes or _shapes(dt))]
    if shapes:
        return out
    sp = special_floats(dt)
    # no +-max: whether a sum of huge terms overflows depends on the summation order
    sp = np.resize(sp[np.abs(sp) != ml_dtypes.finfo(dt).max], (1, 6, 6, 2))
    out.append((sp, _x(rng, (3, 3, 2, 3), dt), S1, "VALID", S1, ()))
    out.append((sp, _x(rng, (3, 3, 2, 3), dt), S2, "SAME", S1, ()))
    return out


def conv_errors(dt):
    rng = np.random.default_rng(0)
    x = _x(rng, (1, 5, 5, 3), dt)
    return [
        (x, _x(rng, (3, 3, 4, 4), dt), S1, "SAME", S1, ()),      # channel mismatch
        (x, _x(rng, (3, 3, 3), dt), S1, "SAME", S1, ()),         # filter rank
        (x, _x(rng, (3, 3, 3, 4), dt), [2, 1, 1, 1], "SAME", S1, ()),   # batch stride
        (x, _x(rng, (3, 3, 3, 4), dt), [1, 0, 1, 1], "SAME", S1, ()),   # zero stride
        (x, _x(rng, (3, 3, 3, 4), dt), S1, "SAME", [2, 1, 1, 1], ()),   # batch dilation
        (x, _x(rng, (3, 0, 3, 4), dt), S1, "SAME", S1, ()),      # empty filter
        (x, _x(rng, (7, 7, 3, 2), dt), S1, "VALID", S1, ()),     # negative output size
        (x, _x(rng, (3, 3, 6, 3), dt), S1, "SAME", S1, ()),      # depth not a multiple
        # float64 runs TF's reference kernel: NHWC only
        (_x(rng, (1, 3, 5, 5), np.float64), _x(rng, (3, 3, 3, 4), np.float64), S1, "SAME", S1,
         (), "NCHW"),
        # not here: a rank-3 input, on which stock (oneDNN) Conv2D aborts the process
    ]


def _to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def _nchw_attr(v):
    return [v[0], v[3], v[1], v[2]]


def conv_nchw_samples(dt, rng):
    # no explicit padding: the gradient would need NCHW backprops with explicit padding, which
    # stock runs on its NHWC-only reference kernels (an error case of the backprops)
    out = []
    for xs, fs, st, pad, dil, p in CONV_SHAPES[:8] + CONV_SHAPES[9:11]:
        p = tuple(np.array(p).reshape(4, 2)[[0, 3, 1, 2]].ravel()) if p else ()
        out.append((_to_nchw(_x(rng, xs, dt)), _x(rng, fs, dt), _nchw_attr(st), pad,
                    _nchw_attr(dil), p))
    return out


def _conv_len(args):
    kh, kw, cin = args[1].shape[:3]
    return kh * kw * cin


def _out_shape(xs, fs, st, pad, dil, p):
    out = []
    for i in (1, 2):
        eff = (fs[i - 1] - 1) * dil[i] + 1
        if pad == "SAME":
            out.append(-(-xs[i] // st[i]))
        else:
            extra = p[2 * i] + p[2 * i + 1] if p else 0
            out.append((xs[i] + extra - eff) // st[i] + 1)
    return (xs[0], out[0], out[1], fs[3])


def _bi(sizes, f, dy, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.Conv2DBackpropInput(
        input_sizes=sizes, filter=f, out_backprop=dy, strides=strides, padding=padding,
        dilations=dilations, explicit_paddings=list(pads), data_format=fmt)


def _bf(x, sizes, dy, strides=S1, padding="SAME", dilations=S1, pads=(), fmt="NHWC"):
    return tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=sizes, out_backprop=dy, strides=strides, padding=padding,
        dilations=dilations, explicit_paddings=list(pads), data_format=fmt)


def bi_samples(dt, rng):
    out = []
    for xs, fs, st, pad, dil, p in _shapes(dt):
        if xs[1] * xs[2] > 1000:
            xs = (2, 28, 28, 32)
            fs = (3, 3, 32, 32)
        out.append((list(xs), _x(rng, fs, dt), _x(rng, _out_shape(xs, fs, st, pad, dil, p), dt),
                    st, pad, dil, p))
    # float32 3x3 stride 1 on 16x16 and larger: ours by Winograd (conv_ops'
    # _backprop_input_winograd), SAME and VALID, and with an Inf (the direct way recomputes it)
    for pad, xs in (("SAME", (2, 16, 16, 16)), ("VALID", (1, 18, 17, 16))):
        dy = _x(rng, _out_shape(xs, (3, 3, 16, 16), S1, pad, S1, ()), dt)
        out.append((list(xs), _x(rng, (3, 3, 16, 16), dt), dy, S1, pad, S1, ()))
    dy = dy.copy()
    dy[0, 3, 4, 5] = np.inf
    out.append(([1, 18, 17, 16], _x(rng, (3, 3, 16, 16), dt), dy, S1, "VALID", S1, ()))
    # whole images per block (conv_ops' _backprop_input_by_blocks): a Keras MNIST CNN's 13x13
    # (one image a block, a partial last block of images), two 9x9 images a block, stride 2,
    # row dilation, and an Inf in dy
    for xs, fs, st, pad, dil in (((9, 13, 13, 32), (3, 3, 32, 64), S1, "VALID", S1),
                                 ((12, 9, 9, 32), (3, 3, 32, 64), S1, "SAME", S1),
                                 ((16, 16, 15, 16), (3, 3, 16, 24), [1, 2, 2, 1], "SAME", S1),
                                 ((6, 14, 14, 16), (3, 3, 16, 8), S1, "SAME", [1, 2, 1, 1])):
        dy = _x(rng, _out_shape(xs, fs, st, pad, dil, ()), dt)
        out.append((list(xs), _x(rng, fs, dt), dy, st, pad, dil, ()))
    dy = dy.copy()
    dy[1, 2, 3, 4] = np.inf
    out.append(([6, 14, 14, 16], _x(rng, (3, 3, 16, 8), dt), dy, S1, "SAME", [1, 2, 1, 1], ()))
    return out


def bf_samples(dt, rng):
    out = []
    for xs, fs, st, pad, dil, p in _shapes(dt):
        if xs[1] * xs[2] > 1000:
            xs = (2, 28, 28, 32)
            fs = (3, 3, 32, 32)
        out.append((_x(rng, xs, dt), list(fs), _x(rng, _out_shape(xs, fs, st, pad, dil, p), dt),
                    st, pad, dil, p))
    return out


def bi_errors(dt):
    rng = np.random.default_rng(0)
    d = np.float64
    return [([1, 6, 6, 2], _x(rng, (3, 3, 3, 4), dt), _x(rng, (1, 6, 6, 4), dt)),  # depth
            ([1, 6, 6, 3], _x(rng, (3, 3, 4), dt), _x(rng, (1, 6, 6, 4), dt)),     # filter rank
            ([1, 6, 6, 3], _x(rng, (3, 3, 3, 4), dt), _x(rng, (1, 6, 6, 5), dt)),  # dy depth
            ([1, 6, 6, 3], _x(rng, (3, 3, 3, 4), dt), _x(rng, (1, 5, 6, 4), dt)),  # dy size
            # float64 (TF's reference kernel): no dilations, NHWC only
            ([1, 9, 9, 3], _x(rng, (3, 3, 3, 4), d), _x(rng, (1, 9, 9, 4), d), S1, "SAME",
             [1, 2, 2, 1]),
            ([1, 3, 6, 6], _x(rng, (3, 3, 3, 4), d), _x(rng, (1, 4, 6, 6), d), S1, "SAME", S1,
             (), "NCHW"),
            # explicit padding runs on the reference kernel in float32 too
            ([1, 3, 6, 6], _x(rng, (3, 3, 3, 4), dt), _x(rng, (1, 4, 7, 5), dt), S1, "EXPLICIT",
             S1, (0, 0, 0, 0, 1, 2, 0, 1), "NCHW")]


def bf_errors(dt):
    rng = np.random.default_rng(0)
    d = np.float64
    return [(_x(rng, (1, 6, 6, 3), dt), [3, 3, 2, 4], _x(rng, (1, 6, 6, 4), dt)),  # depth
            (_x(rng, (1, 6, 6, 3), dt), [3, 3, 3], _x(rng, (1, 6, 6, 4), dt)),     # sizes rank
            (_x(rng, (1, 6, 6, 3), dt), [3, 3, 3, 4], _x(rng, (1, 5, 6, 4), dt)),  # dy shape
            (_x(rng, (1, 6, 6, 3), dt), [3, 3, 3, 5], _x(rng, (1, 6, 6, 4), dt)),  # dy depth
            (_x(rng, (1, 9, 9, 3), d), [3, 3, 3, 4], _x(rng, (1, 9, 9, 4), d), S1, "SAME",
             [1, 2, 2, 1]),
            (_x(rng, (1, 3, 6, 6), d), [3, 3, 3, 4], _x(rng, (1, 4, 6, 6), d), S1, "SAME", S1,
             (), "NCHW"),
            (_x(rng, (1, 6, 6, 3), dt), [3, 3, 3, 4], _x(rng, (1, 3, 1, 4), dt), S1, "EXPLICIT",
             [1, 2, 2, 1], (0, 0, 1, 2, 0, 1, 0, 0))]


CASES = [
    # float16/bfloat16: widened to float32, rounded once (stock: equal for Conv2D and bfloat16;
    # float16 backprops accumulate in float16, measured up to ~35 eps off, inside the bound)
    OpCase("Conv2D", "Conv2D", _conv, conv_samples, dtypes=("float32", "float64") + HALF,
           kind="reduction", reduction_len=_conv_len, errors=conv_errors, grad=True,
           grad_ops=("Conv2DBackpropInput", "Conv2DBackpropFilter")),
    OpCase("Conv2D_dilated_f64", "Conv2D", _conv,
           lambda dt, rng: conv_samples(dt, rng, _dilated(CONV_SHAPES)), dtypes=("float64",),
           kind="reduction", reduction_len=_conv_len),
    # empty inputs/outputs: float64 only, stock float32 (oneDNN) returns its input for these.
    # No gradient check: stock float64 Conv2DBackpropFilter returns uninitialised memory when
    # out_backprop is empty (ours returns zeros). No shape check: graph shape inference rejects
    # the 0x0-output sample.
    OpCase("Conv2D_empty_f64", "Conv2D", _conv, lambda dt, rng: [
        (_x(rng, (0, 6, 6, 3), dt), _x(rng, (3, 3, 3, 4), dt), S1, "SAME", S1, ()),
        (_x(rng, (1, 0, 6, 3), dt), _x(rng, (3, 3, 3, 4), dt), S2, "SAME", S1, ()),
        (_x(rng, (1, 3, 3, 3), dt), _x(rng, (4, 4, 3, 2), dt), S1, "VALID", S1, ())],
           dtypes=("float64",), kind="reduction", reduction_len=_conv_len, shape_check=False),
    # float32 only: stock float64 Conv2D is NHWC-only (an error case of Conv2D)
    OpCase("Conv2D_NCHW", "Conv2D",
           lambda x, f, st, pad, dil, p: _conv(x, f, st, pad, dil, p, fmt="NCHW"),
           conv_nchw_samples, dtypes=("float32",), kind="reduction",
           reduction_len=_conv_len, grad=True,
           grad_ops=("Conv2DBackpropInput", "Conv2DBackpropFilter")),
    OpCase("Conv2DBackpropInput", "Conv2DBackpropInput", _bi, bi_samples,
           dtypes=("float32", "float64") + HALF, kind="reduction",
           reduction_len=lambda a: a[1].shape[0] * a[1].shape[1] * a[1].shape[3],
           errors=bi_errors, grad=True),
    OpCase("Conv2DBackpropFilter", "Conv2DBackpropFilter", _bf, bf_samples,
           dtypes=("float32", "float64") + HALF, kind="reduction",
           reduction_len=lambda a: a[2].shape[0] * a[2].shape[1] * a[2].shape[2],
           errors=bf_errors, grad=True),
]


# --- Conv3D (NDHWC) and its V2 backprops -----------------------------------------------------
T1, T2 = [1, 1, 1, 1, 1], [1, 2, 1, 2, 1]


def _conv3(x, f, strides=T1, padding="SAME"):
    return tf.raw_ops.Conv3D(input=x, filter=f, strides=strides, padding=padding)


def _bi3(sizes, f, dy, strides=T1, padding="SAME"):
    return tf.raw_ops.Conv3DBackpropInputV2(input_sizes=sizes, filter=f, out_backprop=dy,
                                            strides=strides, padding=padding)


def _bf3(x, sizes, dy, strides=T1, padding="SAME"):
    return tf.raw_ops.Conv3DBackpropFilterV2(input=x, filter_sizes=sizes, out_backprop=dy,
                                             strides=strides, padding=padding)


# (input shape, filter shape, strides, padding)
CONV3_SHAPES = [
    ((1, 4, 5, 5, 3), (3, 3, 3, 3, 4), T1, "SAME"),
    ((2, 5, 6, 7, 2), (2, 3, 2, 2, 3), T1, "VALID"),
    ((1, 7, 6, 9, 3), (3, 3, 3, 3, 2), T2, "SAME"),
    ((2, 6, 5, 6, 4), (1, 1, 1, 4, 5), T1, "VALID"),     # pointwise: one product
    ((1, 6, 6, 6, 2), (1, 1, 1, 2, 3), T2, "VALID"),     # strided pointwise
    ((1, 2, 3, 2, 2), (3, 3, 3, 2, 2), T1, "SAME"),      # filter larger than the input
    ((1, 8, 12, 12, 8), (3, 3, 3, 8, 16), [1, 1, 2, 2, 1], "SAME"),
]


def _out3(xs, fs, st, pad):
    from shape_fns.conv_ops import output_size
    return (xs[0],) + tuple(output_size(xs[i + 1], fs[i], st[i + 1], 1, pad)[0]
                            for i in range(3)) + (fs[4],)


def conv3_samples(dt, rng):
    out = [(_x(rng, xs, dt), _x(rng, fs, dt), st, pad) for xs, fs, st, pad in CONV3_SHAPES]
    sp = special_floats(dt)
    sp = np.resize(sp[np.abs(sp) != ml_dtypes.finfo(dt).max], (1, 3, 4, 4, 2))
    out.append((sp, _x(rng, (2, 2, 2, 2, 3), dt), T1, "VALID"))
    return out


def conv3_errors(dt):
    rng = np.random.default_rng(0)
    x = _x(rng, (1, 4, 5, 5, 3), dt)
    return [(x, _x(rng, (3, 3, 3, 4, 4), dt), T1, "SAME"),      # depth mismatch
            (x, _x(rng, (3, 3, 3, 3), dt), T1, "SAME"),          # filter rank
            (x[0], _x(rng, (3, 3, 3, 3, 4), dt), T1, "SAME"),    # input rank
            (x, _x(rng, (3, 3, 3, 3, 4), dt), [2, 1, 1, 1, 1], "SAME"),   # batch stride
            (x, _x(rng, (9, 3, 3, 3, 4), dt), T1, "VALID")]      # negative output size


def bi3_samples(dt, rng):
    return [(list(xs), _x(rng, fs, dt), _x(rng, _out3(xs, fs, st, pad), dt), st, pad)
            for xs, fs, st, pad in CONV3_SHAPES]


def bf3_samples(dt, rng):
    return [(_x(rng, xs, dt), list(fs), _x(rng, _out3(xs, fs, st, pad), dt), st, pad)
            for xs, fs, st, pad in CONV3_SHAPES]


CASES += [
    OpCase("Conv3D", "Conv3D", _conv3, conv3_samples, dtypes=("float32", "float64"),
           kind="reduction", reduction_len=lambda a: int(np.prod(a[1].shape[:4])),
           errors=conv3_errors, grad=True,
           grad_ops=("Conv3DBackpropInputV2", "Conv3DBackpropFilterV2")),
    OpCase("Conv3DBackpropInputV2", "Conv3DBackpropInputV2", _bi3, bi3_samples,
           dtypes=("float32", "float64"), kind="reduction",
           reduction_len=lambda a: int(np.prod(a[1].shape[:3])) * a[1].shape[4]),
    OpCase("Conv3DBackpropFilterV2", "Conv3DBackpropFilterV2", _bf3, bf3_samples,
           dtypes=("float32", "float64"), kind="reduction",
           reduction_len=lambda a: int(np.prod(a[2].shape[:4]))),
]
