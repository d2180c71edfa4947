"""Eager per-op latency: stock TensorFlow vs tf_backend, side by side in one process.

Blocks of calls alternate between the two sides; we report per-call medians with the IQR and the
ratio ours/stock (< 1 means we are faster). Usage:
    python integration/bench_eager.py [--repeats 15] [--json out.json] [--only AddV2]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_backend._startup import tune_thread_env  # noqa: E402

tune_thread_env()   # as TF_BACKEND=1 does at start-up (before numpy loads OpenBLAS)


def workloads(tf, np):
    rng = np.random.default_rng(0)

    def t(*shape):
        return tf.constant(rng.standard_normal(shape).astype(np.float32))

    a4, m16, big, big2 = t(4, 4), t(16, 16), t(1 << 20), t(1 << 20)
    m512a, m512b = t(512, 512), t(512, 512)
    img, filt = t(1, 56, 56, 64), t(3, 3, 64, 64)
    # (name, fn, calls per block, target ratio, what the target means)
    return [
        ("AddV2 4x4", lambda: tf.add(a4, a4), 2000, 1.0, "small op <= 1.0"),
        ("MatMul 16x16", lambda: tf.matmul(m16, m16), 2000, 1.0, "small op <= 1.0"),
        ("Relu 1M f32", lambda: tf.nn.relu(big), 50, 1 / 1.5, "large elementwise >= 1.5x faster"),
        ("AddV2 1M f32", lambda: tf.add(big, big2), 50, 1 / 1.5, "large elementwise >= 1.5x faster"),
        ("MatMul 512x512", lambda: tf.matmul(m512a, m512b), 20, 1.2, "GEMM within 1.2x"),
        ("Conv2D 1x56x56x64 3x3x64x64", lambda: tf.nn.conv2d(img, filt, 1, "SAME"), 10, 1.2,
         "conv within 1.2x"),
    ]


def measure(fn, calls, repeats, tf_backend):
    per = {"stock": [], "ours": []}
    for side in ("stock", "ours"):  # warm-up (numba compiles lazily)
        tf_backend.enable() if side == "ours" else tf_backend.disable()
        for _ in range(max(3, calls // 10)):
            fn()
    for _ in range(repeats):
        for side in ("stock", "ours"):
            tf_backend.enable() if side == "ours" else tf_backend.disable()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per[side].append((time.perf_counter() - t0) / calls)
    tf_backend.disable()
    return per


def summarize(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median_us": 1e6 * statistics.median(xs), "q1_us": 1e6 * q[0], "q3_us": 1e6 * q[2]}


def main(argv=None):
    p = argparse.ArgumentParser(description="eager per-op latency, stock vs tf_backend")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--json")
    p.add_argument("--only", help="substring of a workload name")
    args = p.parse_args(argv)
    import numpy as np
    import tensorflow as tf

    import tf_backend
    rows = []
    for name, fn, calls, target, meaning in workloads(tf, np):
        if args.only and args.only not in name:
            continue
        per = measure(fn, calls, args.repeats, tf_backend)
        s, o = summarize(per["stock"]), summarize(per["ours"])
        ratios = sorted(a / b for a, b in zip(per["ours"], per["stock"]))
        ratio = s and o["median_us"] / s["median_us"]
        rows.append({"workload": name, "stock": s, "ours": o, "ratio": ratio,
                     "ratio_q1": statistics.quantiles(ratios, n=4)[0],
                     "ratio_q3": statistics.quantiles(ratios, n=4)[2],
                     "target": target, "target_met": ratio <= target, "meaning": meaning})
        r = rows[-1]
        print(f"{name:30s} stock {s['median_us']:10.1f} us [{s['q1_us']:.1f}-{s['q3_us']:.1f}]  "
              f"ours {o['median_us']:10.1f} us [{o['q1_us']:.1f}-{o['q3_us']:.1f}]  "
              f"ratio {ratio:5.2f} [{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}]  "
              f"{'ok ' if r['target_met'] else 'MISS'} ({meaning})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "tf_version": tf.__version__, "repeats": args.repeats}, f,
                      indent=1)


if __name__ == "__main__":
    main()
