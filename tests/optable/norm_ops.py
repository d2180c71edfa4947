"""Op table: FusedBatchNormV3 and FusedBatchNormGradV3 (training and inference, NHWC and NCHW).

Stock CPU float32 batch norm is oneDNN's; float64 is not an allowed T of these ops.
"""
import numpy as np
import tensorflow as tf

from shape_fns.host import onednn_runs

from . import OpCase, arr, positive, special_floats


def _defined(outs, x, training):
    """The outputs stock defines: its Eigen kernel (host.onednn_runs false: float16 without
    AVX512_FP16, every type where oneDNN is off) leaves reserve_space_1/2 uninitialised in
    inference and for an empty x."""
    if onednn_runs(x.dtype.name) or (training and x.shape.num_elements()):
        return outs
    return [t for i, t in enumerate(outs) if i not in (3, 4)]


def _bn(x, scale, offset, mean, var, eps=1e-3, factor=1.0, training=True, fmt="NHWC"):
    return _defined(tf.raw_ops.FusedBatchNormV3(
        x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=eps,
        exponential_avg_factor=factor, data_format=fmt, is_training=training), x, training)


def _bn_grad(dy, x, scale, r1, r2, r3, eps=1e-3, training=True, fmt="NHWC"):
    return tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=dy, x=x, scale=scale, reserve_space_1=r1, reserve_space_2=r2,
        reserve_space_3=r3, epsilon=eps, data_format=fmt, is_training=training)


def _bn_v2(x, scale, offset, mean, var, eps=1e-3, factor=1.0, training=True, op="V2"):
    """FusedBatchNormV2 / FusedBatchNorm (no exponential_avg_factor attr: factor must be 1)."""
    f = tf.raw_ops.FusedBatchNormV2 if op == "V2" else tf.raw_ops.FusedBatchNorm
    return _defined(f(x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=eps,
                      is_training=training), x, training)


def _bn_grad_v2(dy, x, scale, r1, r2, r3, eps=1e-3, training=True, op="V2"):
    f = tf.raw_ops.FusedBatchNormGradV2 if op == "V2" else tf.raw_ops.FusedBatchNormGrad
    return f(y_backprop=dy, x=x, scale=scale, reserve_space_1=r1, reserve_space_2=r2,
             epsilon=eps, is_training=training)


def _factor_one(samples):
    return lambda dt, rng: [a for a in samples(dt, rng) if len(a) < 7 or a[6] == 1.0]


def _params(rng, c, dt):
    """scale, offset, mean, variance for c channels."""
    return (positive(rng, (c,), dt, 0.5, 2), arr(rng, (c,), dt, -1, 1), arr(rng, (c,), dt, -1, 1),
            positive(rng, (c,), dt, 0.2, 2))


def _nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def _nhwc(a):
    return a.transpose(0, 2, 3, 1)


def _special_x(dt, shape):
    sp = special_floats(dt)
    return np.resize(sp[np.abs(sp) != np.finfo(dt).max], shape)


def train_samples(dt, rng):
    out = []
    for shape, eps, factor in [((2, 3, 3, 4), 1e-3, 1.0), ((2, 5, 5, 8), 1e-5, 0.3),
                               ((1, 1, 1, 4), 1e-3, 1.0),      # one value per channel
                               ((3, 1, 2, 5), 0.0, 1.0),
                               ((0, 3, 3, 4), 1e-3, 1.0),      # empty: NaN statistics
                               ((1, 56, 56, 64), 1e-3, 0.01)]:
        out.append((arr(rng, shape, dt), *_params(rng, shape[3], dt), eps, factor))
    s, o, m, v = _params(rng, 16, dt)
    # training with exponential_avg_factor 1 takes any mean/variance (tf.nn passes empty ones)
    out.append((arr(rng, (2, 3, 3, 4), dt), s[:4], o[:4], m[:0], v[:0], 1e-3, 1.0))
    s, o, m, v = _params(rng, 2, dt)
    out.append((_special_x(dt, (1, 3, 3, 2)), s, o, m, v, 1e-3, 1.0))
    out.append((arr(rng, (2, 3, 3, 2), dt), s, o, m, v, 1e-3, 1.0))
    return out


