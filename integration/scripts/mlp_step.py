"""An MLP training step (784-256-256-10, batch 64, tape + assign_sub), stock and ours in one
process, 600 steps in 6 alternating blocks: median ms per step (issue 18's single-process
counterpart of multiworker_step.py)."""
import time, sys, numpy as np, tensorflow as tf, tf_backend
tf.random.set_seed(0)
def var(*s): return tf.Variable(tf.random.normal(s, stddev=0.05))
vs = [var(784, 256), var(256), var(256, 256), var(256), var(256, 10), var(10)]
x = tf.random.normal([64, 784]); y = tf.one_hot(tf.random.uniform([64], 0, 10, tf.int32), 10)
def make():
    @tf.function
    def step(x, y):
        with tf.GradientTape() as t:
            h = tf.nn.relu(x @ vs[0] + vs[1]); h = tf.nn.relu(h @ vs[2] + vs[3]); o = h @ vs[4] + vs[5]
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, o))
        for v, g in zip(vs, t.gradient(loss, vs)):
            v.assign_sub(0.01 * g)
        return loss
    return step
arms = {}
tf_backend.disable(); arms["stock"] = make(); arms["stock"](x, y)
tf_backend.enable(); arms["ours"] = make()
for _ in range(30): arms["ours"](x, y)
tf_backend.wait_for_compiles()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 600
res = {k: [] for k in arms}
for _ in range(6):
    for k, f in arms.items():
        (tf_backend.enable if k == "ours" else tf_backend.disable)()
        for _ in range(n // 6):
            t0 = time.perf_counter(); f(x, y); res[k].append(time.perf_counter() - t0)
for k, v in res.items():
    v = np.array(v) * 1e3
    print(k, "median %.3f ms  p25 %.3f p75 %.3f" % (np.median(v), *np.percentile(v, [25, 75])))
