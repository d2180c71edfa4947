"""CPU kernels: FusedBatchNormV3 and FusedBatchNormGradV3 (4-D, float32, as oneDNN runs them).

x is viewed as (rows, C) in NHWC (NCHW is transposed in and out). Per-channel statistics are
summed in float64 over row chunks, one chunk per task, then combined; the elementwise passes are
row-parallel. Semantics follow stock: training returns the batch mean and biased variance in
reserve_space_1/2 and the running statistics, with Bessel's correction on the variance, in
batch_mean/batch_variance; an empty x gives NaN statistics and zero reserve spaces.
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from shape_fns.norm_ops import channel_axis, reserve_space_3_shape, with_u

from .conv_ops import nhwc_in, nhwc_out

FLOATS = (np.float32,)
PARALLEL_MIN = 1 << 16   # elements; below this one thread is faster
CHUNKS = 16              # row chunks for the per-channel sums


def _col_sums(a, b, mean, part, rows_per, mode):
    """part[k] <- per-channel sums over chunk k's rows of: a (mode 0), (a - mean)^2 (mode 1),
    or b * (a - mean) (mode 2, with part[k + K] <- sums of b)."""
    M, C = a.shape
    K = part.shape[0] if mode != 2 else part.shape[0] // 2
    for k in prange(K):
        acc = part[k]
        acc[:] = 0
        acc2 = acc
        if mode == 2:
            acc2 = part[k + K]
            acc2[:] = 0
        for r in range(k * rows_per, min(M, (k + 1) * rows_per)):
            ar = a[r]
            if mode == 0:
                for c in range(C):
                    acc[c] += ar[c]
            elif mode == 1:
                for c in range(C):
                    d = np.float64(ar[c]) - mean[c]
                    acc[c] += d * d
            else:
                br = b[r]
                for c in range(C):
                    acc[c] += np.float64(br[c]) * (np.float64(ar[c]) - mean[c])
                    acc2[c] += br[c]


def _affine(x, mean, a, b, y):
    """y = (x - mean) * a + b per channel (x, y: (rows, C))."""
    C = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        yr = y[r]
        for c in range(C):
            yr[c] = (xr[c] - mean[c]) * a[c] + b[c]


def _grad_train(dy, x, mean, dmean, k1, k2, dx):
    """dx = k1 * ((dy - dmean) - (x - mean) * k2) per channel."""
    C = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        gr = dy[r]
        dr = dx[r]
        for c in range(C):
            dr[c] = k1[c] * ((gr[c] - dmean[c]) - (xr[c] - mean[c]) * k2[c])


def _scale_rows(dy, k, dx):
    C = dy.shape[1]
    for r in prange(dy.shape[0]):
        gr = dy[r]
        dr = dx[r]
        for c in range(C):
            dr[c] = gr[c] * k[c]


_jit = njit(cache=True, nogil=True, error_model="numpy")


def _pjit(fn):
    return jit.parallel(fn, error_model="numpy")


_col_sums_s, _col_sums_p = _jit(_col_sums), _pjit(_col_sums)
_affine_s, _affine_p = _jit(_affine), _pjit(_affine)
_grad_train_s, _grad_train_p = _jit(_grad_train), _pjit(_grad_train)
_scale_rows_s, _scale_rows_p = _jit(_scale_rows), _pjit(_scale_rows)


def _sums(a, b, mean, mode):
    """Per-channel float64 sums of _col_sums' quantity (and of b in mode 2)."""
    M, C = a.shape
    par = a.size >= PARALLEL_MIN
    chunks = min(M, CHUNKS) if par else 1
    rows_per = -(-M // chunks)
    chunks = -(-M // rows_per)
    part = np.empty((chunks * (2 if mode == 2 else 1), C), np.float64)
    (_col_sums_p if par else _col_sums_s)(a, b, mean, part, rows_per, mode)
    if mode == 2:
        return part[:chunks].sum(axis=0), part[chunks:].sum(axis=0)
    return part.sum(axis=0)


def _rows(a, fmt):
    a = nhwc_in(a, fmt)
    return a.reshape(-1, a.shape[3])


def _f32(v):
    return np.asarray(v, np.float32)


@kernel("FusedBatchNormV3", dtypes=FLOATS, type_attr=("T", "U"))
def fused_batch_norm(inputs, outputs, attrs):
    x, scale, offset, old_mean, old_var = inputs
    y, batch_mean, batch_var, saved_mean, saved_var, reserve3 = outputs
    reserve3[...] = 0    # oneDNN's is [0]; Eigen's a scalar zero (host.onednn_runs)
    fmt = attrs.get("data_format", "NHWC") or "NHWC"
    channel_axis(attrs)
    eps = np.float32(attrs.get("epsilon", 1e-4))
    training = attrs.get("is_training", True)
    if x.size == 0:
        batch_mean[...] = np.nan
        batch_var[...] = np.nan
        saved_mean[...] = 0
        saved_var[...] = 0
        return
    x2 = _rows(x, fmt)
    dst, finish = nhwc_out(y, fmt)
    y2 = dst.reshape(x2.shape)
    par = x2.size >= PARALLEL_MIN
    with np.errstate(all="ignore"):
        if training:
            M = x2.shape[0]
            mean64 = _sums(x2, x2, np.zeros(0), 0) / M
            var64 = _sums(x2, x2, mean64, 1) / M
            mean, var = _f32(mean64), _f32(var64)
            saved_mean[...] = mean
            saved_var[...] = var
            factor = np.float32(attrs.get("exponential_avg_factor", 1.0))
            corrected = var * np.float32(M / max(M - 1, 1))
            if factor == 1:
                batch_mean[...] = mean
                batch_var[...] = corrected
            else:
                keep = np.float32(1) - factor
                batch_mean[...] = keep * old_mean + factor * mean
                batch_var[...] = keep * old_var + factor * corrected
        else:
            mean, var = old_mean, old_var
            batch_mean[...] = mean
            batch_var[...] = var
            saved_mean[...] = mean
            saved_var[...] = var
        a = _f32(scale / np.sqrt(var + eps))
        (_affine_p if par else _affine_s)(x2, mean, a, offset, y2)
    finish()


@kernel("FusedBatchNormGradV3", dtypes=FLOATS, type_attr=("T", "U"))
def fused_batch_norm_grad(inputs, outputs, attrs):
    dy, x, scale, mean, var, _ = inputs
    dx, dscale, doffset, r4, r5 = outputs
    fmt = attrs.get("data_format", "NHWC") or "NHWC"
    channel_axis(attrs)
    eps = np.float32(attrs.get("epsilon", 1e-4))
    r4[...] = 0
    r5[...] = 0
    if x.size == 0:
        dscale[...] = 0
        doffset[...] = 0
        return
    x2, dy2 = _rows(x, fmt), _rows(dy, fmt)
    dst, finish = nhwc_out(dx, fmt)
    dx2 = dst.reshape(x2.shape)
    par = x2.size >= PARALLEL_MIN
    M = x2.shape[0]
    with np.errstate(all="ignore"):
        mean64 = mean.astype(np.float64)
        sum_dyx, sum_dy = _sums(x2, dy2, mean64, 2)
        c0 = 1 / np.sqrt(var.astype(np.float64) + eps)
        dscale[...] = sum_dyx * c0
        doffset[...] = sum_dy
        k1 = _f32(scale * c0)
        if attrs.get("is_training", True):
            k2 = _f32(c0 * c0 * (sum_dyx / M))
            dmean = _f32(sum_dy / M)
            (_grad_train_p if par else _grad_train_s)(dy2, x2, mean, dmean, k1, k2, dx2)
        else:
            (_scale_rows_p if par else _scale_rows_s)(dy2, k1, dx2)
    finish()


# FusedBatchNormV2 (T, U) and FusedBatchNorm (T only): V3's kernel (this module's float32 one,
# half_ops' for float16/bfloat16) with reserve_space_3 written to a scratch array; their
# gradients: V3's gradient with the reserve_space_3 input it does not read.
def _v3_kernel(op, attrs):
    from kernels import lookup
    a = with_u(attrs)
    k, _ = lookup(op, "cpu", a)
    return k.fn, a


def _reserve3(x):
    return np.zeros(reserve_space_3_shape(x.dtype), np.float32)


@kernel("FusedBatchNormV2", dtypes=FLOATS + ("float16", "bfloat16"), type_attr=("T", "U"))
@kernel("FusedBatchNorm", dtypes=FLOATS)
def fused_batch_norm_v2(inputs, outputs, attrs):
    fn, a = _v3_kernel("FusedBatchNormV3", attrs)
    fn(inputs, list(outputs) + [_reserve3(inputs[0])], a)


@kernel("FusedBatchNormGradV2", dtypes=FLOATS + ("float16", "bfloat16"), type_attr=("T", "U"))
@kernel("FusedBatchNormGrad", dtypes=FLOATS)
def fused_batch_norm_grad_v2(inputs, outputs, attrs):
    fn, a = _v3_kernel("FusedBatchNormGradV3", attrs)
    fn(list(inputs) + [_reserve3(inputs[1])], outputs, a)
