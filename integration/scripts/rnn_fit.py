"""Issue 15's recurrent text classifier: 2 epochs of fit on 2048 x 40 tokens, then predict,
stock and ours alternating in one process. Usage: python integration/scripts/rnn_fit.py [stock,ours,interp,rule]
("interp": ours with executor.DRIVERS off; "rule": ours with the products' kernel by gemm's
fixed rule instead of its measured choice)."""
import sys, time, numpy as np, tensorflow as tf, keras, tf_backend
from tf_backend import executor
from kernels.cpu import gemm
rng = np.random.default_rng(0)
X = rng.integers(0, 2000, (2048, 40)).astype(np.int32); Y = rng.integers(0, 2, (2048, 1)).astype(np.float32)
Xp = X[:512]
def build():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((40,), dtype="int32"), keras.layers.Embedding(2000, 64),
                          keras.layers.LSTM(64, return_sequences=True), keras.layers.GRU(32), keras.layers.Dense(1)])
    m.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    return m
arms = sys.argv[1].split(",") if len(sys.argv) > 1 else ["stock", "ours"]
for rep in range(2):
    for arm in arms:
        if arm == "stock": tf_backend.disable()
        else:
            executor.DRIVERS = arm != "interp"
            gemm.CHOOSE = arm != "rule"
            tf_backend.enable()
        m = build()
        t0 = time.perf_counter(); h = m.fit(X, Y, batch_size=64, epochs=2, verbose=0); t1 = time.perf_counter()
        m.predict(Xp, batch_size=64, verbose=0); t2 = time.perf_counter()
        m.predict(Xp, batch_size=64, verbose=0); t3 = time.perf_counter()
        print(f"{arm:7s} fit {t1-t0:6.2f} s  predict(first) {t2-t1:5.2f} s predict {t3-t2:5.2f} s  loss {h.history['loss'][-1]:.5f}", flush=True)
