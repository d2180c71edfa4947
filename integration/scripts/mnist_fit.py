"""Issue 16's MNIST-shaped training script: Conv-Pool-Conv-Pool-Dropout-Dense on 6000 images,
batch 128, 3 epochs of fit; stock and ours alternating in one process (TF_BACKEND_AUTOTUNE applies).
Usage: python integration/scripts/mnist_fit.py [stock,ours,rule] ("rule": ours with the products'
kernel by gemm's fixed rule instead of its measured choice)."""
import time, numpy as np, tensorflow as tf, keras, sys
import tf_backend
from kernels.cpu import gemm
rng = np.random.default_rng(0)
X = rng.random((6000, 28, 28, 1), np.float32); Y = rng.integers(0, 10, 6000)
def build():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dropout(0.5), keras.layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m
for rep in range(2):
    for arm in (sys.argv[1].split(",") if len(sys.argv) > 1 else ("stock", "ours")):
        gemm.CHOOSE = arm != "rule"
        tf_backend.disable() if arm == "stock" else tf_backend.enable()
        m = build()
        t0 = time.perf_counter(); h = m.fit(X, Y, batch_size=128, epochs=3, verbose=0); t1 = time.perf_counter()
        print(f"{arm:6s} fit {t1 - t0:.2f} s loss {h.history['loss'][-1]:.4f}", flush=True)
print(tf_backend.stats().get("autotune"), tf_backend.stats().get("gemm_choice"))
