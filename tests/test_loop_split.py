"""Compiled loops split by rows (kernels/cpu/loop_split.py): a recurrent loop whose steps keep
batch rows apart runs as two half-batch loops; results against stock, against the same loop run
whole, at one thread and at two; loops that mix rows run whole; errors inside a half."""
import contextlib

import numba
import numpy as np
import pytest

import tf_backend
from kernels.cpu import loop_split, loops
from tf_backend import functions

B, F, U, T = 64, 64, 64, 12


@pytest.fixture
def halves(monkeypatch):
    """Counts calls of split loops."""
    calls = []
    orig = loop_split.Rows.__call__

    def call(self, *args):
        calls.append(self._B)
        return orig(self, *args)

    monkeypatch.setattr(loop_split.Rows, "__call__", call)
    return calls


def _weights():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal(s) * 0.2).astype(np.float32)
            for s in ((F, 4 * U), (U, 4 * U), (4 * U,))]


def _lstm(tf, mix=None):
    W, Uw, b = (tf.constant(w) for w in _weights())

    def run(xs):
        ta = tf.TensorArray(tf.float32, size=T).unstack(xs)
        out = tf.TensorArray(tf.float32, size=T)

        def body(i, h, c, out):
            z = tf.matmul(ta.read(i), W) + tf.matmul(h, Uw) + b
            zi, zf, zc, zo = tf.split(z, 4, axis=1)
            c = tf.sigmoid(zf) * c + tf.sigmoid(zi) * tf.tanh(zc)
            h = tf.sigmoid(zo) * tf.tanh(c)
            if mix is not None:
                h = mix(h)
            return i + 1, h, c, out.write(i, h)

        z = tf.zeros([B, U])
        _, h, c, out = tf.while_loop(lambda i, *_: i < T, body, (0, z, z, out))
        return h, c, out.stack()

    return run


def _xs():
    return np.random.default_rng(1).standard_normal((T, B, F)).astype(np.float32)


def _ours(tf, f, *args, split=True):
    functions.clear_cache()
    old = loops.SPLIT_ROWS
    loops.SPLIT_ROWS = split
    try:
        with tf_backend.enabled():
            return [np.asarray(t) for t in tf.nest.flatten(f(*args))]
    finally:
        loops.SPLIT_ROWS = old


def test_recurrent_loop_runs_by_rows_like_stock_and_like_the_whole_loop(tf, halves):
    f = tf.function(_lstm(tf))
    x = tf.constant(_xs())
    stock = [t.numpy() for t in f(x)]
    whole = _ours(tf, f, x, split=False)
    assert not halves
    ours = _ours(tf, f, x)
    assert halves == [B]
    for a, s, w in zip(ours, stock, whole):
        np.testing.assert_allclose(a, s, rtol=1e-5, atol=1e-5)
        # half-batch products: OpenBLAS blocks 32 rows otherwise than 64 (a few ulps)
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6)


def test_split_loop_gives_the_same_bits_on_one_thread(tf, halves):
    f = tf.function(_lstm(tf))
    x = tf.constant(_xs())
    two = _ours(tf, f, x)
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = _ours(tf, f, x)
    finally:
        numba.set_num_threads(old)
    assert halves == [B, B]
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mix", ["mean", "reverse", "gram"])
def test_loop_that_mixes_rows_runs_whole(tf, halves, mix):
    fn = {"mean": lambda h: h - tf.reduce_mean(h, axis=0),
          "reverse": lambda h: tf.reverse(h, [0]),
          "gram": lambda h: h + tf.matmul(h, h, transpose_a=True)[:1] * 1e-3}[mix]
    f = tf.function(_lstm(tf, fn))
    x = tf.constant(_xs())
    stock = [t.numpy() for t in f(x)]
    ours = _ours(tf, f, x)
    assert not halves
    for a, s in zip(ours, stock):
        np.testing.assert_allclose(a, s, rtol=1e-5, atol=1e-5)


def test_gradient_through_a_split_loop_with_growing_lists(tf, halves):
    """The forward loop of a tape pushes its intermediates onto lists with no room at the first
    run: each half grows its own buffer and half 1's rows join half 0's."""
    run = _lstm(tf)
    W = tf.Variable(_weights()[1][:, :F])

    @tf.function
    def grads(x):
        with tf.GradientTape() as tape:
            h, c, seq = run(tf.tanh(tf.einsum("tbf,fg->tbg", x, W)))
            loss = tf.reduce_sum(seq * seq) + tf.reduce_sum(h)
        return loss, tape.gradient(loss, W)

    x = tf.constant(_xs() * 0.5)
    stock = [t.numpy() for t in grads(x)]
    for _ in range(2):   # the second run has room for the pushes
        ours = _ours(tf, grads, x)
        for a, s in zip(ours, stock):
            np.testing.assert_allclose(a, s, rtol=1e-4, atol=1e-4)
    assert halves and set(halves) == {B}


def test_error_in_a_split_loop_raises_stocks_error(tf, halves):
    W = tf.constant(_weights()[1][:, :U])

    @tf.function
    def f(xs, n):
        ta = tf.TensorArray(tf.float32, size=T).unstack(xs)

        def body(i, h):
            return i + 1, tf.tanh(tf.matmul(ta.read(i), W) + tf.matmul(h, W))

        return tf.while_loop(lambda i, h: i < n, body, (0, tf.zeros([B, U])))[1]

    x = tf.constant(_xs())
    np.testing.assert_allclose(_ours(tf, f, x, tf.constant(T))[0], f(x, T).numpy(), rtol=1e-5,
                               atol=1e-5)
    assert halves
    with pytest.raises(Exception) as stock:
        f(x, tf.constant(T + 1))
    with pytest.raises(type(stock.value)):
        _ours(tf, f, x, tf.constant(T + 1))


