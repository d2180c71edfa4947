"""`tfb bench`: the standing workloads, each timed on every arm (stock eager / tf.function / XLA,
ours eager / tf.function) with the same engine as `tfb ab`. It lives in the package so the
installed `tfb` finds it; integration/bench_suite.py is a thin runner for a checkout.

  tfb bench [--quick] [--only GEMM,conv] [--repeats N] [--arms ...] [--json out.json] [--plot p.png]
"""
import argparse
import json
import os
import sys
import time

# name -> (description, builder, calls per sample, calls per sample with --quick)
WORKLOADS = {}


def workload(name, description, inner=1, quick_inner=None):
    def deco(f):
        WORKLOADS[name] = (description, f, inner, quick_inner or inner)
        return f
    return deco


def _t(tf, np, rng, *shape):
    return tf.constant(rng.standard_normal(shape).astype(np.float32))


@workload("small-op", "AddV2 4x4: per-op dispatch cost", inner=200, quick_inner=100)
def _small_op(tf, keras, np, rng):
    a = _t(tf, np, rng, 4, 4)
    return (lambda x: tf.add(x, x)), [a]


@workload("elementwise-1M", "Relu(a) + b on 1M float32: large elementwise", inner=10)
def _elementwise(tf, keras, np, rng):
    return (lambda a, b: tf.nn.relu(a) + b), [_t(tf, np, rng, 1 << 20), _t(tf, np, rng, 1 << 20)]


@workload("gemm-512", "MatMul 512x512x512 float32", inner=5)
def _gemm(tf, keras, np, rng):
    return tf.matmul, [_t(tf, np, rng, 512, 512), _t(tf, np, rng, 512, 512)]


@workload("conv-56", "Conv2D 1x56x56x64, 3x3x64x64, SAME", inner=3)
def _conv(tf, keras, np, rng):
    return ((lambda x, w: tf.nn.conv2d(x, w, 1, "SAME")),
            [_t(tf, np, rng, 1, 56, 56, 64), _t(tf, np, rng, 3, 3, 64, 64)])


@workload("mlp-b64", "Keras MLP 784-512-512-10, batch 64, forward", inner=5)
def _mlp(tf, keras, np, rng):
    from .. import zoo
    model = zoo.build("mlp", keras)
    return (lambda x: model(x, training=False)), [_t(tf, np, rng, 64, 784)]


