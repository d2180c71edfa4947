"""The opt-in flag, modes, interception rules and gradients through the direct path."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import tf_backend
from tf_backend import tf_adapter as tfa

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _run_script(src, **env):
    e = dict(ENV)
    e.pop("TF_BACKEND", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(src)], env=e,
                          capture_output=True, text=True, timeout=300)


SCRIPT = """
    import sys
    import tensorflow as tf
    from tensorflow.python import pywrap_tfe
    x = tf.ones((3, 3))
    y = tf.nn.relu(x + x)
    print("patched", hasattr(pywrap_tfe.TFE_Py_Execute, "__wrapped__"),
          hasattr(pywrap_tfe.TFE_Py_FastPathExecute, "__wrapped__"))
    print("loaded", "tf_backend.dispatch" in sys.modules)
    print("value", float(tf.reduce_sum(y)))
"""


def test_flag_unset_patches_nothing():
    r = _run_script(SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "patched False False" in r.stdout and "loaded False" in r.stdout


def test_flag_on_enables_backend_in_unmodified_script(tmp_path):
    report = tmp_path / "ledger.json"
    r = _run_script(SCRIPT, TF_BACKEND="1", TF_BACKEND_REPORT=str(report))
    assert r.returncode == 0, r.stderr
    assert "patched True True" in r.stdout and "value 18.0" in r.stdout
    stats = json.loads(report.read_text())
    assert stats["ops"]["AddV2"]["backend"] == 1
    assert stats["ops"]["Relu"]["backend"] == 1


def test_flag_report_table_on_stderr():
    r = _run_script(SCRIPT, TF_BACKEND="on", TF_BACKEND_REPORT="-")
    assert r.returncode == 0, r.stderr
    assert "tf_backend ledger" in r.stderr and "AddV2" in r.stderr


def test_flag_unknown_value_is_a_clear_error():
    r = _run_script(SCRIPT, TF_BACKEND="fast-please")
    assert r.returncode != 0
    assert "TF_BACKEND='fast-please' is not a valid value" in r.stderr


def test_flag_off_values():
    for v in ("0", "off", ""):
        r = _run_script(SCRIPT, TF_BACKEND=v)
        assert "patched False False" in r.stdout, (v, r.stderr)


def test_enable_disable_idempotent_and_context_manager(tf):
    tf_backend.disable()
    orig = tfa.entry_points()
    assert tf_backend.enable() and tf_backend.enable()
    assert tf_backend.mode() == "on"
    with tf_backend.enabled("strict"):
        assert tf_backend.mode() == "strict"
    assert tf_backend.mode() == "on"
    tf_backend.disable()
    tf_backend.disable()
    assert tfa.entry_points() == orig and tf_backend.mode() == "off"
    with tf_backend.enabled():
        assert tf_backend.mode() == "on"
    assert tf_backend.mode() == "off"


def test_enable_disable_thread_safe(tf):
    x = tf.ones((4, 4))
    errors = []

    def worker(i):
        try:
            for _ in range(50):
                if i % 2:
                    tf_backend.enable()
                else:
                    tf_backend.disable()
                np.testing.assert_array_equal(np.asarray(x + x), 2 * np.ones((4, 4)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    tf_backend.disable()
    assert not errors, errors
    assert tfa.entry_points()[0].__name__ != "fast_hook"


def test_unverified_version_warns_and_stays_disabled(tf, monkeypatch):
    tf_backend.disable()
    monkeypatch.setattr(tfa, "tf_version", lambda: "2.99.0")
    monkeypatch.delenv("TF_BACKEND_FORCE", raising=False)
    with pytest.warns(RuntimeWarning, match="not a version the hooks were verified against"):
        assert tf_backend.enable() is False
    assert tf_backend.mode() == "off"
    assert tf_backend.enable(force=True)
    tf_backend.disable()


def test_strict_mode_raises_on_fallback_naming_op_and_reason(tf):
    x = tf.constant([1.0, 2.0, 3.0])
    with tf_backend.enabled("strict"):
        with pytest.raises(tf.errors.UnimplementedError, match=r"BesselI0e.*not_registered"):
            tf.math.special.bessel_i0e(x)
        # never-intercept ops (variables) are not "asked to run": no error
        v = tf.Variable([1.0, 2.0, 3.0])
        np.testing.assert_allclose(np.asarray(v + x), [2, 4, 6])
    h = tf.constant([1, 2], tf.uint8)
    with tf_backend.enabled("strict"):  # a dtype we decline
        with pytest.raises(tf.errors.UnimplementedError, match=r"AddV2.*dtype:uint8"):
            tf.add(h, h)


def test_ledger_counts_fallback_reasons(backend, tf):
    tf.math.special.bessel_i0e(tf.constant([1.0, 2.0]))
    h = tf.constant([1, 2], tf.uint8)
    tf.add(h, h)
    v = tf.Variable(1.0)
    v.assign_add(1.0)
    s = tf_backend.stats()["ops"]
    assert s["BesselI0e"]["reasons"] == {"not_registered": 1}
    assert s["AddV2"]["reasons"] == {"dtype:uint8": 1}
    assert s["AssignAddVariableOp"]["reasons"] == {"never_intercept": 1}
    tf_backend.reset_stats()
    assert tf_backend.stats()["ops"] == {}


def test_python_scalars_and_mixed_dtype_errors(backend, tf):
    x = tf.constant([1.0, -2.0])
    np.testing.assert_allclose(np.asarray(x + 1), [2.0, -1.0])
    np.testing.assert_allclose(np.asarray(x * 2.5), [2.5, -5.0])
    i = tf.constant([1, 2])
    assert (i + 1).dtype == tf.int32
    assert backend.stats()["ops"]["AddV2"]["backend"] == 2
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
        tf.raw_ops.AddV2(x=x, y=i)


def test_op_callbacks_are_respected(tf):
    x = tf.constant([1.0, 0.0])
    tf.debugging.enable_check_numerics()
    try:
        with tf_backend.enabled():
            with pytest.raises(tf.errors.InvalidArgumentError, match="Inf"):
                tf.math.log(x * 0.0)  # -inf from log(0): check_numerics must see it
    finally:
        tf.debugging.disable_check_numerics()


def test_device_scope(backend, tf):
    x = tf.constant([1.0, 2.0])
    with tf.device("/CPU:0"):
        y = x + x
    assert backend.stats()["ops"]["AddV2"]["backend"] == 1
    assert y.device.endswith("CPU:0")


def test_other_cpu_device_falls_back():
    r = _run_script("""
        import tensorflow as tf, tf_backend
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf_backend.enable()
        x = tf.constant([1.0, 2.0])
        with tf.device("/CPU:1"):
            y = x + x
        print(y.device, tf_backend.stats()["ops"]["AddV2"])
    """)
    assert r.returncode == 0, r.stderr
    assert "CPU:1" in r.stdout and "device_placement" in r.stdout


def test_only_this_process_cpu0_counts_as_ours():
    """Another task's CPU:0 (a remote worker) is not ours, though its name ends in CPU:0."""
    from tf_backend import tf_adapter as tfa
    ours = ["", "CPU:0", "/cpu:0", "/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"]
    not_ours = ["/job:worker/replica:0/task:1/device:CPU:0",
                "/job:localhost/replica:0/task:1/device:CPU:0",
                "/job:localhost/replica:0/task:0/device:CPU:1", "/device:GPU:0", "/xyzCPU:0"]
    assert [tfa.device_is_cpu(d) for d in ours] == [True] * len(ours)
    assert [tfa.device_is_cpu(d) for d in not_ours] == [False] * len(not_ours)