def offset_mean_samples(dt, rng):
    # mean away from 0 (|mean|/std ~ 5); not far: stock's (oneDNN) float32 statistics lose
    # accuracy as |mean|/std grows (at 17, its y error against float64 was 5x ours)
    return [(arr(rng, (4, 8, 8, 16), dt, 2, 4), *_params(rng, 16, dt), 1e-3, 1.0)]


def infer_samples(dt, rng):
    out = []
    for shape in [(2, 3, 3, 4), (1, 1, 1, 3), (0, 3, 3, 4), (1, 56, 56, 256)]:
        out.append((arr(rng, shape, dt), *_params(rng, shape[3], dt), 1e-3, 1.0))
    s, o, m, v = _params(rng, 3, dt)
    out.append((_special_x(dt, (1, 3, 3, 3)), s, o, m, v, 1e-3, 0.5))
    out.append((arr(rng, (1, 2, 2, 3), dt), s, o, m, -v, 1e-3, 1.0))                 # NaN
    out.append((arr(rng, (1, 2, 2, 3), dt), s, o, m, v * 0, 0.0, 1.0))                # Inf
    out.append((arr(rng, (1, 2, 2, 3), dt), _special_x(dt, (3,)), o, m, v, 1e-3, 1.0))
    return out


def _with_nchw(samples):
    return [(_nchw(a[0]),) + a[1:] for a in samples]


def bn_errors(dt):
    rng = np.random.default_rng(0)
    x = arr(rng, (2, 3, 3, 4), dt)
    s, o, m, v = _params(rng, 4, dt)
    return [
        (x[0], s, o, m, v),                                    # x rank
        (x, s[None], o, m, v),                                 # scale rank
        (x, s[:3], o, m, v),                                   # scale size
        (x, s, o[:3], m, v),                                   # offset size
        (x, s, o, m[:3], v, 1e-3, 1.0, False),                 # inference mean size
        (x, s, o, m, v[:0], 1e-3, 1.0, False),
        (x, s, o, m[:0], v, 1e-3, 0.5, True),                  # running mean size
    ]


def grad_samples(dt, rng, training=True):
    out = []
    for shape in [(2, 3, 3, 4), (1, 1, 1, 3), (3, 4, 5, 6), (0, 3, 3, 4), (2, 28, 28, 64)]:
        x = arr(rng, shape, dt)
        c = shape[3]
        x2 = x.reshape(-1, c).astype(np.float64)
        if training and x2.size:
            mean, var = x2.mean(0).astype(dt), x2.var(0).astype(dt)
        else:
            _, _, mean, var = _params(rng, c, dt)
        out.append((arr(rng, shape, dt), x, positive(rng, (c,), dt, 0.5, 2), mean, var,
                    np.zeros(0, dt), 1e-3))
    s, _, m, v = _params(rng, 2, dt)
    out.append((_special_x(dt, (1, 3, 3, 2)), arr(rng, (1, 3, 3, 2), dt), s, m, v,
                np.zeros(0, dt), 1e-3))
    return out


def grad_errors(dt):
    rng = np.random.default_rng(0)
    x, dy = arr(rng, (2, 3, 3, 4), dt), arr(rng, (2, 3, 3, 4), dt)
    s, _, m, v = _params(rng, 4, dt)
    r3 = np.zeros(0, dt)
    return [
        (dy[:1], x, s, m, v, r3),                             # dy shape
        (dy, x, s[:3], m, v, r3),                             # scale size
        (dy, x, s, m[:3], v, r3),                             # reserve_space_1 size
        (dy, x, s, m, v[:3], r3),
        (dy, x, s, m[None], v, r3),                           # reserve_space_1 rank
        (dy[0], x[0], s, m, v, r3),                           # rank
    ]


