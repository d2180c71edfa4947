"""A loaded program file (tf_backend.runtime, no TensorFlow in the call path) against stock
tf.function on the same model, side by side in one process.

Arms: stock tf.function, the same tf.function with the backend on (our executor, same kernels:
the control that separates the runtime's own cost from the kernels'), and the loaded program.
Arms alternate in blocks (each block starts with one untimed call); per-call medians with IQR.
`--threads 1` pins BLAS, numba and TensorFlow to one thread each (steadier on a busy machine).
    python integration/bench_export.py [--repeats 9] [--only small_cnn,mlp] [--threads N]
        [--json out.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_backend._startup import tune_thread_env  # noqa: E402
from integration.bench_programs import summarize  # noqa: E402

if "--threads" in sys.argv:   # before numpy/numba/TensorFlow start their pools
    n = sys.argv[sys.argv.index("--threads") + 1]
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = n
tune_thread_env()   # as TF_BACKEND=1 does at start-up (before numpy loads OpenBLAS)

# (zoo model, batch, calls per block)
WORKLOADS = [("small_cnn", 8, 100), ("mlp", 64, 30), ("resnet50", 1, 1)]


def time_block(fn, arg, side, calls):
    import tf_backend
    if side == "on":
        tf_backend.enable("on")
    elif side == "off":
        tf_backend.disable()
    fn(arg)   # untimed: the other arm's threads may still spin
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(arg)
    out = out[0] if isinstance(out, list) else out.numpy()
    return (time.perf_counter() - t0) / calls


def main(argv=None):
    p = argparse.ArgumentParser(description="loaded program file vs stock tf.function")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--only", default="", help="comma-separated zoo models")
    p.add_argument("--threads", type=int, default=0, help="threads per library (0 = default)")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    import tensorflow as tf
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    import keras
    import tf_backend
    from tf_backend import numerics, runtime, zoo

    only = {s for s in a.only.split(",") if s}
    rows = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        for name, batch, calls in WORKLOADS:
            if only and name not in only:
                continue
            m = zoo.build(name, keras)
            x, _ = zoo.sample_batch(m, batch)
            path = os.path.join(d, f"{name}.tfbp")
            t0 = time.perf_counter()
            try:
                tf_backend.export(m, [tf.TensorSpec(x.shape, tf.float32)], path)
            except runtime.ExportError as e:
                print(f"{name}: not exportable: {e}")
                continue
            t_export = time.perf_counter() - t0
            t0 = time.perf_counter()
            prog = runtime.load(path)
            t_load = time.perf_counter() - t0
            stock = tf.function(lambda v: m(v, training=False))
            xt = tf.constant(x)
            arms = {"stock tf.function": (stock, xt, "off"), "ours tf.function": (stock, xt, "on"),
                    "loaded program": (prog, x, None)}
            tf_backend.disable()
            ref = stock(xt).numpy()
            ours = prog(x)[0]
            verdict = numerics.compare(ours, ref, "reduction", 4096) or "ok"
            for arm in arms.values():   # warm-up: tracing, compiles
                for _ in range(3):
                    time_block(*arm, 1)
            samples = {k: [] for k in arms}
            for r in range(a.repeats):
                k0 = r % len(arms)
                for k in list(arms)[k0:] + list(arms)[:k0]:
                    samples[k].append(time_block(*arms[k], calls))
            s = {k: summarize(v) for k, v in samples.items()}
            tf_backend.disable()
            ratio = s["loaded program"]["median_ms"] / s["stock tf.function"]["median_ms"]
            row = {"model": name, "batch": batch, "numerics": verdict,
                   "file_mb": os.path.getsize(path) / 2**20, "export_s": t_export,
                   "load_s": t_load, "arms": s, "ratio": ratio}
            rows.append(row)
            cells = "  ".join(f"{k} {v['median_ms']:.3f} ms [{v['q1_ms']:.3f}-{v['q3_ms']:.3f}]"
                              for k, v in s.items())
            print(f"{name} b{batch}: {cells}  loaded/stock {ratio:.2f}  numerics {verdict}  "
                  f"file {row['file_mb']:.1f} MiB, export {t_export:.1f} s, load {t_load:.2f} s",
                  flush=True)
    load1 = os.getloadavg()[0]
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, threads {a.threads or 'default'}, "
          f"load average {load0:.2f} -> "
          f"{load1:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "load": [load0, load1], "tensorflow": tf.__version__,
                       "threads": a.threads}, f, indent=1)


if __name__ == "__main__":
    main()