def test_run_functions_eagerly_goes_through_kernels(backend, tf):
    @tf.function
    def f(x):
        return tf.nn.relu(x - 1.0)

    tf.config.run_functions_eagerly(True)
    try:
        out = f(tf.constant([0.0, 3.0]))
    finally:
        tf.config.run_functions_eagerly(False)
    np.testing.assert_allclose(np.asarray(out), [0.0, 2.0])
    assert backend.stats()["ops"]["Relu"]["backend"] == 1


def _tape_grads(tf, x):
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = tf.reduce_sum(x * x * x + tf.nn.relu(x) * x)
        g = t1.gradient(y, x)
    return np.asarray(g), np.asarray(t2.gradient(g, x))


def test_gradient_tape_first_and_second_order(tf):
    x = tf.constant([[-1.5, 0.5], [2.0, 3.0]])
    tf_backend.disable()
    ref = _tape_grads(tf, x)
    with tf_backend.enabled():
        tf_backend.reset_stats()
        ours = _tape_grads(tf, x)
        s = tf_backend.stats()["ops"]
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-6)
    assert s["Mul"]["backend"] > 0


def test_forward_accumulator(tf):
    x = tf.constant([[-1.5, 0.5], [2.0, 3.0]])
    v = tf.constant([[1.0, 2.0], [0.5, -1.0]])

    def jvp():
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = x * x + tf.nn.relu(x)
        return np.asarray(acc.jvp(y))

    tf_backend.disable()
    ref = jvp()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        ours = jvp()
        assert tf_backend.stats()["ops"]["Mul"]["backend"] > 0
    np.testing.assert_allclose(ours, ref, rtol=1e-6)


def test_outputs_are_real_eager_tensors(backend, tf):
    x = tf.constant(np.ones((64, 64), np.float32))
    y = x + x
    assert type(y) is type(x)
    assert isinstance(y, tf.Tensor)
    np.testing.assert_array_equal(np.asarray(y), 2 * np.ones((64, 64)))


def test_no_numpy_warnings_leak(backend, tf):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = tf.constant([1e38, -1e38, np.nan], tf.float32)
        np.asarray(x * x + x)


