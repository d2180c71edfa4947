"""End to end: Keras MLP and small CNN forward, fit and evaluate match stock; compute ops on ours."""
import numpy as np
import pytest

import tf_backend
from integration import models
from tf_backend import numerics

FORWARD_OPS = {"small_mlp": ("MatMul", "BiasAdd", "Relu", "Tanh"),
               "small_cnn": ("Conv2D", "BiasAdd", "Relu", "MaxPool", "AvgPool", "MatMul",
                             "Sigmoid", "Reshape")}
TRAIN_OPS = {"small_mlp": ("MatMul", "BiasAddGrad", "ReluGrad", "TanhGrad"),
             "small_cnn": ("Conv2DBackpropFilter", "Conv2DBackpropInput", "BiasAddGrad",
                           "ReluGrad", "MaxPoolGrad", "AvgPoolGrad", "SigmoidGrad")}


def _train(keras, name, steps=3, batch=16):
    """Fresh model (fixed seed) -> forward, `steps` eager fit steps, evaluate."""
    model = models.build(name, keras, seed=0)
    x, y = models.sample_batch(model, batch * steps, seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True)
    forward = np.asarray(model(x[:batch]))
    hist = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    loss = model.evaluate(x, y, batch_size=batch, verbose=0)
    return forward, hist.history["loss"], loss, [np.asarray(w) for w in model.weights]


@pytest.mark.parametrize("name", ["small_mlp", "small_cnn"])
def test_keras_model_matches_stock(name, tf):
    import keras
    tf_backend.disable()
    ref = _train(keras, name)
    tf_backend.enable()
    tf_backend.reset_stats()
    try:
        ours = _train(keras, name)
        stats = tf_backend.stats()["ops"]
    finally:
        tf_backend.disable()
    assert numerics.compare(ours[0], ref[0], "reduction", 64) is None, "forward differs"
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4)
    np.testing.assert_allclose(ours[2], ref[2], rtol=1e-4)
    for w_ours, w_ref in zip(ours[3], ref[3]):
        np.testing.assert_allclose(w_ours, w_ref, rtol=1e-4, atol=1e-5)
    for op in FORWARD_OPS[name] + TRAIN_OPS[name]:
        s = stats.get(op, {})
        assert s.get("backend", 0) > 0, f"{op} not on our kernels: {s}"
        assert s.get("fallback", 0) == 0, f"{op} fell back: {s}"


def test_dropout_masks_in_fit_with_seeds_set_are_stock(tf):
    """Keras fit (compiled train function) through Dropout with seeds set: the masks, hence
    the losses and weights, are stock's. Also a stateful random op inside the model (a layer
    drawing tf.random.uniform with an op seed, also called eagerly by the user): its draws in the
    function are stock's, not a continuation of the eager op's sequence."""
    import keras

    class Noise(keras.layers.Layer):
        def call(self, x, training=None):
            return x + 0.1 * tf.random.uniform(tf.shape(x), seed=11) if training else x

    def run():
        keras.utils.set_random_seed(3)
        tf.random.set_seed(3)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((96, 20)).astype(np.float32)
        y = rng.integers(0, 4, 96)
        m = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dropout(0.5), Noise(), keras.layers.Dense(4)])
        m.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        eager = tf.random.uniform([32, 32], seed=11)   # the same op and seeds, eagerly
        h = m.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
        return h.history["loss"], [np.asarray(w) for w in m.weights] + [np.asarray(eager)]

    tf_backend.disable()
    ref = run()
    tf_backend.enable()
    tf_backend.reset_stats()
    try:
        got = run()
        stats = tf_backend.stats()
    finally:
        tf_backend.disable()
    # a different mask would move the loss by far more than summation order does
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for a, b in zip(got[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    fns = stats["functions"]
    assert any(f["calls"] and not f["fallback_calls"] for f in fns.values()), fns
    assert stats["ops"]["MatMul"]["backend"] > 0
