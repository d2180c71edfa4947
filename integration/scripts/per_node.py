"""Per-node overhead: tf.functions of 10 and 210 alternating 4x4 MatMul/Transpose nodes; the
difference / 200 per side: stock; ours with compiled regions (waiting for their background
compile first); ours generated drivers without regions; ours interpreted without regions."""
import os, time, numpy as np, tensorflow as tf, tf_backend, statistics
from tf_backend import executor
w = tf.constant(np.random.rand(4, 4).astype(np.float32)); x = tf.constant(np.random.rand(4, 4).astype(np.float32))
def make(n):
    @tf.function
    def f(x):
        for _ in range(n // 2):
            x = tf.transpose(tf.matmul(x, w))
        return x
    return f
def t(f, reps=300):
    for _ in range(20): f(x)
    tf_backend.wait_for_compiles()
    for _ in range(5): f(x)
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps): f(x)
        ts.append((time.perf_counter() - t0) / reps)
    return statistics.median(ts)
for side, regions, drivers in (("stock", True, True), ("ours", True, True),
                               ("ours-no-regions", False, True),
                               ("ours-interp-no-regions", False, False)):
    os.environ["TF_BACKEND_DISABLE_PASSES"] = "" if regions else "compile_regions"
    executor.DRIVERS = drivers
    (tf_backend.disable if side == "stock" else tf_backend.enable)()
    a, b = make(10), make(210)
    ta, tb = t(a), t(b)
    print(side, f"call10 {ta*1e6:.1f} us call210 {tb*1e6:.1f} us per-node {(tb - ta) / 200 * 1e6:.2f} us")