def test_list_subclass_attrs_take_the_direct_path(backend, tf):
    """Keras passes attrs as TrackedList (a list subclass): must not break caching or warn."""
    class TrackedList(list):
        pass

    x = tf.ones((1, 3, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = tf.squeeze(x, axis=TrackedList([0, 2]))
        y = tf.squeeze(x, axis=TrackedList([0, 2]))
    assert y.shape == (3,)
    s = backend.stats()["ops"]["Squeeze"]
    assert s["backend"] == 2 and s["fallback"] == 0, s


def test_numpy_inputs_take_the_direct_path_as_tensorflows_fast_path_converts_them(tf, monkeypatch):
    """numpy arrays and scalars as op inputs (tf.transpose's default perm is one) convert on
    our direct path as TensorFlow's fast path converts them: cast to the type attr's dtype
    already known (a tensor input, an earlier input, the attr's default), unsafe casts too,
    else their own dtype; never aliasing the caller's array. Results and dtypes are stock's."""
    from tf_backend import fastpath
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    cases = [
        lambda: tf.transpose(x),
        lambda: tf.reshape(x, np.array([3, 2], np.int64)),     # Tshape's default: int32
        lambda: tf.reshape(x, np.array([3.0, 2.0])),            # forced to int32
        lambda: tf.add(x, np.array([1.5, 2.5, 3.25], np.float64)),
        lambda: tf.add(np.array([1, 2], np.int64), np.array([3, 4], np.int64)),
        lambda: tf.maximum(x, np.float32(2.5)),
        lambda: tf.maximum(x, np.float64(2.5)),
        lambda: tf.tile(x, np.array([2, 1])),
        lambda: tf.reduce_sum(x, axis=np.int64(1)),
        lambda: tf.add(np.array([250], np.uint8), np.array([10], np.uint8)),
        lambda: tf.add(tf.constant([1.0], tf.float16), np.array([1e6])),
    ]

    def run():
        with np.errstate(over="ignore"):
            return [(r.dtype, r.numpy()) for r in (f() for f in cases)]

    tf_backend.disable()
    want = run()
    converted = []
    real = fastpath._convert_numpy
    monkeypatch.setattr(fastpath, "_convert_numpy",
                        lambda v, e: converted.append(1) or real(v, e))
    with tf_backend.enabled():
        got = run()
        converted.clear()
        tf.transpose(x)
        assert converted   # not TensorFlow's Python fallback (10 us more a call)
        arr = np.arange(4, dtype=np.float32)
        view = tf.reshape(arr, np.array([2, 2]))
        arr[0] = 99.0
        assert view.numpy()[0, 0] == 0.0
    for (wd, wv), (gd, gv) in zip(want, got):
        assert wd == gd
        np.testing.assert_array_equal(wv, gv)


def test_eager_view_ops_are_tensorflows_own_by_default(tf, monkeypatch):
    """In mode "on" an eager op whose TensorFlow op shares its input's buffer (Reshape,
    ExpandDims, Squeeze, Split, Identity, StopGradient) runs as TensorFlow's op, counted with
    the reason: ours copied (a 128 MiB reshape took 7 ms against stock's 0.04). Strict mode
    and TF_BACKEND_EAGER_VIEWS=ours run them on our kernels."""
    from tf_backend import dispatch
    monkeypatch.setattr(dispatch, "EAGER_VIEWS_TO_TF", True)
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6))
    calls = [lambda: tf.reshape(x, [6, 4]), lambda: tf.expand_dims(x, 0),
             lambda: tf.squeeze(tf.reshape(x, [1, 4, 6]), 0), lambda: tf.split(x, 2, axis=0),
             lambda: tf.identity(x), lambda: tf.stop_gradient(x)]
    tf_backend.disable()
    want = [np.asarray(t) for f in calls for t in tf.nest.flatten(f())]
    try:
        tf_backend.enable()
        tf_backend.reset_stats()
        got = [np.asarray(t) for f in calls for t in tf.nest.flatten(f())]
        ops = tf_backend.stats()["ops"]
        for op in ("Reshape", "ExpandDims", "Squeeze", "Split", "Identity", "StopGradient"):
            assert ops[op]["backend"] == 0 and set(ops[op]["reasons"]) == {dispatch.EAGER_VIEW}, op
        y = tf.reshape(x, [24])     # TensorFlow's reshape: the same buffer, no copy
        assert y._numpy().ctypes.data == x._numpy().ctypes.data
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.reshape(x, [24]) * 2.0)
        np.testing.assert_array_equal(tape.gradient(loss, x), np.full((4, 6), 2.0, np.float32))
        tf_backend.enable("strict")
        tf_backend.reset_stats()
        tf.reshape(x, [6, 4])
        assert tf_backend.stats()["ops"]["Reshape"]["backend"] == 1
        monkeypatch.setattr(dispatch, "EAGER_VIEWS_TO_TF", False)
        tf_backend.enable()
        tf_backend.reset_stats()
        tf.reshape(x, [6, 4])
        assert tf_backend.stats()["ops"]["Reshape"]["backend"] == 1
    finally:
        tf_backend.disable()
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
