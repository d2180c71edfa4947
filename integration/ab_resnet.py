"""In-process A/B of one of our settings on Keras ResNet-50 (batch 1) through our programs.

Both settings run in the same process, alternating per block of calls, and every node is timed:
on this 2-vCPU VM two processes differ by up to 15%, which hides a 5% change.

    python integration/ab_resnet.py --compare winograd|filter-cache|memo [--rounds 10]
    python integration/ab_resnet.py --compare set --b-set kernels.cpu.conv_ops:COLS_CHUNK_BYTES=33554432
        (B: module attributes set to Python literals while B runs; A: their own values)

Prints the wall median (min-max) per setting, the sum of per-node medians, and the node types /
convolution shapes that take the most time, A (on) beside B (off).
"""
import argparse
import collections
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_backend._startup import tune_thread_env  # noqa: E402

tune_thread_env()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", choices=("winograd", "filter-cache", "memo", "set"),
                   required=True)
    p.add_argument("--b-set", action="append", default=[], metavar="MODULE:ATTR=VALUE")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    import keras
    import numpy as np
    import tensorflow as tf

    import tf_backend
    from kernels.cpu import filter_cache, winograd
    from tf_backend import executor

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None)
    x = tf.constant(np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32))
    fa = tf.function(lambda x: model(x, training=False))
    fb = fa
    tiles, cache = winograd.TILES_MIN, filter_cache.CACHE_BYTES

    from integration import parse_setting
    overrides = []   # (module, attr, A's value, B's value)
    for spec in args.b_set:
        m, attr, v = parse_setting(spec)
        overrides.append((m, attr, getattr(m, attr), v))

    def setting(on):
        for m, attr, a_value, b_value in overrides:
            setattr(m, attr, a_value if on else b_value)
        if args.compare == "winograd":
            winograd.TILES_MIN = tiles if on else 1 << 62
        elif args.compare == "filter-cache":
            filter_cache.CACHE_BYTES = cache if on else 0
            if not on:
                filter_cache.clear()

    tf_backend.enable()
    fa(x)
    if args.compare == "memo":   # a second function compiled without the pass
        fb = tf.function(lambda x: model(x, training=False))
        os.environ["TF_BACKEND_DISABLE_PASSES"] = "memo"
        fb(x)
        del os.environ["TF_BACKEND_DISABLE_PASSES"]
    arms = {"A": (fa, True), "B": (fb, False)}
    orig = executor.execute
    rec = {a: collections.defaultdict(list) for a in arms}
    label, cur = {}, ["A"]

    def timed(node, vals):
        t0 = time.perf_counter()
        try:
            return orig(node, vals)
        finally:
            rec[cur[0]][node.name].append(time.perf_counter() - t0)
            if node.name not in label:
                shapes = [tuple(getattr(vals[s], "shape", ())) for s in node.inputs[:2]]
                label[node.name] = f"{node.op} {shapes}" if "Conv" in node.op else node.op

    walls = {a: [] for a in arms}
    try:
        for _ in range(args.rounds):
            for a, (fn, on) in arms.items():
                setting(on)
                cur[0] = a
                executor.execute = orig
                fn(x).numpy()                        # untimed: settle caches and threads
                executor.execute = timed
                for _ in range(2):
                    t0 = time.perf_counter()
                    fn(x).numpy()
                    walls[a].append(time.perf_counter() - t0)
    finally:
        executor.execute = orig
        setting(True)
        tf_backend.disable()
    for a in arms:
        w = walls[a]
        print(f"{a} ({'on' if arms[a][1] else 'off'}): wall median {1e3 * statistics.median(w):.1f} ms "
              f"[{1e3 * min(w):.1f}-{1e3 * max(w):.1f}]")
    by = collections.defaultdict(lambda: {a: 0.0 for a in arms})
    for a in arms:
        for name, ts in rec[a].items():
            by[label[name]][a] += 1e3 * statistics.median(ts)
    print("sum of node medians: " + ", ".join(f"{a} {sum(v[a] for v in by.values()):.1f} ms"
                                               for a in arms))
    for k, v in sorted(by.items(), key=lambda kv: -max(kv[1].values()))[:args.top]:
        print("  " + "  ".join(f"{a} {v[a]:6.2f}" for a in arms) + f"  {k}")


if __name__ == "__main__":
    main()
