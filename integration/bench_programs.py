"""tf.function latency: stock vs XLA vs our program runtime, side by side in one process.

Arms alternate in blocks (each block starts with one untimed call); per-call medians with IQR;
ratios against stock tf.function. The
2-branch workload also compares our executor at 2 threads against our own 1-thread run.
    python integration/bench_programs.py [--repeats 9] [--only resnet] [--profile] [--json out.json]
        [--set MODULE:ATTR=VALUE ...]   (our settings for the whole run, e.g.
        --set tf_backend.program.passes.schedule:SERIAL_SPLITTING=False)
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_backend._startup import tune_thread_env  # noqa: E402

tune_thread_env()   # as TF_BACKEND=1 does at start-up (before numpy loads OpenBLAS)


def workloads(tf, np, keras):
    rng = np.random.default_rng(0)

    def t(*shape):
        return tf.constant(rng.standard_normal(shape).astype(np.float32))

    def three_op(x):
        return tf.nn.relu(x * 2.0 + 1.0)

    from integration import models
    mlp = models.build("mlp", keras)
    g, b = t(768), t(768)

    def gelu_ln(x):
        y = 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        m = tf.reduce_mean(y, axis=-1, keepdims=True)
        v = tf.reduce_mean(tf.square(y - m), axis=-1, keepdims=True)
        return (y - m) * tf.math.rsqrt(v + 1e-5) * g + b

    def two_branch(x, y):
        a = tf.reduce_sum(tf.exp(x * 0.01) * tf.sin(x) + tf.cos(x * 0.5), axis=1)
        c = tf.reduce_sum(tf.exp(y * 0.01) * tf.sin(y) + tf.cos(y * 0.5), axis=1)
        return a + c

    keras.utils.set_random_seed(0)
    resnet = keras.applications.ResNet50(weights=None)
    # (name, python fn, args, calls per block, target, meaning)
    return [
        ("3-op function 4x4", three_op, (t(4, 4),), 300, 0.7, "call overhead <= 0.7x stock"),
        ("MLP 784-512-512-10 b64", lambda x: mlp(x), (t(64, 784),), 30, 1.0, "<= 1.0x stock"),
        ("GELU+LayerNorm 1x128x768", gelu_ln, (t(1, 128, 768),), 30, 0.5,
         ">= 2x faster than stock, ahead of XLA"),
        ("2-branch 200x500 x2", two_branch, (t(200, 500), t(200, 500)), 10, None,
         "2 threads >= 1.6x our 1-thread run"),
        ("ResNet-50 b1", lambda x: resnet(x, training=False), (t(1, 224, 224, 3),), 3, 1.0,
         "<= 1.0x stock"),
    ]


def time_block(fn, args, calls):
    # one untimed call first: the previous arm's threads (TF's and XLA's Eigen pools, OpenBLAS)
    # spin for a while after their last op and would otherwise be charged to this arm
    fn(*args)
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    np_out = out.numpy() if hasattr(out, "numpy") else out
    del np_out
    return (time.perf_counter() - t0) / calls


def summarize(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median_ms": 1e3 * statistics.median(xs), "q1_ms": 1e3 * q[0], "q3_ms": 1e3 * q[2]}


def main(argv=None):
    p = argparse.ArgumentParser(description="tf.function latency, stock vs XLA vs ours")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--only")
    p.add_argument("--profile", action="store_true", help="per-node-type time of our runs")
    p.add_argument("--json")
    p.add_argument("--set", action="append", default=[], metavar="MODULE:ATTR=VALUE",
                   help="set a module attribute (a Python literal) before anything runs")
    args = p.parse_args(argv)
    from integration import parse_setting
    for spec in args.set:
        setattr(*parse_setting(spec))
    import keras
    import numpy as np
    import tensorflow as tf

    import tf_backend
    from tf_backend import executor
    rows = []
    for name, fn, inputs, calls, target, meaning in workloads(tf, np, keras):
        if args.only and args.only.lower() not in name.lower():
            continue
        stock_fn, xla_fn = tf.function(fn), tf.function(fn, jit_compile=True)
        arms = {"stock": (stock_fn, None), "xla": (xla_fn, None), "ours": (stock_fn, 2)}
        if name.startswith("2-branch"):
            arms["ours_1thread"] = (stock_fn, 1)
        for arm, (f, threads) in arms.items():   # warm-up (traces, compiles)
            _set(tf_backend, executor, threads)
            for _ in range(2):
                f(*inputs)
        samples = {a: [] for a in arms}
        for _ in range(args.repeats):
            for arm, (f, threads) in arms.items():
                _set(tf_backend, executor, threads)
                samples[arm].append(time_block(f, inputs, calls))
        tf_backend.disable()
        executor.set_threads(executor.default_threads())
        s = {a: summarize(v) for a, v in samples.items()}
        base = "ours_1thread" if "ours_1thread" in s else "stock"
        ratio = s["ours"]["median_ms"] / s[base]["median_ms"]
        vs_xla = s["ours"]["median_ms"] / s["xla"]["median_ms"]
        ok = (ratio <= 1 / 1.6) if target is None else (ratio <= target and
                                                       (target != 0.5 or vs_xla < 1.0))
        rows.append({"workload": name, "arms": s, "ratio": ratio, "ratio_base": base,
                     "ours_vs_xla": vs_xla, "target_met": ok, "meaning": meaning})
        arms_txt = "  ".join(f"{a} {v['median_ms']:.3f} [{v['q1_ms']:.3f}-{v['q3_ms']:.3f}]"
                             for a, v in s.items())
        print(f"{name:28s} {arms_txt} ms | ours/{base} {ratio:.2f}, ours/xla {vs_xla:.2f} "
              f"{'ok ' if ok else 'MISS'} ({meaning})", flush=True)
        if args.profile:
            profile(tf_backend, executor, stock_fn, inputs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "tf_version": tf.__version__}, f, indent=1)


def _set(tf_backend, executor, threads):
    if threads is None:
        tf_backend.disable()
    else:
        executor.set_threads(threads)
        tf_backend.enable()


def profile(tf_backend, executor, fn, inputs, calls=3):
    """Where our time goes: wall time per node type over a few calls."""
    tot, cnt = collections.Counter(), collections.Counter()
    orig = executor.execute

    def timed(node, vals):
        t0 = time.perf_counter()
        try:
            return orig(node, vals)
        finally:
            tot[node.op] += time.perf_counter() - t0
            cnt[node.op] += 1

    tf_backend.enable()
    executor.execute = timed
    try:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*inputs)
        wall = (time.perf_counter() - t0) / calls
    finally:
        executor.execute = orig
        tf_backend.disable()
    inside = sum(tot.values()) / calls
    print(f"    profile: {1e3 * wall:.2f} ms per call, {1e3 * inside:.2f} ms inside nodes, "
          f"{1e3 * (wall - inside):.2f} ms in TF's call layer + executor overhead")
    for op, t in tot.most_common(8):
        print(f"      {op:32s} {1e3 * t / calls:8.3f} ms  x{cnt[op] // calls}")


if __name__ == "__main__":
    main()
