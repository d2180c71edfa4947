"""The pool_relu_grad pass: MaxPoolGrad + the ReluGrad reading it (a Conv-Relu-MaxPool block's
gradient) as one node and one pass (kernels/cpu/pooling_ops.max_pool_grad_relu): the two
kernels' bits, stock's values, and the two kernels in turn where the fused one declines."""
import numpy as np
import pytest

from tests.test_passes import _run


def _grad_fn(tf, pool, stride, pad):
    """The gradients of a bias + Relu + MaxPool block (BiasAddGrad reads the ReluGrad)."""
    def f(x):
        b = tf.zeros(x.shape[-1:], x.dtype) + tf.constant(0.25, x.dtype)
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf.nn.relu(tf.nn.bias_add(x, b))
            z = tf.nn.max_pool2d(y, pool, stride, pad)
            loss = tf.reduce_sum(z * z * 0.5 + z)
        return tape.gradient(loss, [x, b])
    return f


def _ours(tf, f, x, disable=""):
    return _run(tf, f, x, disable=disable)


@pytest.mark.parametrize("shape,pool,stride,pad,dtype", [
    ((4, 26, 26, 32), 2, 2, "VALID", np.float32),
    ((3, 9, 7, 5), 2, 2, "VALID", np.float64),      # odd sides: pixels beyond the last window
    ((2, 8, 8, 3), 3, 2, "SAME", np.float32),       # overlapping windows: two kernels in turn
])
def test_fused_gradient_is_the_two_kernels_bits(tf, monkeypatch, shape, pool, stride, pad,
                                                dtype):
    from kernels.cpu import fused_kernels, pooling_ops
    calls = []
    real = pooling_ops.max_pool_grad_relu
    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    rng = np.random.default_rng(0)
    xv = rng.integers(-3, 4, shape).astype(dtype)          # ties and zeros in windows
    # (no NaN: a window holding one gives its gradient to the NaN in our MaxPoolGrad, fused or
    # not, and to the largest number in stock's graph-mode oneDNN pool: an older difference)
    xv.reshape(-1)[:2] = [np.inf, -np.inf]
    x = tf.constant(xv)
    f = _grad_fn(tf, pool, stride, pad)
    ours, db = _ours(tf, f, x)
    assert calls == [pool == 2]
    plain, db_plain = _ours(tf, f, x, disable="pool_relu_grad")
    np.testing.assert_array_equal(ours, plain)
    # the bias gradient: float64 sums as BiasAddGrad's kernel, in another order (per window row)
    np.testing.assert_allclose(db, db_plain, rtol=1e-12 if dtype == np.float64 else 1e-6)
    ref, db_ref = [np.asarray(t) for t in tf.function(f)(x)]
    np.testing.assert_array_equal(ours, ref)
    assert np.array_equal(np.signbit(ours), np.signbit(ref))
    np.testing.assert_allclose(db, db_ref, rtol=1e-5)


def test_declining_while_compiling_runs_the_two_kernels(tf, monkeypatch):
    from kernels.cpu import fused_kernels
    from kernels.cpu.deferred import Deferred

    def compiling(*a, **k):
        raise Deferred("compiling")

    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu", compiling)
    x = tf.constant(np.random.default_rng(1).standard_normal((2, 6, 6, 4)).astype(np.float32))
    f = _grad_fn(tf, 2, 2, "VALID")
    for o, r in zip(_ours(tf, f, x), tf.function(f)(x)):
        np.testing.assert_allclose(o, np.asarray(r), rtol=1e-6)


def test_unknown_batch_inside_the_function(tf, monkeypatch):
    """A Keras fit step's batch comes from IteratorGetNext inside the function, so none of its
    shapes is fully defined (in the generic program, which runs past the specialisations'
    limit): the fused node still runs, its outputs sized per call."""
    from tf_backend import functions
    monkeypatch.setattr(functions, "MAX_SPECIALIZED", 0)
    from kernels.cpu import fused_kernels, pooling_ops
    calls = []
    real = pooling_ops.max_pool_grad_relu
    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    xv = np.random.default_rng(3).integers(-3, 4, (8, 12, 12, 16)).astype(np.float32)
    f = _grad_fn(tf, 2, 2, "VALID")

    def step(it):
        return f(next(it))

    def data():
        return iter(tf.data.Dataset.from_tensor_slices(xv).batch(5).repeat())
    ours, db = _ours(tf, step, data())
    assert calls == [True] and ours.shape == (5, 12, 12, 16)
    plain, db_plain = _ours(tf, step, data(), disable="pool_relu_grad")
    ref, db_ref = [np.asarray(t) for t in tf.function(step)(data())]
    np.testing.assert_array_equal(ours, plain)
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_allclose(db, db_ref, rtol=1e-5)
