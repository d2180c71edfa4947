"""Tape gradients through our kernels match stock, for every op-table case with grad=True."""
import numpy as np
import pytest

import tf_backend
from tests import harness
from tests.optable import all_cases

CASES = [c for c in all_cases() if c.grad]


def _params():
    for c in CASES:
        for dt in c.dtypes:
            if np.dtype(dt).kind != "f":
                continue
            marks = [pytest.mark.skip(reason=c.skip)] if c.skip else []
            yield pytest.param(c, np.dtype(dt), id=f"{c.name}-{dt}", marks=marks)


def _grads(tf, case, args, idx):
    tensors = harness.to_tf(args)
    watched = [tensors[i] for i in idx]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        outs = tf.nest.flatten(case.fn(*tensors))
        rng = np.random.default_rng(3)
        loss = 0
        for o in outs:
            if not o.dtype.is_floating:
                continue
            w = tf.constant(rng.random(tuple(o.shape)).astype(o.dtype.as_numpy_dtype) + 0.5)
            loss = loss + tf.reduce_sum(o * w)
    grads = tape.gradient(loss, watched)
    return [np.zeros(w.shape, w.dtype.as_numpy_dtype) if g is None else np.asarray(tf.convert_to_tensor(g))
            for g, w in zip(grads, watched)]


@pytest.mark.parametrize("case,dtype", list(_params()))
def test_gradient_matches_stock(case, dtype, tf):
    rng = np.random.default_rng(99)
    for i, args in enumerate(case.samples(dtype, rng)):
        idx = case.grad_args if case.grad_args is not None else [
            j for j, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        if not idx:
            continue
        tf_backend.disable()
        try:
            ref = _grads(tf, case, args, idx)
        except tf.errors.OpError as e:
            # stock refuses this sample on this CPU (an Eigen kernel where oneDNN is off:
            # dilated backprops, NCHW): ours refuses it with the same class
            tf_backend.enable()
            try:
                with pytest.raises(type(e)):
                    _grads(tf, case, args, idx)
            finally:
                tf_backend.disable()
            continue
        tf_backend.enable()
        tf_backend.reset_stats()
        try:
            ours = _grads(tf, case, args, idx)
            stats = tf_backend.stats()
        finally:
            tf_backend.disable()
        n = max([a.size for a in args if isinstance(a, np.ndarray)] + [1])
        harness.assert_matches(ours, ref, "reduction", n, case.rtol, case.atol,
                               what=f"grad {case.name} sample {i}")
        for op in case.grad_ops:
            assert harness.backend_calls(stats, op) > 0, f"gradient op {op} did not run on our kernel"
