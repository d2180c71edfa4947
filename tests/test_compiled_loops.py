"""Compiled loops (passes/compile_loops.py, kernels/cpu/loops.py): a While whose body inlines
runs as one numba function; results against stock and against the interpreter (the same program
with executor.LOOPS off), the ledger's record, errors, and loops it declines."""
import numpy as np
import pytest

import tf_backend
from tf_backend import executor, functions
from tf_backend.ab.bench import _training_step


@pytest.fixture
def keras(tf):
    import keras
    return keras


def _run(tf, fn, *args, loops=True):
    functions.clear_cache()
    old = executor.LOOPS
    executor.LOOPS = loops
    try:
        with tf_backend.enabled():
            tf_backend.reset_stats()
            out = [np.asarray(t) for t in tf.nest.flatten(fn(*args))]
            stats = tf_backend.stats()
    finally:
        executor.LOOPS = old
    return out, stats


def _close(a, b, tol=1e-5):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _compiled(stats):
    return {k: v["compiled"] for k, v in stats.get("loops", {}).items()}


def _classifier(keras, seq=12):
    return keras.Sequential([keras.Input((seq,), dtype="int32"), keras.layers.Embedding(50, 8),
                             keras.layers.LSTM(16, return_sequences=True),
                             keras.layers.GRU(8), keras.layers.Dense(1)])


def test_lstm_gru_forward_compiled_matches_stock(tf, keras):
    model = _classifier(keras)
    x = tf.constant(np.random.default_rng(0).integers(0, 50, (8, 12)).astype(np.int32))
    f = tf.function(lambda x: model(x, training=False))
    stock = [f(x).numpy()]
    ours, stats = _run(tf, f, x)
    interp, _ = _run(tf, f, x, loops=False)
    _close(ours, stock)
    _close(ours, interp, 1e-6)
    got = _compiled(stats)
    assert len(got) == 2 and all(got.values()), stats.get("loops")
    # every iteration's ops are counted as ours (12 steps of each layer)
    assert stats["ops"]["MatMul"]["backend"] >= 24 and not stats["ops"]["MatMul"]["fallback"]


def test_lstm_gru_training_steps_compiled_match_stock(tf, keras):
    rng = np.random.default_rng(1)
    x = tf.constant(rng.integers(0, 50, (8, 12)).astype(np.int32))
    y = tf.constant(rng.integers(0, 2, (8, 1)).astype(np.float32))

    def train(enable):
        keras.utils.set_random_seed(3)
        model = _classifier(keras)
        step = tf.function(_training_step(tf, model, keras.optimizers.Adam(1e-2),
                                          keras.losses.BinaryCrossentropy(from_logits=True)))

        losses = []
        functions.clear_cache()
        with tf_backend.enabled() if enable else _null():
            tf_backend.reset_stats()
            for _ in range(3):
                losses.append(float(step(x, y)))
            stats = tf_backend.stats()
        return losses, [v.numpy() for v in model.trainable_variables], stats

    s_loss, s_w, _ = train(False)
    o_loss, o_w, stats = train(True)
    np.testing.assert_allclose(o_loss, s_loss, rtol=1e-5)
    _close(o_w, s_w, 1e-4)
    got = _compiled(stats)
    # 2 forward, 2 gradient loops (the ledger keeps earlier tests' loops too)
    assert sum("while_grad" in k for k in got) >= 2 and all(got.values()), stats.get("loops")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_data_dependent_trip_count_and_list_growth(tf):
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)

        def body(i, s, ta):
            s = tf.tanh(s * 0.5 + tf.cast(i, tf.float32) * 0.01)
            return i + 1, s, ta.write(i, s)

        _, s, ta = tf.while_loop(lambda i, s, ta: tf.logical_and(i < 100, tf.reduce_sum(x) > 0),
                                 body, (0, x, ta))
        return s, ta.stack()

    x = tf.constant(np.linspace(-1, 1, 12).astype(np.float32).reshape(3, 4) + 0.1)
    stock = [t.numpy() for t in f(x)]
    ours, stats = _run(tf, f, x)
    _close(ours, stock)
    assert ours[1].shape == (100, 3, 4)