def _rows(args):
    x = args[0]
    c = x.shape[3] if x.ndim == 4 else 1
    return max(1, x.size // max(1, c))


def _grad_rows(args):
    return _rows(args[1:])


def _fused_v1_api(x, scale, offset):
    return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=1e-3, is_training=True)


def v1_api_samples(dt, rng):
    return [(arr(rng, (2, 4, 4, 3), dt), *_params(rng, 3, dt)[:2]),
            (arr(rng, (1, 28, 28, 32), dt), *_params(rng, 32, dt)[:2])]


GRAD = ("FusedBatchNormGradV3",)
HALF = ("float16", "bfloat16")


def _half(samples, n_half):
    """float16/bfloat16 samples: the first n_half arrays (x, dy) in the half type, scale,
    offset and statistics float32 (TensorFlow's U for a half T). No empty x for float16:
    stock's (Eigen) reserve_space_1 is then uninitialised memory."""
    def wrapped(dt, rng):
        return [tuple(a.astype(dt) if i < n_half else a for i, a in enumerate(t))
                for t in samples(np.dtype(np.float32), rng)
                if onednn_runs(dt) or t[n_half - 1].size]
    return wrapped

CASES = [
    OpCase("FusedBatchNormV3_training", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps=1e-3, f=1.0, training=True:
           _bn(x, s, o, m, v, eps, f, training), train_samples,
           kind="reduction", reduction_len=_rows, errors=bn_errors, grad=True, grad_args=(0, 1, 2),
           grad_ops=GRAD),
    # no gradient: stock's scale gradient cancels (error 7e-5 relative at |mean|/std ~ 5, ours
    # 1e-7 against float64 on the same float32 statistics), beyond the reduction tolerance
    OpCase("FusedBatchNormV3_training_offset_mean", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, True), offset_mean_samples,
           kind="reduction", reduction_len=_rows),
    OpCase("FusedBatchNormV3_training_NCHW", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, True, "NCHW"),
           lambda dt, rng: _with_nchw(train_samples(dt, rng)), kind="reduction",
           reduction_len=lambda a: _rows((_nhwc(a[0]),)), grad=True, grad_args=(0, 1, 2),
           grad_ops=GRAD),
    # elementwise, with a few roundings more than one op: (x - mean) * scale * rsqrt + offset
    OpCase("FusedBatchNormV3_inference", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, False), infer_samples,
           kind="reduction", reduction_len=lambda a: 4, grad=True, grad_args=(0, 1, 2),
           grad_ops=GRAD),
    OpCase("FusedBatchNormV3_inference_NCHW", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, False, "NCHW"),
           lambda dt, rng: _with_nchw(infer_samples(dt, rng)), kind="reduction",
           reduction_len=lambda a: 4, grad=True, grad_args=(0, 1, 2), grad_ops=GRAD),
    OpCase("FusedBatchNorm_v1_api", "FusedBatchNormV3", _fused_v1_api, v1_api_samples,
           kind="reduction", reduction_len=_rows, grad=True, grad_ops=GRAD),
    # float16/bfloat16 x: statistics in float32, y rounded once (stock: bit-equal, measured)
    # No gradient check: tests/test_gradients sums the outputs into one loss, and half y plus
    # float32 statistics do not add (stock fails there too); the gradient op has its own case.
    OpCase("FusedBatchNormV3_training_half", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, True), _half(train_samples, 1),
           dtypes=HALF, kind="reduction", reduction_len=_rows),
    # reserve_space_1/2 left out where stock's inference leaves them uninitialised (_defined)
    OpCase("FusedBatchNormV3_inference_half", "FusedBatchNormV3",
           lambda x, s, o, m, v, eps, f: _bn(x, s, o, m, v, eps, f, False),
           _half(infer_samples, 1), dtypes=HALF, kind="reduction", reduction_len=lambda a: 4),
    OpCase("FusedBatchNormGradV3_training_half", "FusedBatchNormGradV3",
           lambda dy, x, s, m, v, r3, eps: _bn_grad(dy, x, s, m, v, r3, eps, True),
           _half(grad_samples, 2), dtypes=HALF, kind="reduction", reduction_len=_grad_rows,
           shape_check=False),
    # shape_check off: TF's graph inference says [0] for reserve_space_4/5, which oneDNN (and
    # so eager and tf.function at run time) returns as scalars
    # the V2 and V1 ops (older graphs, FusedBatchNormV2 in TF's own layers): V3 underneath
    OpCase("FusedBatchNormV2_training", "FusedBatchNormV2",
           lambda x, s, o, m, v, eps=1e-3, f=1.0, training=True:
           _bn_v2(x, s, o, m, v, eps, f, training),
           _factor_one(train_samples), kind="reduction", reduction_len=_rows,
           errors=lambda dt: [e for e in bn_errors(dt) if len(e) < 7 or e[6] == 1.0]),
    OpCase("FusedBatchNormV2_inference", "FusedBatchNormV2",
           lambda x, s, o, m, v, eps, f: _bn_v2(x, s, o, m, v, eps, f, False),
           _factor_one(infer_samples), kind="reduction", reduction_len=lambda a: 4),
    OpCase("FusedBatchNormV2_training_half", "FusedBatchNormV2",
           lambda x, s, o, m, v, eps, f: _bn_v2(x, s, o, m, v, eps, f, True),
           _half(_factor_one(train_samples), 1), dtypes=HALF, kind="reduction",
           reduction_len=_rows),
    OpCase("FusedBatchNorm_training", "FusedBatchNorm",
           lambda x, s, o, m, v, eps, f: _bn_v2(x, s, o, m, v, eps, f, True, "V1"),
           _factor_one(train_samples), kind="reduction", reduction_len=_rows),
    OpCase("FusedBatchNormGradV2_training", "FusedBatchNormGradV2",
           lambda dy, x, s, m, v, r3, eps: _bn_grad_v2(dy, x, s, m, v, r3, eps, True),
           grad_samples, kind="reduction", reduction_len=_grad_rows, shape_check=False),
    OpCase("FusedBatchNormGrad_inference", "FusedBatchNormGrad",
           lambda dy, x, s, m, v, r3, eps: _bn_grad_v2(dy, x, s, m, v, r3, eps, False, "V1"),
           lambda dt, rng: grad_samples(dt, rng, False), kind="reduction",
           reduction_len=_grad_rows, shape_check=False),
    OpCase("FusedBatchNormGradV3_training", "FusedBatchNormGradV3",
           lambda dy, x, s, m, v, r3, eps=1e-3: _bn_grad(dy, x, s, m, v, r3, eps, True),
           grad_samples,
           kind="reduction", reduction_len=_grad_rows, errors=grad_errors, shape_check=False),
    OpCase("FusedBatchNormGradV3_inference", "FusedBatchNormGradV3",
           lambda dy, x, s, m, v, r3, eps: _bn_grad(dy, x, s, m, v, r3, eps, False),
           lambda dt, rng: grad_samples(dt, rng, False), kind="reduction",
           reduction_len=_grad_rows, shape_check=False),
    OpCase("FusedBatchNormGradV3_NCHW", "FusedBatchNormGradV3",
           lambda dy, x, s, m, v, r3, eps: _bn_grad(dy, x, s, m, v, r3, eps, True, "NCHW"),
           lambda dt, rng: [(_nchw(a[0]), _nchw(a[1])) + a[2:] for a in grad_samples(dt, rng)],
           kind="reduction", reduction_len=lambda a: _grad_rows((a[0], _nhwc(a[1]))),
           shape_check=False),
]
