"""Bundled Keras models with random weights (no downloads): the one home of the model builders.

Each builder takes the `keras` module and returns an unbuilt-weights-random model; `build(name,
keras)` seeds Keras first. Used by `tfb ab --model`, `tfb bench`, tests, demo and benchmarks.
"""
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


def resnet_block(keras, size=8, channels=16, filters=8, classes=10):
    """One ResNet bottleneck block (1x1 -> 3x3 -> 1x1 convolutions with BatchNormalization and
    ReLU, a projection shortcut, Add, ReLU) on small inputs, then a pooled head: ResNet-50's
    building block at CI size."""
    L = keras.layers
    x_in = keras.Input((size, size, channels))
    x = L.Conv2D(channels, 3, padding="same", use_bias=False)(x_in)   # a stem
    x = L.BatchNormalization(epsilon=1.001e-5)(x)
    x = L.ReLU()(x)
    shortcut = L.Conv2D(4 * filters, 1, strides=2)(x)
    shortcut = L.BatchNormalization(epsilon=1.001e-5)(shortcut)
    h = L.Conv2D(filters, 1, strides=2)(x)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    h = L.Activation("relu")(h)
    h = L.Conv2D(filters, 3, padding="same")(h)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    h = L.Activation("relu")(h)
    h = L.Conv2D(4 * filters, 1)(h)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    x = L.Activation("relu")(L.Add()([shortcut, h]))
    out = L.Dense(classes)(L.GlobalAveragePooling2D()(x))
    return keras.Model(x_in, out, name="resnet_block")


def _image_shape(size):
    return None if size is None else (size, size, 3)


def resnet50(keras, size=None):
    """size: square input side (default 224, ImageNet's); Keras accepts >= 32."""
    return keras.applications.ResNet50(weights=None, input_shape=_image_shape(size))


def mobilenetv2(keras, size=None):
    return keras.applications.MobileNetV2(weights=None, input_shape=_image_shape(size))


def densenet121(keras, size=None):
    return keras.applications.DenseNet121(weights=None, input_shape=_image_shape(size))


# graph-heavy networks (issue 15): many small nodes per call
def nasnetmobile(keras, size=None):
    """NASNet-A Mobile: ~1,900 nodes of separable convolutions, pools and adds."""
    return keras.applications.NASNetMobile(weights=None, input_shape=_image_shape(size or 224))


def inceptionv3(keras, size=None):
    """Inception-v3 at 299x299: parallel branches concatenated, batch norm everywhere."""
    return keras.applications.InceptionV3(weights=None, input_shape=_image_shape(size))


def resnet50v2(keras, size=None):
    """Pre-activation ResNet-50 (batch norm and ReLU before each convolution)."""
    return keras.applications.ResNet50V2(weights=None, input_shape=_image_shape(size))


def transformer(keras, seq=128, d_model=256, heads=4, ff=1024, classes=10):
    """One post-norm Transformer encoder block on (seq, d_model) features, then a pooled head."""
    L = keras.layers
    x_in = keras.Input((seq, d_model))
    att = L.MultiHeadAttention(num_heads=heads, key_dim=d_model // heads)(x_in, x_in)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x_in, att]))
    h = L.Dense(ff, activation="gelu")(x)
    h = L.Dense(d_model)(h)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, h]))
    out = L.Dense(classes)(L.GlobalAveragePooling1D()(x))
    return keras.Model(x_in, out, name="transformer")


def lstm(keras, seq=32, features=64, units=128, classes=10):
    return keras.Sequential([keras.Input((seq, features)), keras.layers.LSTM(units),
                             keras.layers.Dense(classes)], name="lstm")


BUILDERS = {"mlp": mlp, "small_mlp": small_mlp, "small_cnn": small_cnn, "cnn": cnn,
            "resnet_block": resnet_block, "resnet50": resnet50, "mobilenetv2": mobilenetv2,
            "densenet121": densenet121, "transformer": transformer, "lstm": lstm,
            "nasnetmobile": nasnetmobile, "inceptionv3": inceptionv3, "resnet50v2": resnet50v2}


def build(name, keras, seed=0, **options):
    """options go to the builder (e.g. size=64 for the image models)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown bundled model {name!r}; choose from {', '.join(BUILDERS)}")
    keras.utils.set_random_seed(seed)
    return BUILDERS[name](keras, **options)


def sample_batch(model, batch, seed=0, classes=None):
    """Random inputs (and integer labels) matching the model's (single) input shape."""
    rng = np.random.default_rng(seed)
    shape = (batch,) + tuple(model.input_shape[1:])
    x = rng.standard_normal(shape).astype(np.float32)
    n = classes or model.output_shape[-1]
    y = rng.integers(0, n, size=(batch,)).astype(np.int32)
    return x, y
