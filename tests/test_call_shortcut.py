"""tf_adapter.install_call_shortcut: a repeated tf.function call with the same tensor shapes and
dtypes, in the same context, runs the concrete function TensorFlow resolved before without its
Python binding and lookup; everything else takes TensorFlow's path. Each case against the same
function called with the shortcut removed."""
import numpy as np
import pytest

import tf_backend
from tf_backend import tf_adapter as tfa


@pytest.fixture
def lookups(tf, monkeypatch):
    """Counts the calls that take TensorFlow's own path (Function._call: binding, lookup,
    tracing) while the backend (and with it the shortcut) is on."""
    from tensorflow.python.eager.polymorphic_function import polymorphic_function
    n = [0]
    real = polymorphic_function.Function._call

    def counted(self, *a, **k):
        n[0] += 1
        return real(self, *a, **k)
    monkeypatch.setattr(polymorphic_function.Function, "_call", counted)
    with tf_backend.enabled():
        yield n


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_repeated_calls_skip_the_lookup_and_match(tf, lookups):
    f = tf.function(lambda a, b: tf.matmul(a, b) + 1.0)
    a, b = tf.constant(_x(3, 4)), tf.constant(_x(4, 5, seed=1))
    first = f(a, b).numpy()
    assert lookups[0] == 1
    for _ in range(3):
        np.testing.assert_array_equal(f(a, b).numpy(), first)
    assert lookups[0] == 1
    # other values of the same shapes: the same concrete function, new results
    c = tf.constant(_x(3, 4, seed=2))
    np.testing.assert_allclose(f(c, b).numpy(), c.numpy() @ b.numpy() + 1.0, rtol=1e-5)
    assert lookups[0] == 1


def test_a_new_shape_traces_and_both_stay_right(tf, lookups):
    f = tf.function(lambda a: tf.reduce_sum(a, axis=0))
    small, big = tf.constant(_x(2, 3)), tf.constant(_x(5, 3))
    f(small)
    assert f.experimental_get_tracing_count() == 1
    np.testing.assert_allclose(f(big).numpy(), big.numpy().sum(0), rtol=1e-5)
    assert f.experimental_get_tracing_count() == 2
    n = lookups[0]
    np.testing.assert_allclose(f(small).numpy(), small.numpy().sum(0), rtol=1e-5)
    np.testing.assert_allclose(f(big).numpy(), big.numpy().sum(0), rtol=1e-5)
    assert lookups[0] == n + 1   # the retrace cleared what was known: small learnt again
    f(small), f(big)
    assert lookups[0] == n + 1


def test_python_values_keywords_and_dtypes_take_tensorflows_path(tf, lookups):
    f = tf.function(lambda a, k=2.0: a * k)
    a = tf.constant(_x(2, 2))
    for k in (2.0, 3.0):
        np.testing.assert_allclose(f(a, k).numpy(), a.numpy() * k)
    np.testing.assert_allclose(f(a, k=4.0).numpy(), a.numpy() * 4.0)
    n = lookups[0]
    f(a, 3.0), f(a, k=4.0)
    assert lookups[0] == n + 2
    i = tf.constant(np.arange(4, dtype=np.int32).reshape(2, 2))
    g = tf.function(lambda a: a + a)
    g(a)
    np.testing.assert_array_equal(g(i).numpy(), 2 * i.numpy())   # int32: its own trace
    assert g.experimental_get_tracing_count() == 2


def test_variables_are_read_at_each_call(tf, lookups):
    v = tf.Variable(_x(2, 2))
    f = tf.function(lambda a: a + v)
    a = tf.constant(_x(2, 2, seed=1))
    f(a)
    for step in range(3):
        v.assign(v + 1.0)
        np.testing.assert_allclose(f(a).numpy(), a.numpy() + v.numpy(), rtol=1e-6)
    assert lookups[0] == 1


