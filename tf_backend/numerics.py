"""The numerics contract in one place: dtype-aware tolerances and comparison (DESIGN.md §6).

Exact for integers, bool and data movement; elementwise floats within a few ulp; reductions,
matmul and convolutions within a bound that grows with the reduction length.

Where stock's result depends on the CPU (oneDNN picks AVX-512, AVX512_FP16 or AMX code at run
time, and takes float16/bfloat16 only where the CPU has them), we match stock on the CPU at
hand by detecting what must be detected (shape_fns/host.py: which kernel stock runs a dtype on;
batch norm's reserve-space shapes and Softmax's NaN/+Inf rows follow it), and otherwise rely on
these tolerances, which cover stock's spread between CPUs. Tests never assert bits that only
one CPU produces, nor compare values that cancel towards zero with atol=0.

Subnormals (measured on TensorFlow 2.21's x86-64 wheel, tests/test_subnormals.py): stock runs
every CPU op under FTZ/DAZ, eagerly and inside tf.function, at every size. Each Eigen functor
then has two code paths, packets of 8 float32 / 4 float64 and a scalar loop over the last
n % 8 elements, which can treat a subnormal input differently. We match exactly where the
difference is visible: Log and Xlogy's float32 tail (glibc's logf gives log(2**-150) for a
positive subnormal under DAZ, NaN for a negative one; the packet path -inf), and Abs and Neg,
bit operations that keep a subnormal's bits. Elsewhere stock may return a subnormal where we
return zero (the scalar tails of Sin, Asin, Atan, Atanh, Log1p; Relu's first and last lanes;
the packets of Expm1, Pow, Sign; Sinh, Asinh, Tan, Elu, FloorMod at every position); the
difference is below the smallest normal, inside every tolerance here.
"""
import math

import numpy as np

# Relative error per unit of "reduction length" (the number of terms summed into one output).
_EPS = {"float16": 9.77e-4, "bfloat16": 7.82e-3, "float32": 1.19e-7, "float64": 2.22e-16}
ELEMENTWISE_ULPS = 4


def tolerance(dtype, kind="elementwise", reduction_len=1):
    """(rtol, atol) for comparing a result of `dtype` to the oracle.

    kind: "exact" (integers, bool, data movement), "elementwise", or "reduction" (sums, matmul,
    conv: the bound scales with sqrt of the reduction length, with a floor of a few ulp).
    """
    dtype = np.dtype(dtype)
    if kind == "exact" or dtype.kind in "biu":
        return 0.0, 0.0
    eps = _EPS.get(dtype.name, 1.19e-7)
    if kind == "elementwise":
        return ELEMENTWISE_ULPS * eps, ELEMENTWISE_ULPS * eps
    n = max(1, int(reduction_len))
    scale = 8 * math.sqrt(n) + 4
    return scale * eps, scale * eps


