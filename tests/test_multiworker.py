"""tf.distribute across processes (issue 18): two MultiWorkerMirroredStrategy workers on
loopback, with the backend off and on. Our outputs are made on the context's own host CPU, so
eager ops run on our kernels in a /job:worker context (they used to fail with 'unknown device');
a custom training loop with all_reduce ends with stock's weights and losses on both workers, its
step running as our program with the collective as a TensorFlow node."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# the training step both worker scripts run: one variable, a product, an all-reduce of its
# gradient, SGD at `lr`
STEP = textwrap.dedent("""
    with strategy.scope():
        v = tf.Variable(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2))

    @tf.function
    def step(xb):
        def replica_fn(xb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.nn.relu(tf.matmul(xb, v)) ** 2)
            g = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, v))
            v.assign_sub(lr * g)
            return loss
        return strategy.run(replica_fn, args=(xb,))
""")

WORKER = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    eager = tf.nn.relu(tf.constant([1.0, -1.0, 3.0]) * 2.0).numpy().tolist()
    lr = 0.05
""") + STEP + textwrap.dedent("""
    rng = np.random.default_rng(task)
    losses = []
    for i in range(3):
        xb = tf.constant(rng.standard_normal((5, 4)).astype(np.float32))
        losses.append(float(step(xb)))
    out = {"eager": eager, "losses": losses, "v": v.numpy().tolist(),
           "device": tf.constant(1.0).device}
    try:
        import tf_backend
        out["ledger"] = tf_backend.stats()["ops"]
        out["mode"] = tf_backend.mode()
    except Exception as e:
        out["ledger"] = {}
    print("RESULT " + json.dumps(out), flush=True)
""")


