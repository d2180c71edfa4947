"""Step time of a two-worker custom training loop (MultiWorkerMirroredStrategy on loopback),
stock vs ours in the same worker processes: blocks of steps alternate between the backend off
and on (both workers switch together), medians per arm from worker 0. Both workers share this
machine's cores. Models: an MLP (784-256-256-10, batch 64 per worker) and a small CNN
(28x28x1: Conv 16 3x3 - MaxPool - Conv 32 3x3 - MaxPool - Dense 10, batch 32 per worker).

    python integration/scripts/multiworker_step.py [--blocks 6] [--steps 20]
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import tensorflow as tf
    import tf_backend
    BLOCKS, STEPS = int(sys.argv[1]), int(sys.argv[2])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

    def build(kind):
        rng = np.random.default_rng(0)
        def var(*shape):
            with strategy.scope():
                return tf.Variable((rng.standard_normal(shape) * 0.05).astype(np.float32))
        if kind == "mlp":
            ws = [var(784, 256), var(256), var(256, 256), var(256), var(256, 10), var(10)]
            def model(x):
                h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                h = tf.nn.relu(tf.matmul(h, ws[2]) + ws[3])
                return tf.matmul(h, ws[4]) + ws[5]
            shape, batch = (784,), 64
        else:
            ws = [var(3, 3, 1, 16), var(16), var(3, 3, 16, 32), var(32), var(800, 10), var(10)]
            def model(x):
                h = tf.nn.relu(tf.nn.conv2d(x, ws[0], 1, "VALID") + ws[1])
                h = tf.nn.max_pool2d(h, 2, 2, "VALID")
                h = tf.nn.relu(tf.nn.conv2d(h, ws[2], 1, "VALID") + ws[3])
                h = tf.nn.max_pool2d(h, 2, 2, "VALID")
                return tf.matmul(tf.reshape(h, [-1, 800]), ws[4]) + ws[5]
            shape, batch = (28, 28, 1), 32

        @tf.function
        def step(x, y):
            def replica(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                        y, model(x)))
                gs = tape.gradient(loss, ws)
                gs = tf.distribute.get_replica_context().all_reduce("sum", gs)
                for w, g in zip(ws, gs):
                    w.assign_sub(0.01 * g)
                return loss
            return strategy.run(replica, args=(x, y))
        r = np.random.default_rng(task)
        x = tf.constant(r.standard_normal((batch,) + shape).astype(np.float32))
        y = tf.constant(r.integers(0, 10, batch).astype(np.int32))
        return step, x, y

    out = {}
    for kind in ("mlp", "cnn"):
        step, x, y = build(kind)
        times = {"stock": [], "ours": []}
        for b in range(BLOCKS):
            for arm in (("ours", "stock") if b % 2 else ("stock", "ours")):
                (tf_backend.enable if arm == "ours" else tf_backend.disable)()
                step(x, y).numpy()          # the switch's first call is not timed
                if arm == "ours":           # steady state: our kernels compiled (until
                    tf_backend.wait_for_compiles()   # then TensorFlow runs the step)
                    step(x, y).numpy()
                for _ in range(STEPS):
                    t = time.perf_counter()
                    step(x, y).numpy()
                    times[arm].append(time.perf_counter() - t)
        tf_backend.enable()
        choice = {k: v.get("choice") for k, v in tf_backend.stats()["functions"].items()
                  if v.get("choice")}
        tf_backend.reset_stats()
        for _ in range(3):
            step(x, y).numpy()
        ops = tf_backend.stats()["ops"]
        ours_n = sum(v["backend"] for v in ops.values())
        tf_n = {k: v["fallback"] for k, v in ops.items() if v["fallback"]}
        q = lambda a: [float(np.percentile(np.asarray(a) * 1e3, p)) for p in (25, 50, 75)]
        out[kind] = {"stock_ms": q(times["stock"]), "ours_ms": q(times["ours"]),
                     "ratio": q(times["ours"])[1] / q(times["stock"])[1],
                     "function_choice": choice,
                "ledger_3_steps": {"our_kernel_calls": ours_n, "tensorflow": tf_n}}
    print("RESULT " + json.dumps(out), flush=True)
""")


def main(blocks=6, steps=20):
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("localhost", 0))
    workers = [f"localhost:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    script = "/tmp/tfb_multiworker_step.py"
    with open(script, "w") as f:
        f.write(WORKER)
    procs = []
    for i in range(2):
        env = dict(os.environ, TF_BACKEND="1", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen([sys.executable, script, str(blocks), str(steps)],
                                      env=env, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    try:
        outs = [p.communicate(timeout=1800) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for (out, err), p in zip(outs, procs):
        if p.returncode != 0:
            sys.exit(err[-3000:])
    res = [json.loads([l for l in o.splitlines() if l.startswith("RESULT ")][-1][7:])
           for o, _ in outs]
    for kind, r in res[0].items():   # worker 1's choice beside worker 0's figures
        r["function_choice_worker1"] = res[1][kind]["function_choice"]
    print(json.dumps(res[0], indent=1))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[a.index("--blocks") + 1]) if "--blocks" in a else 6,
         int(a[a.index("--steps") + 1]) if "--steps" in a else 20)
