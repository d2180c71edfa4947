"""Per-output numerical differences between arms, with the verdict of tf_backend.numerics.

Whole models chain many reductions, so the verdict uses the contract's "reduction" tolerance
with a reduction length (`--reduction-len`, default 4096) standing in for the model's depth.
Reference rows (stock tf.function and XLA against stock eager) show how far stock TensorFlow
moves by itself, to read ours against.
"""
import numpy as np

from .. import numerics

# (arm, reference, role)
CHECKS = (("ours_eager", "stock_eager", "backend"), ("ours_function", "stock_function", "backend"),
          ("stock_function", "stock_eager", "reference"), ("stock_xla", "stock_eager", "reference"))


def max_ulp(ours, ref):
    """Largest difference in units of the reference's last place (floats only, finite values)."""
    o, f = np.asarray(ours), np.asarray(ref)
    if f.dtype.kind != "f" or o.dtype != f.dtype or o.shape != f.shape or f.size == 0:
        return None
    ok = np.isfinite(o) & np.isfinite(f)
    if not ok.any():
        return 0.0
    with np.errstate(all="ignore"):
        d = np.abs(o[ok].astype(np.float64) - f[ok].astype(np.float64))
        ulp = np.spacing(np.abs(f[ok])).astype(np.float64)
    return float(np.max(d / ulp))


def output_rows(arms_by_name, reduction_len=4096, compute_dtype=None):
    """Each checked arm's outputs against its reference under the numerics contract: the
    outputs' dtype's tolerance, or `compute_dtype`'s where the model computes in a narrower one
    (mixed precision: bfloat16 layers under a float32 softmax)."""
    tol = {}
    if compute_dtype is not None:
        import ml_dtypes   # noqa: F401 - numpy learns "bfloat16"
        # a few of its ulps on each output (its rounding, not a sum's length, sets the gap:
        # the reduction bound at 4096 terms would be 400% in bfloat16)
        tol = dict(zip(("rtol", "atol"), numerics.tolerance(compute_dtype, "elementwise")))
    rows = []
    for arm, ref, role in CHECKS:
        a, r = arms_by_name.get(arm), arms_by_name.get(ref)
        if a is None or r is None or a.outputs is None or r.outputs is None:
            continue
        if len(a.outputs) != len(r.outputs):
            rows.append({"kind": "output", "arm": arm, "reference": ref, "role": role,
                         "output": None, "verdict": "mismatch",
                         "detail": f"{len(a.outputs)} outputs vs {len(r.outputs)}"})
            continue
        for i, (o, f) in enumerate(zip(a.outputs, r.outputs)):
            detail = numerics.compare(o, f, "reduction", reduction_len, **tol)
            spread = None
            if detail is not None and role == "backend" and not tol:
                spread = _stock_spread(arms_by_name, ref, i, o, f, reduction_len)
                if spread is not None and spread["ok"]:
                    detail = None
            numeric = o.dtype.kind in "fciub" and o.shape == f.shape
            abs_err, rel_err = numerics.max_errors(o, f) if numeric else (None, None)
            rows.append({"kind": "output", "arm": arm, "reference": ref, "role": role,
                         "output": i, "shape": list(f.shape), "dtype": f.dtype.name,
                         "max_abs": abs_err, "max_rel": rel_err, "max_ulp": max_ulp(o, f),
                         "reduction_len": reduction_len, "compute_dtype": compute_dtype,
                         "verdict": "ok" if detail is None else "mismatch", "detail": detail,
                         "spread": spread})
    return rows


def _stock_spread(arms_by_name, ref, i, o, f, reduction_len):
    """A backend output outside the tolerance is still within the contract when it lies within
    stock's own spread: as far from stock as stock's other executions of the same call (XLA,
    eager vs tf.function) are, times numerics.SPREAD_K (a 3-GEMM chain at K=512: XLA and ours
    both 7e-5 off stock's oneDNN on an element that cancels to 0.089). None without another
    stock execution to measure the spread by."""
    alts = []
    for name in ("stock_eager", "stock_function", "stock_xla"):
        arm = arms_by_name.get(name)
        if name != ref and arm is not None and arm.outputs is not None and len(arm.outputs) > i:
            alts.append(arm.outputs[i])
    if not alts or not (np.asarray(f).dtype.kind == "f" and np.shape(o) == np.shape(f)):
        return None
    ok, dist, bound = numerics.within_spread(o, f, alts, "reduction", reduction_len)
    return {"ok": bool(ok), "distance": dist, "bound": bound}
