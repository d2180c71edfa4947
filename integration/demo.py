"""Demo (the README's main job until `tfb ab` lands): a bundled Keras model, backend off vs on.

Prints median latency with spread for each side, the ratio, the max output difference and the
ledger. Usage: python integration/demo.py [--model small_cnn] [--batch 8] [--repeats 30]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="small_cnn", help="one of: small_cnn, cnn, mlp, small_mlp")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    import tf_backend
    from integration import models
    from tf_backend import ledger, numerics

    model = models.build(args.model, keras)
    x, _ = models.sample_batch(model, args.batch)
    x = tf.constant(x)
    times = {"stock": [], "backend": []}
    outs = {}
    tf_backend.disable()
    outs["stock"] = np.asarray(model(x))   # warm-up both sides (numba compiles lazily)
    tf_backend.enable()
    outs["backend"] = np.asarray(model(x))
    tf_backend.reset_stats()
    for _ in range(args.repeats):       # alternate sides so drift hits both equally
        for side in ("stock", "backend"):
            tf_backend.enable() if side == "backend" else tf_backend.disable()
            t = time.perf_counter()
            np.asarray(model(x))
            times[side].append(time.perf_counter() - t)
    tf_backend.enable()
    stats = tf_backend.stats()
    tf_backend.disable()

    def fmt(ts):
        q = statistics.quantiles(ts, n=4)
        return f"median {1e3 * statistics.median(ts):8.3f} ms  (IQR {1e3 * q[0]:.3f}-{1e3 * q[2]:.3f})"

    print(f"model {args.model}, batch {args.batch}, eager forward, {args.repeats} alternating runs")
    print(f"  stock TensorFlow : {fmt(times['stock'])}")
    print(f"  tf_backend       : {fmt(times['backend'])}")
    ratio = statistics.median(times["backend"]) / statistics.median(times["stock"])
    print(f"  ratio backend/stock: {ratio:.3f}")
    abs_err, rel_err = numerics.max_errors(outs["backend"], outs["stock"])
    verdict = numerics.compare(outs["backend"], outs["stock"], "reduction", 1024)
    print(f"  max abs diff {abs_err:.3g}, max rel diff {rel_err:.3g}: "
          f"{'within tolerance' if verdict is None else 'MISMATCH: ' + verdict}")
    print("ledger (timed runs, backend side):")
    print(ledger.format_table(stats))
    return 0 if verdict is None else 1


if __name__ == "__main__":
    sys.exit(main())