def test_error_inside_compiled_loop_raises_stocks_error_and_restores_fp_flags(tf):
    @tf.function
    def f(x, n):
        ta = tf.TensorArray(tf.float32, size=3).unstack(x)

        def body(i, s):
            return i + 1, s + ta.read(i)

        return tf.while_loop(lambda i, s: i < n, body, (0, tf.zeros([2])))[1]

    x = tf.ones([3, 2])
    with pytest.raises(Exception) as stock:
        f(x, tf.constant(5))
    functions.clear_cache()
    with tf_backend.enabled():
        np.testing.assert_allclose(f(x, tf.constant(3)).numpy(), [3.0, 3.0])
        with pytest.raises(type(stock.value)):
            f(x, tf.constant(5))
    # FTZ/DAZ set for the loop's duration is off again: numpy keeps a subnormal
    assert np.float32(1e-39) * np.float32(1.0) != 0


def test_loop_without_inline_form_runs_interpreted_with_a_reason(tf):
    @tf.function
    def f(x):
        return tf.while_loop(lambda i, s: i < 4,
                             lambda i, s: (i + 1, tf.sort(s * 1.5)), (0, x))[1]

    x = tf.constant([3.0, 1.0, 2.0])
    stock = [f(x).numpy()]
    ours, stats = _run(tf, f, x)
    _close(ours, stock)
    loops = stats.get("loops", {})
    assert loops and not any(v["compiled"] for v in loops.values())
    assert any("TopKV2" in (v["reason"] or "") or "no inline form" in (v["reason"] or "")
               or "stock" in (v["reason"] or "") for v in loops.values()), loops


def test_background_compile_interprets_until_ready(tf, monkeypatch):
    monkeypatch.setattr(executor, "LOOP_COMPILE", "async")

    @tf.function
    def f(x):
        return tf.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, tf.tanh(s) * 1.25),
                             (0, x))[1]

    x = tf.constant([0.5, -0.25, 2.0])
    stock = f(x).numpy()
    functions.clear_cache()
    import threading
    with tf_backend.enabled():
        tf_backend.reset_stats()
        first = f(x).numpy()          # interpreted while numba compiles in the background
        assert executor.compiles_pending() <= 1   # 0: loaded from the disk cache already
        waited = tf_backend.wait_for_compiles(120)
        assert executor.compiles_pending() == 0 and waited < 120
        assert not any(t.name == "tf_backend-loop-compile" for t in threading.enumerate())
        later = f(x).numpy()          # the compiled function
        loops = tf_backend.stats()["loops"]
    np.testing.assert_allclose(first, stock, rtol=1e-6)
    np.testing.assert_allclose(later, stock, rtol=1e-6)
    assert list(loops.values())[0]["compiled"], loops


def test_a_loop_on_numbas_disk_cache_runs_compiled_from_its_first_call(tf, monkeypatch):
    """In "async" mode a loop whose machine code an earlier process (or run) left on disk is
    loaded at its first call, not interpreted while a background thread loads it."""
    @tf.function
    def f(x):
        return tf.while_loop(lambda i, s: i < 7, lambda i, s: (i + 1, tf.tanh(s) * 1.5 - 0.1),
                             (0, x))[1]

    x = tf.constant([0.5, -0.25, 2.0, 0.0])
    stock = f(x).numpy()
    _run(tf, f, x)   # sync (conftest): compiles it, numba caches it on disk
    monkeypatch.setattr(executor, "LOOP_COMPILE", "async")
    functions.clear_cache()
    with tf_backend.enabled():
        waits = executor.compile_waits()
        first = f(x).numpy()
        assert executor.compile_waits() == waits   # nothing interpreted meanwhile
        assert executor.compiles_pending() == 0
    np.testing.assert_allclose(first, stock, rtol=1e-6)