def compare(ours, ref, kind="elementwise", reduction_len=1, rtol=None, atol=None):
    """None when `ours` matches `ref` under the contract, else a one-line description."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.dtype != ref.dtype:
        return f"dtype {ours.dtype} != {ref.dtype}"
    if ours.shape != ref.shape:
        return f"shape {ours.shape} != {ref.shape}"
    if ours.size == 0:
        return None
    r, a = tolerance(ref.dtype, kind, reduction_len)
    r = r if rtol is None else rtol
    a = a if atol is None else atol
    if ref.dtype.kind in "biuSO" or (r == 0 and a == 0):
        same = ours == ref
        if ref.dtype.kind in "fc" or ref.dtype.name == "bfloat16":   # ml_dtypes' kind is "V"
            same |= np.isnan(ours) & np.isnan(ref)
        if same.all():
            return None
        idx = np.unravel_index(np.argmin(same), same.shape)
        return f"mismatch at {idx}: {ours[idx]!r} vs {ref[idx]!r} ({(~same).sum()} elements)"
    o, f = ours.astype(np.float64), ref.astype(np.float64)
    nan_o, nan_f = np.isnan(o), np.isnan(f)
    if (nan_o != nan_f).any():
        idx = np.unravel_index(np.argmax(nan_o != nan_f), o.shape)
        return f"NaN mismatch at {idx}: {ours[idx]!r} vs {ref[idx]!r}"
    inf = np.isinf(f) | np.isinf(o)
    if (o[inf] != f[inf]).any():
        idx = np.unravel_index(np.argmax(inf & (o != f)), o.shape)
        return f"Inf mismatch at {idx}: {ours[idx]!r} vs {ref[idx]!r}"
    ok = nan_f | inf
    with np.errstate(all="ignore"):
        err = np.abs(o - f)
        bound = a + r * np.abs(f)
    bad = ~ok & (err > bound)
    if not bad.any():
        return None
    idx = np.unravel_index(np.argmax(np.where(bad, err, -1)), o.shape)
    return (f"max error {err[idx]:.3g} at {idx}: {ours[idx]!r} vs {ref[idx]!r} "
            f"(rtol {r:.2g}, atol {a:.2g}, {bad.sum()} elements out of tolerance)")


def max_errors(ours, ref):
    """(max abs error, max rel error) ignoring positions where both are NaN/equal Inf."""
    o, f = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if o.size == 0:
        return 0.0, 0.0
    with np.errstate(all="ignore"):
        same = (o == f) | (np.isnan(o) & np.isnan(f))
        err = np.where(same, 0.0, np.abs(o - f))
        rel = np.where(same, 0.0, err / np.maximum(np.abs(f), np.finfo(np.float64).tiny))
    return float(np.nanmax(err)), float(np.nanmax(rel))


# Training runs (tfb zoo `fit`): an untrained deep network's backward pass through BatchNorm and
# ReLU amplifies rounding (ResNet-50 b2, one step: stock's oneDNN and Eigen kernels give conv-
# kernel gradients 1.8% apart, stock eager vs compiled 1.9%; the error grows from 1e-6 at the
# head to 2% at conv1; in DenseNet-121 one ReLU whose input rounds to the other side of zero
# moves the last BatchNorm's beta gradient by 1e-3). Elementwise tolerances cannot judge such a
# run; stock's own spread can: its other executions of the same run (eager, oneDNN off) and its
# distance to the same run in float64. Ours, another float32 implementation, should land about
# as far from stock as those do; SPREAD_K leaves room for the noise of one sampled spread, while
# a wrong gradient (O(1) relative error in every layer) stays far outside.
SPREAD_K = 4.0


def within_spread(ours, ref, alternatives, kind="reduction", reduction_len=1, k=SPREAD_K):
    """(ok, distance, bound): ||ours - ref|| <= k * max ||alt - ref|| + ||atol + rtol |ref|||.

    alternatives: the same value from stock's other executions of the same run (e.g. eager vs
    compiled, oneDNN off); 2-norms over the whole value, NaN/Inf must agree exactly.
    """
    o = np.asarray(ours, np.float64)
    r = np.asarray(ref, np.float64)
    if o.shape != r.shape:
        return False, float("inf"), 0.0
    finite = np.isfinite(r) & np.isfinite(o)
    if not np.array_equal(o[~finite], r[~finite], equal_nan=True):
        return False, float("inf"), 0.0
    rtol, atol = tolerance(np.asarray(ref).dtype, kind, reduction_len)
    spread = 0.0
    for a in alternatives:
        a = np.asarray(a, np.float64)
        if a.shape == r.shape:
            spread = max(spread, float(np.linalg.norm((a - r)[finite & np.isfinite(a)])))
    dist = float(np.linalg.norm((o - r)[finite]))
    bound = k * spread + float(np.linalg.norm((atol + rtol * np.abs(r))[finite]))
    return dist <= bound, dist, bound
