"""Kernel choice by measurement (tf_backend/autotune.py): measured in place over a program's
first runs, recorded per (op, attrs, shapes, dtypes, CPU model), reused from the file by a later
process, forced either way within the numerics contract."""
import json
import subprocess
import sys

import numpy as np

import tf_backend
from shape_fns.host import cpu_key
from tf_backend import autotune, functions, numerics

SCRIPT = """
import json, numpy as np, tensorflow as tf, tf_backend
x = tf.constant(np.random.default_rng(0).standard_normal((8, 12, 12, 16)).astype(np.float32))
w = tf.constant(np.random.default_rng(1).standard_normal((3, 3, 16, 32)).astype(np.float32))

@tf.function
def f(x, w):
    with tf.GradientTape() as t:
        t.watch(w)
        y = tf.nn.conv2d(x, w, 1, "SAME")
        loss = tf.reduce_sum(y * y)
    return t.gradient(loss, w)

ref = f(x, w).numpy()
tf_backend.enable()
outs = [f(x, w).numpy() for _ in range(10)]
print("RESULT " + json.dumps({"ref": ref.tolist(), "outs": [o.tolist() for o in outs],
                             "autotune": tf_backend.stats().get("autotune", {})}))
"""


def _run(tmp_path, mode):
    env = {"TF_BACKEND_AUTOTUNE": mode, "TF_BACKEND_CACHE_DIR": str(tmp_path),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    import os
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])


def test_measured_then_reused_from_the_file_and_keyed_by_cpu(tmp_path):
    first = _run(tmp_path, "cache")
    table = json.loads((tmp_path / "autotune.json").read_text())
    assert table and all(cpu_key() in k for k in table)
    assert "Conv2DBackpropFilter" in first["autotune"], first["autotune"]
    ref = np.float32(first["ref"])
    for o in first["outs"]:   # sums that cancel: judged against the largest value
        np.testing.assert_allclose(np.float32(o), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    mtime = (tmp_path / "autotune.json").stat().st_mtime_ns
    second = _run(tmp_path, "cache")            # a restart: the same choices, nothing measured
    assert (tmp_path / "autotune.json").stat().st_mtime_ns == mtime
    assert {op: (a["stock"], a["ours"]) for op, a in second["autotune"].items()} == \
        {op: (a["stock"], a["ours"]) for op, a in first["autotune"].items()}


def test_forced_choices_each_way_meet_the_contract(tmp_path, tf, monkeypatch):
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TF_BACKEND_AUTOTUNE", "cache")
    x = tf.constant(np.random.default_rng(0).standard_normal((4, 10, 10, 8)).astype(np.float32))
    w = tf.constant(np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32))

    @tf.function
    def f(x, w):
        return tf.nn.conv2d(x, w, 1, "VALID")

    ref = f(x, w).numpy()
    for choice in ("stock", "ours"):
        functions.clear_cache()
        autotune.clear()
        key = autotune.key(_conv_node(), [x.numpy(), w.numpy()])
        (tmp_path / "autotune.json").write_text(json.dumps(
            {key: {"choice": choice, "ours_ms": 1.0, "stock_ms": 1.0}}))
        with tf_backend.enabled():
            tf_backend.reset_stats()
            got = f(x, w).numpy()
            conv = tf_backend.stats()["ops"]["Conv2D"]
        assert numerics.compare(got, ref, "reduction", 72) is None
        assert (conv["reasons"].get("autotune", 0) > 0) == (choice == "stock"), conv
    autotune.clear()


def _conv_node():
    """A stand-in carrying what autotune.key reads of the program's Conv2D node."""
    import types
    return types.SimpleNamespace(op="Conv2D", attrs={
        "T": np.dtype(np.float32), "strides": [1, 1, 1, 1], "padding": "VALID",
        "explicit_paddings": [], "data_format": "NHWC", "dilations": [1, 1, 1, 1],
        "use_cudnn_on_gpu": True})


def test_epilogue_node_chooses_its_producer_each_way(tmp_path, tf, monkeypatch):
    """A convolution fused with its bias and activation (passes/epilogue.py) is a candidate
    too: TensorFlow's side is TensorFlow's convolution followed by our epilogue. Measured,
    recorded under the fused ops, and forced each way within the contract."""
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TF_BACKEND_AUTOTUNE", "cache")
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((4, 10, 10, 8)).astype(np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 8, 16)).astype(np.float32))
    b = tf.constant(rng.standard_normal(16).astype(np.float32))

    @tf.function
    def f(x, w, b):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))

    ref = f(x, w, b).numpy()
    functions.clear_cache()
    autotune.clear()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        outs = [f(x, w, b).numpy() for _ in range(2 * (autotune.RUNS + 1) + 1)]
        tuned = tf_backend.stats().get("autotune", {})
    assert "Conv2D" in tuned, tuned
    for o in outs:
        assert numerics.compare(o, ref, "reduction", 72) is None
    table = json.loads((tmp_path / "autotune.json").read_text())
    (key,) = [k for k in table if json.loads(k)[0] == ["Conv2D", "AddV2", "Relu"]]
    for choice in ("stock", "ours"):
        functions.clear_cache()
        autotune.clear()
        (tmp_path / "autotune.json").write_text(json.dumps(
            {key: {"choice": choice, "ours_ms": 1.0, "stock_ms": 1.0}}))
        with tf_backend.enabled():
            tf_backend.reset_stats()
            got = f(x, w, b).numpy()
            tuned = tf_backend.stats()["autotune"]["Conv2D"]
        assert numerics.compare(got, ref, "reduction", 72) is None
        assert tuned["last"].startswith({"stock": "stock kernel", "ours": "our kernel"}[choice]), \
            tuned
    autotune.clear()