def _ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _cluster(tmp_path, backend, source=WORKER, **extra_env):
    """Two workers running `source`; their RESULT dicts."""
    script = tmp_path / "worker.py"
    script.write_text(source)
    ports = _ports(2)
    workers = [f"localhost:{p}" for p in ports]
    procs = []
    for i in range(2):
        env = dict(os.environ, TF_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", **extra_env,
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
            line = [l for l in out.splitlines() if l.startswith("RESULT ")]
            assert line, out[-2000:] + err[-2000:]
            results.append(json.loads(line[-1][7:]))
    finally:
        for p in procs:   # a worker left waiting for its peer must not outlive the test
            if p.poll() is None:
                p.kill()
    return results


def test_two_workers_match_stock_and_eager_ops_run_on_our_kernels(tmp_path):
    stock = _cluster(tmp_path, "0")
    ours = _cluster(tmp_path, "1")
    for s, o in zip(stock, ours):
        assert o["mode"] == "on"
        assert "/job:worker/" in o["device"]
        assert o["eager"] == s["eager"] == [2.0, 0.0, 6.0]
        np.testing.assert_allclose(o["losses"], s["losses"], rtol=1e-5)
        np.testing.assert_allclose(o["v"], s["v"], rtol=1e-5, atol=1e-6)
        assert o["ledger"]["Relu"]["backend"] >= 1 and o["ledger"]["Mul"]["backend"] >= 1
        # the step ran as our program: its compute on our kernels, its all-reduce (and the
        # variable updates) as TensorFlow nodes in program order
        assert o["ledger"]["MatMul"]["kernels"].get("program", 0) >= 3, o["ledger"]["MatMul"]
        assert o["ledger"]["ReluGrad"]["kernels"].get("program", 0) >= 3
        assert o["ledger"]["CollectiveReduceV2"]["fallback"] == 3, o["ledger"]
    np.testing.assert_array_equal(ours[0]["v"], ours[1]["v"])   # the all-reduce agreed


DYING = textwrap.dedent("""
    import json, os, time
    import numpy as np
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        v = tf.Variable(np.ones((4, 2), np.float32))

    @tf.function
    def step(x):
        def replica_fn(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.matmul(x, v) ** 2)
            g = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, v))
            v.assign_sub(0.01 * g)
            return loss
        return strategy.run(replica_fn, args=(x,))

    t0 = time.time()
    try:
        for i in range(6):
            step(tf.ones((3, 4))).numpy()
            if task == 1 and i == 1:
                os._exit(3)          # this worker dies after its second step
        print("RESULT " + json.dumps({"error": None}), flush=True)
    except Exception as e:
        print("RESULT " + json.dumps({"error": type(e).__name__, "message": str(e)[:300],
                                      "seconds": time.time() - t0}), flush=True)
""")


# slow: waits out a collective's timeout in two worker processes (~17 s)
@pytest.mark.slow
def test_a_dead_worker_makes_the_other_fail_with_tensorflows_error(tmp_path):
    """Worker 1 dies after two steps; worker 0's next all-reduce, a TensorFlow node inside our
    program, fails as stock's does (UnavailableError from TensorFlow's peer health check, ~11 s
    here for both) instead of hanging."""
    script = tmp_path / "dying.py"
    script.write_text(DYING)
    workers = [f"localhost:{p}" for p in _ports(2)]
    procs = []
    for i in range(2):
        env = dict(os.environ, TF_BACKEND="1", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        out, err = procs[0].communicate(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    line = [l for l in out.splitlines() if l.startswith("RESULT ")]
    assert line, err[-3000:]
    res = json.loads(line[-1][7:])
    assert res["error"] == "UnavailableError", res
    assert "CollectiveReduceV2" in res["message"]


CHOOSING = textwrap.dedent("""
    import json, os
    import numpy as np
    import tensorflow as tf
    from tf_backend import functions
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    # the workers alone would choose differently: worker 0 times TensorFlow's side slower by
    # SKEW[0] s, worker 1 ours by SKEW[1] s; the larger decides the sums
    lag = [float(x) for x in os.environ["SKEW"].split(",")]
    skew = {"tensorflow": lag[0]} if task == 0 else {"ours": lag[1]}
    real = functions._trial_step
    functions._trial_step = lambda prog, name, trial, s: real(
        prog, name, trial, s + skew.get(trial["side"], 0.0))
    if os.environ.get("LONE") and task == 1:
        functions.CHOICE_AFTER = 10**6   # this worker never ends a trial, so never agrees
    lr = 0.001
""") + STEP + textwrap.dedent("""
    import tf_backend
    xb = tf.constant(np.random.default_rng(task).standard_normal((5, 4)).astype(np.float32))
    for i in range(90):
        step(xb).numpy()
    choice = ([f["choice"] for f in tf_backend.stats()["functions"].values()
               if "choice" in f] or [None])[0]
    print("RESULT " + json.dumps({"choice": choice, "v": v.numpy().tolist()}), flush=True)
""")


@pytest.mark.parametrize("skew,runs", [("0.020,0.030", "tensorflow"), ("0.030,0.020", "ours")])
def test_workers_agree_on_who_runs_a_collective_step(tmp_path, skew, runs):
    """A step with an all-reduce is measured on every worker at once; at the trial's end the
    workers all-reduce their medians and all take the choice the sums give (though each alone
    would have chosen otherwise), and go on running it."""
    results = _cluster(tmp_path, "1", CHOOSING, TF_BACKEND_FUNCTION_CHOICE="measure", SKEW=skew)
    for r in results:
        assert r["choice"].get("agreed") == 2 and r["choice"]["runs"] == runs, r
    assert results[0]["choice"] == results[1]["choice"]
    np.testing.assert_array_equal(results[0]["v"], results[1]["v"])


def test_an_agreement_that_never_meets_its_peer_leaves_the_job_running(tmp_path):
    """Worker 1 never ends a trial of the step: worker 0's agreement stays pending (it has no
    timeout: a collective that times out aborts TensorFlow's collective executor, and the job's
    next step with it), worker 0 keeps running ours, and both finish."""
    results = _cluster(tmp_path, "1", CHOOSING, TF_BACKEND_FUNCTION_CHOICE="measure",
                       SKEW="0.02,0.03", LONE="1")
    assert results[0]["choice"]["agreed"] == "pending" and results[0]["choice"]["runs"] == "ours"
    assert results[1]["choice"] is None
    np.testing.assert_array_equal(results[0]["v"], results[1]["v"])


def test_workers_sharing_this_host_are_counted():
    from tf_backend import config
    two = {"cluster": {"worker": ["localhost:1", "127.0.0.1:2"], "chief": ["far.example:3"]},
           "task": {"type": "worker", "index": 0}}
    assert config.local_workers(json.dumps(two)) == 2
    remote = dict(two, task={"type": "chief", "index": 0})
    assert config.local_workers(json.dumps(remote)) == 1      # this task is not on this host
    assert config.local_workers("") == 1 and config.local_workers("{bad") == 1
    assert config.local_workers(json.dumps({"cluster": {}, "task": {}})) == 1
