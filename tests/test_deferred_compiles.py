"""First-use compiles in a child process (kernels/cpu/deferred.py): with a cold numba cache a
kernel that needs a compile declines the call (TensorFlow's kernel runs it, ledger reason
`runtime:compiling`), and once the child has filled the cache the same calls run ours, with
stock's results throughout. The test suite itself runs with TF_BACKEND_KERNEL_COMPILE=sync
(conftest.py); this test starts a process with the async default and empty caches."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kernels.cpu import deferred, jit, pooling_ops

SCRIPT = textwrap.dedent("""
    import json, numpy as np, tensorflow as tf, tf_backend
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((4, 16, 16, 8)).astype(np.float32))

    @tf.function
    def f(x):   # an elementwise group, a pool, a reduction fused with its elementwise input,
        # a constant folded when the program compiles
        y = tf.nn.max_pool2d(tf.nn.relu(x * 2.0), 2, 2, "VALID") * tf.sqrt(tf.constant(3.0))
        return y + tf.reduce_mean(tf.square(x - 1.0), axis=[1, 2, 3], keepdims=True)

    tf_backend.disable()
    ref_fn, ref_eager = f(x).numpy(), tf.nn.max_pool2d(x, 3, 1, "SAME").numpy()
    tf_backend.enable()
    calls = []
    for i in range(8):
        tf_backend.reset_stats()
        out_fn, out_eager = f(x).numpy(), tf.nn.max_pool2d(x, 3, 1, "SAME").numpy()
        ops = tf_backend.stats()["ops"]
        compiling = sum(n for v in ops.values() for r, n in v["reasons"].items()
                        if "compiling" in r)
        calls.append({"compiling": compiling,
                      "compiling_ops": sorted(k for k, v in ops.items()
                                              if any("compiling" in r for r in v["reasons"])),
                      "same": bool(np.allclose(out_fn, ref_fn, rtol=1e-6, atol=1e-6)
                                   and np.array_equal(out_eager, ref_eager)),
                      "maxpool_ours": ops.get("MaxPool", {}).get("backend", 0)})
        if i and not compiling:
            break
        if i == 0:   # compiles still running: TensorFlow runs the whole function meanwhile
            from tf_backend import executor
            pending = executor.compiles_pending()
            tf_backend.reset_stats()
            again = f(x).numpy()
            fs = [v for k, v in tf_backend.stats()["functions"].items() if "__inference_f" in k]
            calls[0]["while_pending"] = {"pending": pending, "same": bool(
                np.allclose(again, ref_fn, rtol=1e-6, atol=1e-6)),
                "on_tensorflow": fs[-1]["fallback_calls"]}
        tf_backend.wait_for_compiles()
    print("RESULT " + json.dumps(calls))
""")


def test_cold_cache_compiles_in_a_child_and_tensorflow_runs_meanwhile(tmp_path):
    env = dict(os.environ, TF_BACKEND="1", TF_BACKEND_KERNEL_COMPILE="async",
               NUMBA_CACHE_DIR=str(tmp_path / "numba"), TF_BACKEND_CACHE_DIR=str(tmp_path / "tfb"),
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_BACKEND_LOOP_COMPILE", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 0, r.stderr[-3000:]
    calls = json.loads([l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])
    assert calls[0]["compiling"] > 0, calls          # cold: TensorFlow ran what was compiling
    # the fused Mul -> Relu group too, op by op (passes/fuse_elementwise.py), the fused
    # Square -> Mean pair (passes/fuse_reduce.py) and the constant fold (passes/const_fold.py)
    assert {"MaxPool", "Relu", "Mean", "Sqrt"} <= set(calls[0]["compiling_ops"]), calls
    assert all(c["same"] for c in calls), calls      # stock's results on every call
    assert calls[-1]["compiling"] == 0, calls        # the child filled the cache
    w = calls[0]["while_pending"]
    assert w["same"] and (w["on_tensorflow"] == 1 or not w["pending"]), calls
    assert calls[-1]["maxpool_ours"] == 2, calls     # then both MaxPools ran our kernel


def test_a_child_rebuilds_dispatchers_the_kernels_build_in_other_ways():
    """jit.parallel clones and the pairs of pooling_ops are found through the module-level
    function they compile, under their own qualified name and options."""
    par = pooling_ops._MAXG[1]
    file, mod, name, qualname, options, _ = deferred._address(par)
    assert (file, mod, name) == (None, "kernels.cpu.pooling_ops", "_max_pool_grad")
    assert qualname == "_max_pool_grad__parallel" and options["parallel"] is True

    def local(a):   # not reachable from its module: compiled where it is called
        return a
    assert deferred._address(jit.parallel(local)) is None


def test_only_registered_frames_may_decline(monkeypatch):
    monkeypatch.setattr(deferred, "_markers", {})

    def marked():
        return deferred._allowed()

    def under(fn):
        return fn()
    assert under(marked) is False
    deferred._markers[under.__code__] = lambda f: True
    assert under(marked) is True
    deferred._markers[under.__code__] = lambda f: False
    assert under(marked) is False


@pytest.mark.parametrize("mode", ["sync"])
def test_suites_compile_on_first_call(mode):
    """conftest.py (and the pytest plugin for users' suites) keep the first call on our kernel."""
    assert deferred.mode() == mode


def test_a_child_runs_a_whole_kernel_on_stand_ins():
    """warm_kernel's payload: small inputs travel with their values (a shape, an axis), larger
    ones as zeros of the same shape, dtype and writability; the kernel runs once."""
    import numpy as np
    attrs = {"T": np.dtype(np.float32), "Tshape": np.dtype(np.int32)}
    x = np.arange(6 * 400, dtype=np.float32).reshape(6, 400)
    x.flags.writeable = False
    shape = np.array([400, 6], np.int32)
    ins = [(x.shape, x.dtype.str, False, None), (shape.shape, shape.dtype.str, True, shape.copy())]
    assert deferred._run_kernel("Reshape", attrs, ins, [((400, 6), "<f4")])
    assert not deferred._run_kernel("NoSuchOp", {}, [], [])
