"""Bundled Keras models with random weights (no downloads), shared by tests, demo and benchmarks."""
import numpy as np


def mlp(keras, in_dim=784, hidden=(512, 512), classes=10):
    layers = [keras.Input((in_dim,))]
    layers += [keras.layers.Dense(h, activation="relu") for h in hidden]
    layers += [keras.layers.Dense(classes)]
    return keras.Sequential(layers, name="mlp")


def small_mlp(keras):
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(3)], name="small_mlp")


def small_cnn(keras, size=16, channels=3, classes=10):
    L = keras.layers
    return keras.Sequential([
        keras.Input((size, size, channels)),
        L.Conv2D(8, 3, padding="same", activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(16, 3, padding="valid", activation="relu"),
        L.AveragePooling2D(2),
        L.Flatten(),
        L.Dense(32, activation="sigmoid"),
        L.Dense(classes),
    ], name="small_cnn")


def cnn(keras):
    return small_cnn(keras, size=32, channels=3, classes=10)


BUILDERS = {"mlp": mlp, "small_mlp": small_mlp, "small_cnn": small_cnn, "cnn": cnn}


def build(name, keras, seed=0):
    keras.utils.set_random_seed(seed)
    return BUILDERS[name](keras)


def sample_batch(model, batch, seed=0, classes=None):
    """Random inputs (and integer labels) matching the model's input shape."""
    rng = np.random.default_rng(seed)
    shape = (batch,) + tuple(model.input_shape[1:])
    x = rng.standard_normal(shape).astype(np.float32)
    n = classes or model.output_shape[-1]
    y = rng.integers(0, n, size=(batch,)).astype(np.int32)
    return x, y
