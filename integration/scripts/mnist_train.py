"""Issue 16's MNIST-shaped training script, whole (run it under `tfb ab -- python ...`)."""
import time, numpy as np, keras
t0 = time.perf_counter()
rng = np.random.default_rng(0)
X = rng.random((6000, 28, 28, 1), np.float32); Y = rng.integers(0, 10, 6000)
keras.utils.set_random_seed(0)
m = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Flatten(), keras.layers.Dropout(0.5), keras.layers.Dense(10, activation="softmax")])
m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
h = m.fit(X, Y, batch_size=128, epochs=3, verbose=0)
print(f"fit+build {time.perf_counter() - t0:.2f} s loss {h.history['loss'][-1]:.4f}")
