"""Shadow mode catches a deliberately wrong kernel and points at the op and the user's line."""
import inspect
import json
import subprocess
import sys

import numpy as np
import pytest

import kernels
import tf_backend
from kernels import KernelDef
from tf_backend import functions


@pytest.fixture
def wrong_relu(tf):
    """Relu replaced by |x| (right for x >= 0, wrong for x < 0) for the duration of a test."""
    kernels.load("cpu")
    key = ("Relu", "cpu")
    good = kernels.KERNELS[key]

    def wrong(inputs, outputs, attrs):
        np.abs(inputs[0], out=outputs[0])

    kernels.KERNELS[key] = [KernelDef("Relu", "cpu", wrong, None, "T")]
    functions.clear_cache()
    try:
        yield
    finally:
        kernels.KERNELS[key] = good
        tf_backend.disable()
        functions.clear_cache()
        tf_backend.enable()      # refresh dispatch's caches with the good kernel
        tf_backend.disable()


def test_shadow_eager_catches_and_localises(tf, wrong_relu):
    x = tf.constant([-1.0, 2.0, -3.0])
    tf_backend.enable("shadow")
    tf_backend.reset_stats()
    y = tf.nn.relu(x * 1.0); line = inspect.currentframe().f_lineno  # noqa: E702
    z = tf.nn.relu(tf.constant([5.0]))   # no divergence for positives
    rep = tf_backend.stats()["shadow"]
    tf_backend.disable()
    np.testing.assert_array_equal(np.asarray(y), [0.0, 2.0, 0.0])   # TensorFlow's result
    np.testing.assert_array_equal(np.asarray(z), [5.0])
    assert rep["divergences"] == 1 and rep["checked"] >= 3
    d = rep["first"][0]
    assert d["op"] == "Relu" and d["inputs"] == "float32[3]"
    assert "test_shadow.py" in d["where"] and f"line {line}" in d["where"]
    assert d["max_abs"] == 3.0 and rep["worst"][0] == d


def test_shadow_programs_compare_node_by_node(tf, wrong_relu):
    @tf.function
    def f(x):
        h = tf.matmul(x, x) + 1.0
        return tf.nn.relu(h - 10.0) * 2.0

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    tf_backend.disable()
    ref = np.asarray(f(x))
    tf_backend.enable("shadow")
    tf_backend.reset_stats()
    got = np.asarray(f(x))
    rep = tf_backend.stats()["shadow"]
    tf_backend.disable()
    np.testing.assert_array_equal(got, ref)
    ops = [d["op"] for d in rep["first"]]
    assert ops == ["Relu"], rep
    assert "test_shadow.py" in rep["first"][0]["where"] and "in f" in rep["first"][0]["where"]


def test_shadow_clean_run_reports_no_divergence(tf):
    x = tf.constant(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    tf_backend.enable("shadow")
    tf_backend.reset_stats()
    np.asarray(tf.nn.softmax(tf.matmul(x, tf.transpose(x)) + 1.0))
    rep = tf_backend.stats()["shadow"]
    tf_backend.disable()
    assert rep["checked"] >= 4 and rep["divergences"] == 0


def test_tfb_ab_shadow(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "tf_backend", "ab", "--model", "small_mlp",
                        "--shadow", "--json", str(out), "-q"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "shadow:" in r.stdout and "0 diverged" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["shadow"]["checked"] > 0 and doc["shadow"]["divergences"] == 0


def test_trace_file_has_op_node_and_function_spans(tmp_path):
    path = tmp_path / "trace.json"
    code = """
import tensorflow as tf, numpy as np
x = tf.constant(np.ones((4, 4), np.float32))
y = tf.nn.relu(x + 1.0)                      # eager ops on our kernels
z = tf.math.special.bessel_i0e(x)           # an eager fallback
@tf.function
def f(a):
    return tf.matmul(a, a) * 2.0
f(x)
"""
    env = dict(__import__("os").environ, TF_BACKEND="1", TF_BACKEND_TRACE=str(path),
               TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(path.read_text())
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    eager = {e["name"]: e for e in ev if e["cat"] == "eager"}
    assert eager["Relu"]["args"]["path"] == "backend" and eager["Relu"]["args"]["shapes"] == "float32[4,4]"
    assert eager["BesselI0e"]["args"]["path"] == "fallback"
    fn = [e for e in ev if e["cat"] == "function"]
    nodes = [e for e in ev if e["cat"] == "node"]
    assert len(fn) == 1 and fn[0]["name"].startswith("__inference_f")
    assert any(n["args"]["op"].startswith("MatMul") for n in nodes)
    inner = [n for n in nodes if fn[0]["ts"] <= n["ts"] <= fn[0]["ts"] + fn[0]["dur"]]
    assert inner, "program node spans lie inside the function call span"
    assert all({"ts", "dur", "pid", "tid"} <= set(e) for e in ev)


def test_tracing_off_installs_plain_hooks(tf):
    from tf_backend import tf_adapter as tfa
    from tf_backend import trace
    assert not trace.ON
    tf_backend.enable()
    try:
        fast, slow = tfa.entry_points()
        assert fast.__code__.co_name == "fast_hook" and "tracer" not in fast.__code__.co_freevars
    finally:
        tf_backend.disable()
