"""Per-node overhead: tf.functions of 10 and 210 alternating 4x4 MatMul/Transpose nodes; the
difference / 200 per side: stock, ours (generated drivers), ours interpreted."""
import time, numpy as np, tensorflow as tf, tf_backend, statistics, sys
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
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps): f(x)
        ts.append((time.perf_counter() - t0) / reps)
    return statistics.median(ts)
res = {}
for side in ("stock", "ours"):
    if side == "ours": tf_backend.enable()
    else: tf_backend.disable()
    a, b = make(10), make(210)
    ta, tb = t(a), t(b)
    res[side] = (tb - ta) / 200 * 1e6
    print(side, f"call10 {ta*1e6:.1f} us call210 {tb*1e6:.1f} us per-node {res[side]:.2f} us")
from tf_backend import executor
executor.DRIVERS = False
tf_backend.enable()
a, b = make(10), make(210)
ta, tb = t(a), t(b)
print("ours-interp", f"call10 {ta*1e6:.1f} us call210 {tb*1e6:.1f} us per-node {(tb-ta)/200*1e6:.2f} us")