@workload("gelu-layernorm", "GELU + layer norm on 1x128x768 (elementwise-heavy)", inner=5)
def _gelu_ln(tf, keras, np, rng):
    gamma, beta = _t(tf, np, rng, 768), _t(tf, np, rng, 768)

    def f(x):
        h = tf.nn.gelu(x, approximate=False)
        mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
        return (h - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta

    return f, [_t(tf, np, rng, 1, 128, 768)]


@workload("two-branch", "two independent branches (MatMul-Tanh-MatMul | Sigmoid*x), 64x512",
          inner=3)
def _two_branch(tf, keras, np, rng):
    w1, w2, w3 = (_t(tf, np, rng, 512, 512) for _ in range(3))

    def f(x):
        a = tf.matmul(tf.tanh(tf.matmul(x, w1)), w2)
        b = tf.sigmoid(tf.matmul(x, w3)) * x
        return a + b

    return f, [_t(tf, np, rng, 64, 512)]


@workload("chain-200", "200 alternating 4x4 MatMul/Transpose nodes: per-node overhead of a "
          "program (divide the function time by 200)", inner=5)
def _chain(tf, keras, np, rng):
    w = _t(tf, np, rng, 4, 4)

    def f(x):
        for _ in range(100):
            x = tf.transpose(tf.matmul(x, w))
        return x

    return f, [_t(tf, np, rng, 4, 4)]


def _zoo_model(name, shape):
    def build(tf, keras, np, rng):
        from .. import zoo
        model = zoo.build(name, keras)
        return (lambda x: model(x, training=False)), [_t(tf, np, rng, *shape)]
    return build


workload("resnet50-b1", "Keras ResNet-50, batch 1, random weights")(
    _zoo_model("resnet50", (1, 224, 224, 3)))
workload("mobilenetv2-b1", "Keras MobileNetV2, batch 1, random weights")(
    _zoo_model("mobilenetv2", (1, 224, 224, 3)))
workload("transformer-b1", "Transformer encoder block, batch 1, seq 128, d_model 256")(
    _zoo_model("transformer", (1, 128, 256)))
# graph-heavy keras.applications models at batch 1 (issue 15): per-node overhead at scale
workload("nasnet-b1", "Keras NASNetMobile, batch 1, random weights (~1,900 nodes)")(
    _zoo_model("nasnetmobile", (1, 224, 224, 3)))
workload("inceptionv3-b1", "Keras InceptionV3, batch 1 at 299x299, random weights")(
    _zoo_model("inceptionv3", (1, 299, 299, 3)))
workload("resnet50v2-b1", "Keras ResNet50V2 (pre-activation), batch 1, random weights")(
    _zoo_model("resnet50v2", (1, 224, 224, 3)))


def _training_step(tf, model, opt, loss_fn):
    """One custom training step (tape, gradients, optimizer): it updates variables every call."""
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step.stateful = True
    return step


@workload("train-step", "MLP 784-512-512-10 training step (tape + SGD), batch 64", inner=2)
def _train_step(tf, keras, np, rng):
    from .. import zoo
    step = _training_step(tf, zoo.build("mlp", keras), keras.optimizers.SGD(1e-3),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    y = tf.constant(rng.integers(0, 10, 64).astype(np.int32))
    return step, [_t(tf, np, rng, 64, 784), y]


def _mnist_cnn(keras):
    """Issue 16's training script's model: Conv2D(32)-MaxPool-Conv2D(64)-MaxPool-Dropout-Dense."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    return keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"),
                             L.MaxPooling2D(), L.Conv2D(64, 3, activation="relu"),
                             L.MaxPooling2D(), L.Flatten(), L.Dropout(0.5),
                             L.Dense(10, activation="softmax")])


@workload("cnn-train-step", "the Keras training script's step: MNIST-shaped CNN (Conv2D 32, "
          "Conv2D 64, pools, dropout, dense), tape + Adam, batch 128", inner=1)
def _cnn_train_step(tf, keras, np, rng):
    return _classifier_step(tf, keras, np, rng, _mnist_cnn(keras), (128, 28, 28, 1))


def _classifier_step(tf, keras, np, rng, model, x_shape):
    """A 10-class softmax classifier's training step (tape + Adam) on random images."""
    step = _training_step(tf, model, keras.optimizers.Adam(1e-3),
                          keras.losses.SparseCategoricalCrossentropy())
    x = tf.constant(rng.random(x_shape).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, x_shape[0]).astype(np.int32))
    return step, [x, y]


def _mixed_bf16_cnn(keras):
    """Issue 16's mixed-precision model: a small CNN on 32x32x3 built under the
    "mixed_bfloat16" policy (bfloat16 compute, float32 variables); the policy is restored after."""
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        L = keras.layers
        return keras.Sequential([
            keras.Input((32, 32, 3)), L.Conv2D(32, 3, padding="same", activation="relu"),
            L.MaxPooling2D(), L.Conv2D(64, 3, padding="same", activation="relu"),
            L.MaxPooling2D(), L.Flatten(), L.Dense(128, activation="relu"),
            L.Dense(10), L.Activation("softmax", dtype="float32")])
    finally:
        keras.mixed_precision.set_global_policy(before)


@workload("bf16-train-step", "Keras mixed_bfloat16 small CNN on 32x32x3: training step "
          "(tape + Adam), batch 64", inner=1)
def _bf16_train_step(tf, keras, np, rng):
    return _classifier_step(tf, keras, np, rng, _mixed_bf16_cnn(keras), (64, 32, 32, 3))


@workload("bf16-predict", "the same mixed_bfloat16 CNN, forward, batch 256", inner=2)
def _bf16_predict(tf, keras, np, rng):
    model = _mixed_bf16_cnn(keras)

    def predict(x):
        return model(x, training=False)

    predict.compute_dtype = "bfloat16"   # outputs compared at bfloat16's tolerance
    return predict, [tf.constant(rng.random((256, 32, 32, 3)).astype(np.float32))]


def _text_classifier(keras):
    """The recurrent text classifier of issue 15: Embedding -> LSTM -> GRU -> Dense."""
    model = keras.Sequential([keras.Input((40,), dtype="int32"), keras.layers.Embedding(2000, 64),
                              keras.layers.LSTM(64, return_sequences=True), keras.layers.GRU(32),
                              keras.layers.Dense(1)])
    return model


@workload("rnn-predict", "Embedding-LSTM(64)-GRU(32)-Dense text classifier, batch 64 x 40 "
          "tokens, forward", inner=2)
def _rnn_predict(tf, keras, np, rng):
    model = _text_classifier(keras)
    x = tf.constant(rng.integers(0, 2000, (64, 40)).astype(np.int32))
    return (lambda x: model(x, training=False)), [x]


@workload("rnn-train-step", "the same classifier's training step (tape + Adam), batch 64",
          inner=1)
def _rnn_train_step(tf, keras, np, rng):
    step = _training_step(tf, _text_classifier(keras), keras.optimizers.Adam(1e-3),
                          keras.losses.BinaryCrossentropy(from_logits=True))
    x = tf.constant(rng.integers(0, 2000, (64, 40)).astype(np.int32))
    y = tf.constant(rng.integers(0, 2, (64, 1)).astype(np.float32))
    return step, [x, y]


def selected(only):
    if not only:
        return list(WORKLOADS)
    keys = [k.strip().lower() for k in only.split(",") if k.strip()]
    return [n for n in WORKLOADS if any(k in n.lower() for k in keys)]


def run_workload(tf, keras, np, name, args, progress):
    from . import arms as arms_mod, inprocess
    desc, build, inner, quick_inner = WORKLOADS[name]
    entry = {"name": name, "description": desc, "status": "ok", "error": None, "notes": [],
             "runs": [], "ratios": [], "numerics": [], "coverage": {}}
    try:
        fn, inputs = build(tf, keras, np, np.random.default_rng(0))
    except Exception as e:
        entry.update(status="error", error=f"{type(e).__name__}: {e}")
        return entry
    opts = inprocess.Options(repeats=args.repeats, warmup=args.warmup,
                             rewarm=0 if args.quick else 1, arms=args.arm_names, op_time_calls=0,
                             budget_s=args.budget, inner=quick_inner if args.quick else inner,
                             min_rounds=2 if args.quick else 3,
                             compute_dtype=getattr(fn, "compute_dtype", None))
    arms_mod.use_side("stock")
    entry.update(inprocess.compare_arms(tf, fn, inputs, opts, progress))
    entry.pop("top_ops", None)
    entry["inner"] = opts.inner
    if getattr(fn, "stateful", False):
        entry["numerics"] = []
        entry["notes"].append("updates variables every call: outputs are not compared")
    return entry


def parser():
    from .arms import ALL
    p = argparse.ArgumentParser(prog="tfb bench", description="standing A/B workloads")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds (2 once 8 s are spent), 1 warm-up, no re-warm after side "
                        "switches, fewer calls per sample")
    p.add_argument("--only", help="comma-separated substrings of workload names")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--repeats", type=int, help="timing rounds (default 15, --quick 3)")
    p.add_argument("--warmup", type=int, help="untimed calls per arm (default 2, --quick 1)")
    p.add_argument("--budget", type=float, help="seconds of timing rounds per workload")
    p.add_argument("--arms", default=",".join(a[0] for a in ALL),
                   help="comma-separated arms (default: all five)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--plot", metavar="PNG")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv=None):
    from .arms import ALL
    p = parser()
    args = p.parse_args(argv)
    if args.list:
        for n, (d, *_rest) in WORKLOADS.items():
            print(f"{n:16s} {d}")
        return 0
    names = selected(args.only)
    if not names:
        p.error(f"--only {args.only!r} matches no workload (see --list)")
    args.arm_names = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = set(args.arm_names) - {a[0] for a in ALL}
    if bad:
        p.error(f"unknown arms {sorted(bad)}; choose from {[a[0] for a in ALL]}")
    args.repeats = args.repeats or (3 if args.quick else 15)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.budget = args.budget or (8.0 if args.quick else None)

    from ..cli import progress_printer
    progress = progress_printer(args.quiet)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    progress("importing TensorFlow")
    import keras
    import numpy as np
    import tensorflow as tf

    from . import plot, report, schema
    load = schema.loadavg()
    workloads = []
    for name in names:
        t0 = time.perf_counter()
        progress(f"workload {name}")
        workloads.append(run_workload(tf, keras, np, name, args, progress))
        progress(f"workload {name} done in {time.perf_counter() - t0:.1f} s")
    doc = {"schema_version": schema.SCHEMA_VERSION, "tool": "tfb bench", "created": schema.now(),
           "environment": schema.environment(load),
           "settings": {"quick": args.quick, "repeats": args.repeats, "warmup": args.warmup,
                        "budget_s": args.budget, "arms": args.arm_names},
           "workloads": workloads}
    schema.validate_bench(doc)
    print(report.bench_text(doc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        progress(f"wrote {args.json}")
    if args.plot:
        plot.bench(doc, args.plot)
        progress(f"wrote {args.plot}")
    mismatch = any(n["verdict"] != "ok" for w in workloads for n in w["numerics"]
                   if n["role"] == "backend")
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
