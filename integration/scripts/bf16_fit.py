"""Issue 16's mixed-precision script: Keras "mixed_bfloat16", the small CNN of `tfb bench
bf16-train-step` on 2048 32x32x3 images, batch 64, 2 epochs of fit, then predict on 1024;
stock and ours alternating in one process. Usage: python integration/scripts/bf16_fit.py
[stock,ours]; TF_BACKEND_FUNCTION_CHOICE=off keeps every function on our executor (our own
half-precision kernels), the default lets the function choice decide."""
import sys
import time

import keras
import numpy as np

import tf_backend
from tf_backend.ab import bench

rng = np.random.default_rng(0)
X = rng.random((2048, 32, 32, 3), np.float32)
Y = rng.integers(0, 10, 2048)
for rep in range(2):
    for arm in (sys.argv[1].split(",") if len(sys.argv) > 1 else ("stock", "ours")):
        tf_backend.disable() if arm == "stock" else tf_backend.enable()
        m = bench._mixed_bf16_cnn(keras)
        m.compile("adam", "sparse_categorical_crossentropy")
        t0 = time.perf_counter()
        h = m.fit(X, Y, batch_size=64, epochs=2, verbose=0)
        t1 = time.perf_counter()
        p = m.predict(X[:1024], batch_size=256, verbose=0)
        t2 = time.perf_counter()
        print(f"{arm:6s} fit {t1 - t0:.2f} s loss {h.history['loss'][-1]:.4f} "
              f"predict {t2 - t1:.2f} s sum {float(np.sum(p)):.2f}", flush=True)
