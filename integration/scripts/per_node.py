"""Per-node overhead: tf.functions of 10 and 210 alternating 4x4 MatMul/Transpose nodes; the
difference / 200 per side: stock; ours with compiled regions (waiting for their background
compile first); ours generated drivers without regions; ours interpreted without regions.

Ours is also timed inside executor.run alone ("run"), without TensorFlow's function-call layer,
whose own cost varies by more than the whole difference on a noisy VM. The function choice is
off: every ours arm runs our executor (the measured choice may hand a function to TensorFlow).
Both sides fold each Transpose into the next MatMul's transpose_a (Grappler's
FoldTransposeIntoMatMul for stock, passes/canonicalize.py for ours), so half the nodes of the
graph run as products and the figure is per node of the user's graph."""
import os
import statistics
import time

os.environ["TF_BACKEND_FUNCTION_CHOICE"] = "off"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_backend  # noqa: E402
from tf_backend import executor  # noqa: E402

w = tf.constant(np.random.rand(4, 4).astype(np.float32))
x = tf.constant(np.random.rand(4, 4).astype(np.float32))
runs = []
_run = executor.run


def _timed_run(prog, args, *a, **k):
    t0 = time.perf_counter()
    try:
        return _run(prog, args, *a, **k)
    finally:
        runs.append(time.perf_counter() - t0)


executor.run = _timed_run


def make(n):
    @tf.function
    def f(x):
        for _ in range(n // 2):
            x = tf.transpose(tf.matmul(x, w))
        return x
    return f


def t(f, reps=300):
    """(median seconds per call, median seconds per executor.run) over 7 blocks."""
    for _ in range(20):
        f(x)
    tf_backend.wait_for_compiles()
    for _ in range(5):
        f(x)
    calls, inside = [], []
    for _ in range(7):
        del runs[:]
        t0 = time.perf_counter()
        for _ in range(reps):
            f(x)
        calls.append((time.perf_counter() - t0) / reps)
        inside.append(statistics.median(runs) if runs else float("nan"))
    return statistics.median(calls), statistics.median(inside)


for side, regions, drivers in (("stock", True, True), ("ours", True, True),
                               ("ours-no-regions", False, True),
                               ("ours-interp-no-regions", False, False)):
    os.environ["TF_BACKEND_DISABLE_PASSES"] = "" if regions else "compile_regions"
    executor.DRIVERS = drivers
    (tf_backend.disable if side == "stock" else tf_backend.enable)()
    (ta, ra), (tb, rb) = t(make(10)), t(make(210))
    line = (f"{side:24s} call10 {ta * 1e6:6.1f} us call210 {tb * 1e6:6.1f} us "
            f"per-node {(tb - ta) / 200 * 1e6:5.2f} us")
    if side != "stock":
        line += f"  (inside executor.run: {(rb - ra) / 200 * 1e6:5.2f} us)"
    print(line)
