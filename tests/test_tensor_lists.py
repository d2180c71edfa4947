"""TensorLists on our runtime (runtime/lists.py, passes/tensor_lists.py): TensorArrays and
while_v2's gradient accumulators inside programs, against stock; webs TensorFlow must see stay
on TensorFlow whole; list values are immutable to their readers."""
import numpy as np
import pytest

import tf_backend
from shape_fns.errors import InvalidArgumentError
from tf_backend import functions
from tf_backend.runtime import lists

LIST_OPS = ("TensorListPushBack", "TensorListPopBack", "TensorListSetItem",
            "TensorListGetItem", "TensorListReserve", "TensorListStack", "TensorListFromTensor")


@pytest.fixture(autouse=True)
def _interpreted_loops(monkeypatch):
    """While loops run interpreted here, their list ops on runtime/lists.py (this file's
    subject); a loop that compiles to one numba function keeps its lists as buffers of its own
    (tests/test_compiled_loops.py, tests/test_loop_split.py), and compiling Keras' LSTM and GRU
    loops again for these shapes was most of this file's time on a cold cache (46-90 s)."""
    from tf_backend import executor
    monkeypatch.setattr(executor, "LOOPS", False)


def _both(tf, fn, *args):
    stock = [np.asarray(t) for t in tf.nest.flatten(fn(*args))]
    functions.clear_cache()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        ours = [np.asarray(t) for t in tf.nest.flatten(fn(*args))]
        stats = tf_backend.stats()["ops"]
    return ours, stock, stats


def _list_fallbacks(stats):
    return {op: o["fallback"] for op, o in stats.items()
            if op.startswith("TensorList") and o["fallback"]}


def test_tensor_array_loop_runs_on_our_runtime(tf):
    @tf.function
    def f(x):
        ta_in = tf.TensorArray(tf.float32, size=x.shape[0]).unstack(x)
        ta = tf.TensorArray(tf.float32, size=x.shape[0])

        def body(i, acc, ta):
            v = ta_in.read(i) * 2.0 + acc
            return i + 1, v, ta.write(i, tf.tanh(v))
        _, acc, ta = tf.while_loop(lambda i, *_: i < x.shape[0], body,
                                   (0, tf.zeros(x.shape[1:]), ta))
        return ta.stack(), acc, ta.size()

    x = tf.constant(np.random.default_rng(0).standard_normal((7, 3, 4)).astype(np.float32))
    ours, stock, stats = _both(tf, f, x)
    for o, s in zip(ours, stock):
        np.testing.assert_allclose(o, s, rtol=1e-6, atol=1e-6)
    assert not _list_fallbacks(stats), stats
    assert stats["TensorListSetItem"]["backend"] == 7 and stats["TensorListGetItem"]["backend"] == 7


def test_while_gradient_accumulators_run_on_our_runtime(tf):
    w = tf.Variable(np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32) * 0.5)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            h = x
            for_loop = tf.while_loop(lambda i, h: i < 6,
                                     lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w))), (0, h))
            loss = tf.reduce_sum(for_loop[1] ** 2)
        return loss, tape.gradient(loss, w)

    x = tf.constant(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    ours, stock, stats = _both(tf, step, x)
    for o, s in zip(ours, stock):
        np.testing.assert_allclose(o, s, rtol=1e-5, atol=1e-6)
    assert stats["TensorListPushBack"]["backend"] >= 6 and not _list_fallbacks(stats), stats


def test_keras_lstm_gru_training_step_matches_stock(tf):
    import keras
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, (8, 5)).astype(np.int32)
    y = rng.integers(0, 2, (8, 1)).astype(np.float32)
    losses = {}
    for side in ("stock", "ours"):
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(50, 8),
                              keras.layers.LSTM(8, return_sequences=True), keras.layers.GRU(4),
                              keras.layers.Dense(1)])
        m.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
        with tf_backend.enabled() if side == "ours" else _nothing():
            tf_backend.reset_stats()
            h = m.fit(x, y, batch_size=4, epochs=2, verbose=0)
            stats = tf_backend.stats()["ops"]
        losses[side] = h.history["loss"]
    np.testing.assert_allclose(losses["ours"], losses["stock"], rtol=1e-5)
    assert not _list_fallbacks(stats) and stats["TensorListPopBack"]["backend"] > 0, stats


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_web_tensorflow_must_see_stays_on_tensorflow(tf):
    """TensorArray.concat is TensorListConcatV2, which we do not run: every op of that list
    runs on TensorFlow, and the result is stock's."""
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3, infer_shape=False)
        for i in range(3):
            ta = ta.write(i, x[: i + 1])
        return ta.concat()

    x = tf.constant(np.arange(4, dtype=np.float32))
    ours, stock, stats = _both(tf, f, x)
    np.testing.assert_array_equal(ours[0], stock[0])
    assert stats["TensorListSetItem"]["fallback"] == 3 and not stats["TensorListSetItem"]["backend"]


def test_reading_past_the_end_raises_stocks_error_class(tf):
    @tf.function
    def f(i):
        ta = tf.TensorArray(tf.float32, size=2).write(0, 1.0).write(1, 2.0)
        return ta.read(i)

    with pytest.raises(tf.errors.InvalidArgumentError):
        f(tf.constant(5))
    functions.clear_cache()
    with tf_backend.enabled():
        with pytest.raises(tf.errors.InvalidArgumentError, match="element 5"):
            f(tf.constant(5))
        assert float(f(tf.constant(1))) == 2.0


def test_list_values_are_immutable_to_their_readers():
    dt = np.dtype(np.float32)
    base, = lists.empty_list([np.array(-1, np.int32), np.array(-1, np.int32)],
                             {"element_dtype": dt})
    a, = lists.push_back([base, np.float32(1)], {})
    b, = lists.push_back([a, np.float32(2)], {})
    c, = lists.push_back([a, np.float32(3)], {})       # a branch from `a`: b keeps its item
    assert [float(v) for v in b.items()] == [1, 2] and [float(v) for v in c.items()] == [1, 3]
    popped, item = lists.pop_back([b, np.array([], np.int32)], {})
    assert float(item) == 2 and popped.n == 1 and b.n == 2
    d, = lists.set_item([b, np.int32(0), np.float32(9)], {})
    assert float(b.items()[0]) == 1 and float(d.items()[0]) == 9
    assert not item.flags.writeable
    r, = lists.reserve([np.array([2], np.int32), np.int32(3)], {"element_dtype": dt})
    z, = lists.get_item([r, np.int32(1), np.array([2], np.int32)], {})
    assert z.shape == (2,) and not z.any()
    with pytest.raises(InvalidArgumentError, match="empty list"):
        lists.pop_back([base, np.array([], np.int32)], {})
    with pytest.raises(InvalidArgumentError, match="data types"):
        lists.push_back([base, np.int32(1)], {})
    s, = lists.add([b, d], {})
    assert [float(v) for v in s.items()] == [10, 4]