def test_small_node_region_compiles_and_matches_stock(tf):
    """A run of small nodes (compile_regions) is one compiled call: stock's result, and the
    ledger names the region."""
    rng = np.random.default_rng(7)
    w = tf.constant(rng.standard_normal((4, 4)).astype(np.float32) * 0.5)

    @tf.function
    def f(x):
        for _ in range(5):
            x = tf.transpose(tf.nn.tanh(tf.matmul(x, w) + 0.25))
        return tf.reduce_sum(x, axis=0), x[1:3]

    x = tf.constant(rng.standard_normal((4, 4)).astype(np.float32))
    stock = [t.numpy() for t in f(x)]
    ours, stats = _run(tf, f, x)
    _close(ours, stock, 1e-6)
    regions = {k: v for k, v in stats.get("loops", {}).items() if k.startswith("region[")}
    assert regions and all(v["compiled"] for v in regions.values()), stats.get("loops")
    assert stats["ops"]["MatMul"]["backend"] == 5


def _small_cnn_fn(tf, dtype, filt_value=None):
    rng = np.random.default_rng(3)

    def c(*shape):
        return tf.constant((rng.standard_normal(shape) * 0.3).astype(dtype))

    f1, f2, f3, w = c(3, 3, 3, 4), c(2, 2, 4, 6), c(3, 3, 6, 5), c(20, 7)
    if filt_value is not None:
        f1 = tf.tensor_scatter_nd_update(f1, [[0, 0, 1, 2]], tf.constant([filt_value], dtype))

    @tf.function
    def f(x):
        y = tf.nn.relu(tf.nn.conv2d(x, f1, 1, "SAME") + 0.1)
        y = tf.nn.max_pool2d(y, 3, 2, "SAME")
        y = tf.nn.conv2d(y, f2, 2, "VALID")
        y = tf.nn.conv2d(y, f3, 1, "SAME", dilations=2)
        y = tf.nn.avg_pool2d(y, 2, 1, "SAME")
        return tf.matmul(tf.reshape(y, (1, -1)), w) + 0.5

    return f, tf.constant(rng.standard_normal((1, 9, 9, 3)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_region_with_convolutions_and_pools_matches_stock(tf, dtype):
    """Conv2D (SAME/VALID, strides, dilations, with its epilogue), MaxPool and AvgPool inline in
    a compiled region (kernels/cpu/loops.py: our kernels' own im2col, product and pool loops):
    one region for the whole small CNN, stock's result."""
    f, x = _small_cnn_fn(tf, dtype)
    stock = f(x).numpy()
    ours, stats = _run(tf, f, x)
    _close(ours, [stock], 1e-5 if dtype == np.float32 else 1e-12)
    regions = {k: v for k, v in stats.get("loops", {}).items() if k.startswith("region[")}
    assert len(regions) == 1 and all(v["compiled"] for v in regions.values()), stats.get("loops")
    assert stats["ops"]["Conv2D"]["backend"] == 3 and stats["ops"]["AvgPool"]["backend"] == 1


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_region_convolution_with_a_nonfinite_filter_matches_stock(tf, bad):
    """A non-finite filter with padding: the region raises on its first output pixel and the
    nodes run one by one (our kernel leaves it to TensorFlow's, which skips padded taps)."""
    f, x = _small_cnn_fn(tf, np.float32, bad)
    stock = f(x).numpy()
    ours, _ = _run(tf, f, x)
    np.testing.assert_allclose(ours[0], stock, rtol=1e-5, atol=1e-5, equal_nan=True)


_VARIANTS = {
    "masked_lstm": lambda L: [L.Embedding(50, 8, mask_zero=True), L.LSTM(6), L.Dense(1)],
    "bidirectional_lstm": lambda L: [L.Embedding(50, 8), L.Bidirectional(L.LSTM(6)),
                                     L.Dense(1)],
    "simple_rnn": lambda L: [L.Embedding(50, 8), L.SimpleRNN(6, return_sequences=True),
                             L.SimpleRNN(4), L.Dense(1)],
    "gru_reset_before": lambda L: [L.Embedding(50, 8), L.GRU(6, reset_after=False),
                                   L.Dense(1)],
    "lstm_go_backwards": lambda L: [L.Embedding(50, 8),
                                    L.LSTM(6, go_backwards=True, return_sequences=True),
                                    L.GlobalAveragePooling1D(), L.Dense(1)],
}


@pytest.mark.parametrize("name", [   # bidirectional's loops by rows: test_loop_split.py
    "masked_lstm", pytest.param("bidirectional_lstm", marks=pytest.mark.slow),
    pytest.param("simple_rnn", marks=pytest.mark.slow),
    pytest.param("gru_reset_before", marks=pytest.mark.slow),
    pytest.param("lstm_go_backwards", marks=pytest.mark.slow)])
def test_recurrent_layer_variants_train_like_stock_with_loops_compiled(tf, keras, name):
    """Masking (SelectV2 in the step), both directions, SimpleRNN, GRU v1, reversed input:
    three Adam steps and a prediction equal stock's, every loop compiled."""
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, (8, 10)).astype(np.int32)
    x[:, 7:] = 0
    y = rng.integers(0, 2, (8, 1)).astype(np.float32)

    def train(enable):
        keras.utils.set_random_seed(1)
        m = keras.Sequential([keras.Input((10,), dtype="int32")] + _VARIANTS[name](keras.layers))
        step = tf.function(_training_step(tf, m, keras.optimizers.Adam(1e-2),
                                          keras.losses.BinaryCrossentropy(from_logits=True)))
        pred = tf.function(lambda a: m(a, training=False))
        functions.clear_cache()
        with tf_backend.enabled() if enable else _null():
            tf_backend.reset_stats()
            losses = [float(step(x, y)) for _ in range(3)]
            p = pred(x).numpy()
            stats = tf_backend.stats()
        return losses, p, [v.numpy() for v in m.trainable_variables], stats

    s_loss, s_p, s_w, _ = train(False)
    o_loss, o_p, o_w, stats = train(True)
    np.testing.assert_allclose(o_loss, s_loss, rtol=1e-5)
    _close([o_p] + o_w, [s_p] + s_w, 1e-5)
    loops = {k: v for k, v in stats["loops"].items() if not k.startswith("region[")}
    assert loops and all(v["compiled"] for v in loops.values()), loops


def test_cache_probe_holds_numbas_compiler_lock():
    """loops.cached() loads from numba's cache in the background compile thread; loading
    refreshes numba's target context (registry generators shared by all threads), so it must
    hold numba's compiler lock as numba's own compile() does: unlocked, it raced the main
    thread's first call of a fused loop ("ValueError: generator already executing")."""
    from numba.core.compiler_lock import global_compiler_lock
    from kernels.cpu import loops as cpu_loops

    seen = []

    class Cache:
        def load_overload(self, sig, ctx):
            seen.append(global_compiler_lock.is_locked())
            return None

    class Fn:
        _cache, targetctx = Cache(), None

    assert cpu_loops.cached(Fn(), ()) is False
    assert seen == [True]


def test_index_maps_made_of_runs_copy_runs():
    """A data-movement step whose index map is runs of consecutive elements (Split along the
    last axis: equally spaced; ConcatV2 along it: from each part in turn) copies runs
    (take_rows, take_runs); anything else gathers element by element; all three agree."""
    from kernels.cpu import loop_helpers, loops as cpu_loops
    src = np.arange(4 * 256, dtype=np.float32) * 0.5
    split = (np.arange(4)[:, None] * 256 + 64 + np.arange(64)).reshape(-1)      # (4, 256)[:, 64:128]
    concat = np.concatenate([(p * 256 + r * 64 + np.arange(64)) for r in range(4)
                             for p in range(4)])                               # 4 parts (4, 64)
    odd = np.array([3, 1, 2, 0] * 4)
    starts, even, cols = cpu_loops._runs(split)
    assert even == (64, 256, 4, 64) and cols == 64
    starts, even, cols = cpu_loops._runs(concat)
    assert even is None and cols == 64 and list(starts[:5]) == [0, 256, 512, 768, 64]
    assert cpu_loops._runs(odd) is None
    assert cpu_loops._runs(np.arange(5) * 2) is None           # runs shorter than RUN_MIN
    for m in (split, concat):
        want = np.empty(m.size, np.float32)
        loop_helpers.take(src, m, want)
        got = np.empty(m.size, np.float32)
        starts, even, cols = cpu_loops._runs(m)
        if even is not None:
            loop_helpers.take_rows(src, *even, got)
        else:
            loop_helpers.take_runs(src, starts, cols, got)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(want, src[m])