def test_gradients_through_a_shortcut_call(tf, lookups):
    w = tf.Variable(_x(3, 3))
    f = tf.function(lambda a: tf.reduce_sum(tf.tanh(tf.matmul(a, w))))
    a = tf.constant(_x(4, 3, seed=1))
    f(a)
    with tf.GradientTape() as tape:
        tape.watch(a)
        y = f(a)
    assert lookups[0] == 1
    gw, ga = tape.gradient(y, [w, a])
    tfa.uninstall_call_shortcut()
    try:
        with tf.GradientTape() as tape:
            tape.watch(a)
            y2 = f(a)
        rw, ra = tape.gradient(y2, [w, a])
    finally:
        tfa.install_call_shortcut()
    np.testing.assert_array_equal(y.numpy(), y2.numpy())
    np.testing.assert_array_equal(gw.numpy(), rw.numpy())
    np.testing.assert_array_equal(ga.numpy(), ra.numpy())


def test_inside_a_device_scope_and_inside_tracing(tf, lookups):
    """An eager device scope is not part of TensorFlow's cache key (the call places the
    function at run time, in _call_flat, as on TensorFlow's path); a call while another
    function traces gets symbolic tensors and takes TensorFlow's path."""
    f = tf.function(lambda a: a * 3.0)
    a = tf.constant(_x(2, 2))
    f(a)
    with tf.device("/CPU:0"):
        out = f(a)
    assert "CPU:0" in out.device
    np.testing.assert_allclose(out.numpy(), a.numpy() * 3.0)
    assert lookups[0] == 1
    g = tf.function(lambda a: f(a) + 1.0)
    np.testing.assert_allclose(g(a).numpy(), a.numpy() * 3.0 + 1.0)
    assert lookups[0] == 3   # g's call, and f's while g traced


def test_run_functions_eagerly_runs_python(tf, lookups):
    calls = []

    def body(a):
        calls.append(1)
        return a * 2.0
    f = tf.function(body)
    a = tf.constant(_x(2, 2))
    f(a), f(a)
    assert len(calls) == 1
    tf.config.run_functions_eagerly(True)
    try:
        np.testing.assert_allclose(f(a).numpy(), a.numpy() * 2.0)
    finally:
        tf.config.run_functions_eagerly(False)
    assert len(calls) == 2


@pytest.mark.parametrize("kind", ["jit_compile", "input_signature"])
def test_functions_it_leaves_alone(tf, lookups, kind):
    if kind == "jit_compile":
        f = tf.function(lambda a: a * 2.0, jit_compile=True)
    else:
        f = tf.function(lambda a: a * 2.0, input_signature=[tf.TensorSpec([2, 2], tf.float32)])
    a = tf.constant(_x(2, 2))
    for _ in range(3):
        np.testing.assert_allclose(f(a).numpy(), a.numpy() * 2.0)
    assert lookups[0] == 3
    assert f.__dict__["_tfb_calls"] == (None, None)


def test_signatures_kept_per_function_are_bounded(tf, lookups, monkeypatch):
    monkeypatch.setattr(tfa, "CALL_KEYS_MAX", 4)
    f = tf.function(lambda a: tf.reduce_sum(a), reduce_retracing=True)
    for n in range(1, 10):
        a = tf.constant(_x(n))
        np.testing.assert_allclose(f(a).numpy(), a.numpy().sum(), rtol=1e-5)
    assert len(f.__dict__["_tfb_calls"][1]) <= 4


def test_keras_model_and_disable(tf):
    import keras
    from tensorflow.python.eager.polymorphic_function import polymorphic_function
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="relu"),
                          keras.layers.Dense(2)])
    x = tf.constant(_x(5, 6))
    ref = m(x).numpy()
    with tf_backend.enabled():
        f = tf.function(lambda x: m(x, training=False))
        outs = [f(x).numpy() for _ in range(3)]
        cls, orig = tfa._call_installed
        assert cls is polymorphic_function.Function and cls.__call__ is not orig
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6)
    prev = tf_backend.mode()
    tf_backend.disable()
    try:
        assert tfa._call_installed is None and polymorphic_function.Function.__call__ is orig
        np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-5, atol=1e-6)
    finally:
        if prev != "off":
            tf_backend.enable(prev)
