"""Keras fit of an MLP (784-256-256-10) with Adam and an accuracy metric, 3200 random samples,
batch 64: ms per step over 6 epochs after a warm-up epoch and wait_for_compiles(). One side per
process (the other side's threads disturb it): `python keras_adam_fit.py ours|stock`."""
import sys, time, numpy as np, tensorflow as tf, keras, tf_backend
side = sys.argv[1] if len(sys.argv) > 1 else "ours"
rng = np.random.default_rng(0)
N = 3200
X = rng.random((N, 784), np.float32); Y = rng.integers(0, 10, N)
keras.utils.set_random_seed(0)
if side == "ours":
    tf_backend.enable()
m = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                      keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10, activation="softmax")])
m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
m.fit(X, Y, batch_size=64, epochs=1, verbose=0)
tf_backend.wait_for_compiles()
res = []
for _ in range(6):
    t0 = time.perf_counter(); h = m.fit(X, Y, batch_size=64, epochs=1, verbose=0)
    res.append((time.perf_counter() - t0) / (N // 64) * 1e3)
print(side, "ms/step", ["%.2f" % r for r in res], "median %.2f" % np.median(res),
      "loss %.5f" % h.history["loss"][-1])
