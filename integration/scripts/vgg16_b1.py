"""VGG16 (keras.applications, random weights) at batch 1 in tf.function: stock vs ours, two rounds
in one process, medians of 7 calls; prints the weight cache's events (issue 16's cliff)."""
import time, statistics, numpy as np, tensorflow as tf, keras, tf_backend
m = keras.applications.VGG16(weights=None)
x = tf.constant(np.random.default_rng(0).random((1, 224, 224, 3), np.float32))
f = tf.function(lambda x: m(x, training=False))
def t(n=7):
    f(x); f(x)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(x); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), max(ts)
res = {}
for rnd in range(2):
    for side in ("stock", "ours"):
        tf_backend.enable() if side == "ours" else tf_backend.disable()
        res.setdefault(side, []).append(t())
        print(side, "median %.1f ms (min %.1f, max %.1f)" % tuple(v * 1e3 for v in res[side][-1]), flush=True)
tf_backend.enable(); a = f(x).numpy(); tf_backend.disable(); b = f(x).numpy()
print("max abs diff", np.abs(a - b).max())
print(tf_backend.stats().get("weight_cache"))