def test_keras_recurrent_training_step_by_rows_matches_stock(tf, monkeypatch):
    """Keras' LSTM and GRU at batch 64: their forward loops split by rows and their gradient
    loops too, the weights' gradients summed per half (PARTIAL) and added after the loop."""
    import keras
    from tf_backend.ab.bench import _training_step
    plans = []
    orig = loop_split.plan

    def plan(loop, index_map):
        got = orig(loop, index_map)
        plans.append((loop.name, None if got is None else list(got[1])))
        return got

    monkeypatch.setattr(loop_split, "plan", plan)
    rng = np.random.default_rng(2)
    x = tf.constant(rng.integers(0, 50, (B, T)).astype(np.int32))
    y = tf.constant(rng.integers(0, 2, (B, 1)).astype(np.float32))

    def train(enable):
        keras.utils.set_random_seed(4)
        model = keras.Sequential([keras.Input((T,), dtype="int32"),
                                  keras.layers.Embedding(50, 32),
                                  keras.layers.LSTM(64, return_sequences=True),
                                  keras.layers.GRU(64), keras.layers.Dense(1)])
        step = tf.function(_training_step(tf, model, keras.optimizers.Adam(1e-2),
                                          keras.losses.BinaryCrossentropy(from_logits=True)))
        functions.clear_cache()
        losses = []
        with tf_backend.enabled() if enable else contextlib.nullcontext():
            for _ in range(3):
                losses.append(float(step(x, y)))
        return losses, [v.numpy() for v in model.trainable_variables]

    s_loss, s_w = train(False)
    o_loss, o_w = train(True)
    # (Adam carries a gradient summed in another order into the next steps: see the variants'
    # test below, which compares one step's gradients closely)
    np.testing.assert_allclose(o_loss, s_loss, rtol=1e-4)
    for a, b in zip(o_w, s_w):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)
    grads = [p for name, p in plans if "while_grad" in name]
    assert grads and all(p is not None and loop_split.PARTIAL in p for p in grads), plans
    assert all(p is not None for name, p in plans), plans


def test_a_forked_child_runs_split_loops_with_a_helper_of_its_own(tf):
    """The helper thread does not survive a fork: a child that runs a split loop after its parent
    did starts its own (it would otherwise wait forever on the parent's)."""
    import os
    f = tf.function(_lstm(tf))
    x = tf.constant(_xs())
    want = _ours(tf, f, x)   # the parent's helper runs
    assert loop_split._helper["thread"] is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child reports through the pipe
        ok = b"0"
        try:
            sp = loop_split._helper["thread"] is None
            a = np.zeros((B, U), np.float32)
            res = loop_split._both(lambda p, v: v + p, ((0, a), (1, a)))
            ok = b"1" if sp and res[1][0, 0] == 1 and loop_split._helper["thread"] is not None else b"0"
        finally:
            os.write(w, ok)
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
    np.testing.assert_array_equal(_ours(tf, f, x)[0], want[0])


_VARIANTS = {
    "masked_lstm": lambda L: [L.Embedding(50, 32, mask_zero=True), L.LSTM(64), L.Dense(1)],
    "bidirectional_lstm": lambda L: [L.Embedding(50, 32), L.Bidirectional(L.LSTM(64)),
                                     L.Dense(1)],
    "simple_rnn": lambda L: [L.Embedding(50, 32), L.SimpleRNN(128, return_sequences=True),
                             L.SimpleRNN(64), L.Dense(1)],
    "gru_reset_before": lambda L: [L.Embedding(50, 32), L.GRU(64, reset_after=False),
                                   L.Dense(1)],
}


@pytest.mark.parametrize("name", [   # a masked whole loop: test_compiled_loops.py
    pytest.param("masked_lstm", marks=pytest.mark.slow), "bidirectional_lstm",
    pytest.param("simple_rnn", marks=pytest.mark.slow),
    pytest.param("gru_reset_before", marks=pytest.mark.slow)])
def test_recurrent_layer_variants_by_rows_give_stocks_gradients(tf, name, monkeypatch):
    """Masking (SelectV2 on a [B, 1] mask in the step), both directions, SimpleRNN, GRU v1 at
    batch 64, loops split by rows: the loss, every weight's gradient and a prediction as
    stock's (errors relative to each value's largest element: ours 2e-7..2e-6, as far as the
    whole loops are). Compared after one step: Adam's normalised steps carry a 1e-7 difference
    of a gradient summed in another order into 1e-4 differences of weights within three steps."""
    import keras
    plans = []
    orig = loop_split.plan

    def plan(loop, index_map):
        got = orig(loop, index_map)
        plans.append(got is not None)
        return got

    monkeypatch.setattr(loop_split, "plan", plan)
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, (B, 10)).astype(np.int32)
    x[:, 7:] = 0
    x[::3, 5:] = 0
    y = rng.integers(0, 2, (B, 1)).astype(np.float32)
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((10,), dtype="int32")] + _VARIANTS[name](keras.layers))
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def grads(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, m(x, training=True))
        return [loss, m(x, training=False)] + [
            tf.convert_to_tensor(g) for g in tape.gradient(loss, m.trainable_variables)]

    want = [t.numpy() for t in grads(x, y)]
    got = _ours(tf, grads, x, y)
    for a, w in zip(got, want):
        assert np.abs(a - w).max() <= 2e-5 * (np.abs(w).max() + 1e-30), (np.abs(a - w).max(),
                                                                           np.abs(w).max())
    assert any(plans), plans
