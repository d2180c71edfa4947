"""Whole-function choice by measurement (functions.CHOICE): once settled, a compiled function's
calls alternate between our executor and TensorFlow's run of it; the faster stays, in the
ledger with both medians. The suite runs with the choice off (conftest.py); these tests turn
it on."""
import numpy as np
import pytest
import tensorflow as tf

import tf_backend
from tf_backend import functions, ledger


@pytest.fixture
def measuring(monkeypatch):
    monkeypatch.setattr(functions, "CHOICE", "measure")
    monkeypatch.setattr(functions, "CHOICE_RUNS", 3)
    tf_backend.enable()
    yield
    tf_backend.disable()


def _calls(f, x, n):
    return [f(x).numpy() for _ in range(n)]


def _choice(name_part):
    fs = tf_backend.stats()["functions"]
    got = [f for k, f in fs.items() if name_part in k and f.get("choice")]
    return got[-1] if got else None


@pytest.mark.parametrize("forced", ["tensorflow", "ours"])
def test_the_faster_side_runs_the_function_and_results_stay_stock(measuring, monkeypatch, forced):
    tf_backend.disable()
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))

    @tf.function
    def choice_probe(x):
        return tf.nn.relu(tf.matmul(x, w) - 3.0)

    x = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    ref = choice_probe(x).numpy()
    tf_backend.enable()
    # the measured medians decide: make the other side look slower
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9 if forced == "tensorflow" else 1e-9)
    outs = _calls(choice_probe, x, 2 * (functions.CHOICE_RUNS + 1) + 4)
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    got = _choice("choice_probe")
    assert got is not None and got["choice"]["runs"] == forced
    assert got["choice"]["ours_ms"] > 0 and got["choice"]["tensorflow_ms"] > 0
    tf_backend.reset_stats()
    _calls(choice_probe, x, 3)
    f = [v for k, v in tf_backend.stats()["functions"].items() if "choice_probe" in k][-1]
    assert (f["fallback_calls"], f["calls"]) == ((3, 0) if forced == "tensorflow" else (0, 3))


def test_functions_with_kernel_state_stay_on_our_executor(measuring, monkeypatch):
    """A seeded stateful random op keeps its state in its kernel: alternating between ours and
    TensorFlow's function would repeat draws."""
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9)

    @tf.function
    def seeded(x):
        return x + tf.random.uniform([4], seed=1)

    x = tf.zeros([4])
    draws = _calls(seeded, x, 2 * (functions.CHOICE_RUNS + 1) + 4)
    assert len({d.tobytes() for d in draws}) == len(draws)
    assert _choice("seeded") is None
