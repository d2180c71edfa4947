"""Kernels made for a program node's static specs (kernels.specializer), bound by generated
drivers in the registered kernel's place: the tiny float MatMul (matmul_ops._tiny_matmul)
against the generic kernel and stock, and what it hands back to the generic kernel."""
import numpy as np
import pytest

import kernels
import tf_backend
from kernels.cpu import jit, matmul_ops
from kernels.cpu.loop_helpers import mm32
from shape_fns.spec import Spec


def _specs(sa, sb, so, dt=np.float32):
    return [Spec(sa, dt), Spec(sb, dt)], [Spec(so, dt)]


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_tiny_matmul_matches_the_generic_kernel(ta, tb, dt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5) if ta else (5, 3)).astype(dt)
    b = rng.standard_normal((4, 3) if tb else (3, 4)).astype(dt)
    attrs = {"transpose_a": ta, "transpose_b": tb}
    ins, outs = _specs(a.shape, b.shape, (5, 4), dt)
    k = matmul_ops._tiny_matmul(attrs, ins, outs, matmul_ops.matmul)
    assert k is not None
    b.flags.writeable = False   # a tensor's read-only view and a buffer of ours, as in programs
    ref = np.empty((5, 4), dt)
    matmul_ops.matmul([a, b], [ref], attrs)
    for _ in range(3):   # the first call through numba's dispatcher, then its entry point
        out = np.full((5, 4), np.nan, dt)
        k([a, b], [out], attrs)
        np.testing.assert_array_equal(out, ref)


def test_entry_point_is_the_dispatchers_compile():
    from numba.core import types as nt
    a = np.ones((2, 2), np.float32)
    mm32(a, a, np.empty_like(a), False, False)
    arr = nt.Array(nt.float32, 2, "C")
    sig = (arr.copy(readonly=True), arr.copy(readonly=True), arr, nt.boolean, nt.boolean)
    assert jit.entry_point(mm32, sig) is mm32.overloads[sig].entry_point
    # (the output typed read-only: a signature never compiled)
    assert jit.entry_point(mm32, sig[:2] + (sig[0],) + sig[3:]) is None


def test_unexpected_operands_go_to_the_generic_kernel(monkeypatch):
    attrs = {"transpose_a": False, "transpose_b": False}
    ins, outs = _specs((4, 4), (4, 4), (4, 4))
    calls = []

    def generic(i, o, at):
        calls.append(1)
        matmul_ops.matmul(i, o, at)
    k = matmul_ops._tiny_matmul(attrs, ins, outs, generic)
    rng = np.random.default_rng(1)
    big = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((4, 4)).astype(np.float32)
    for a in (big[:, ::2],                        # not contiguous
              big.reshape(8, 4)[:4].astype(np.float64)):   # another dtype
        out = np.empty((4, 4), np.float32)
        k([a, b], [out], attrs)
        np.testing.assert_allclose(out, np.asarray(a, np.float64) @ b, rtol=1e-6, atol=1e-6)
    assert len(calls) == 2


def test_not_specialized():
    f32 = np.float32
    mk = lambda sa, sb, so, dt=f32, **at: matmul_ops._tiny_matmul(
        {"transpose_a": False, "transpose_b": False, **at}, *_specs(sa, sb, so, dt),
        matmul_ops.matmul)
    assert mk((64, 64), (64, 64), (64, 64)) is None           # not tiny
    assert mk((4, 0), (0, 4), (4, 4)) is None                 # nothing to sum
    assert mk((4, 4), (4, 4), (4, 4), np.int32) is None       # integers: the generic loop
    kdef, _ = kernels.lookup("MatMul", "cpu", {"T": np.dtype(f32)})
    # a spec with an unknown dimension: the registered kernel
    assert kernels.specialized(kdef, {"transpose_a": False, "transpose_b": False},
                               [Spec((None, 4), f32), Spec((4, 4), f32)],
                               [Spec((None, 4), f32)]) is kdef.fn


def test_a_chain_of_tiny_products_in_a_driver(tf, monkeypatch):
    from tf_backend import executor, functions
    monkeypatch.setenv("TF_BACKEND_DISABLE_PASSES", "compile_regions")   # the driver runs them
    made = []
    real = kernels.SPECIALIZERS[("MatMul", "cpu")]
    monkeypatch.setitem(kernels.SPECIALIZERS, ("MatMul", "cpu"),
                        lambda *a: made.append(real(*a)) or made[-1])
    functions.clear_cache()
    w = tf.constant(np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32))

    @tf.function
    def f(x):
        for _ in range(6):
            x = tf.tanh(tf.transpose(tf.matmul(x, w)))
        return x
    x = tf.constant(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32))
    ref = f(x).numpy()
    assert executor.DRIVERS
    with tf_backend.enabled():
        outs = [f(x).numpy() for _ in range(4)]
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6)
    assert len(made) == 6 and all(k is not None for k in made)
    functions.clear_cache()
