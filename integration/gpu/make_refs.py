"""Prepare a GPU machine's run here, where TensorFlow is: the CPU device's results for every
kernel case, and ResNet-50 (keras.applications, random weights) exported with float16 weights
(under 64 MiB for the trip) with our CPU program's outputs on fixed inputs.

    python integration/gpu/make_refs.py OUTDIR
writes OUTDIR/kernel_refs.npz, OUTDIR/optable.{json,npz}, OUTDIR/resnet50.tfbp,
OUTDIR/resnet50_refs.npz.

The op table's records: every op-table case (tests/optable) runs here with the backend on, as
tests/test_ops.py runs it against stock; each call of the case's own op on our CPU kernel is
recorded as (op, canonical attrs, inputs, our outputs), up to RECORDS per case and dtype, so a
GPU machine checks its kernels on the op table's samples against the CPU's results.
"""
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
# eager view ops (Reshape, Squeeze, Split...) on our kernels, so that their calls are recorded
# (by default TensorFlow's own op runs them: tf_backend/dispatch.py, EAGER_VIEW)
os.environ.setdefault("TF_BACKEND_EAGER_VIEWS", "ours")


def inputs(batch, dtype=np.float32):
    """The fixed ResNet-50 input both machines generate (numpy's PCG64 is portable)."""
    return (np.random.default_rng(batch).random((batch, 224, 224, 3), np.float32) * 2 - 1
            ).astype(dtype)


def main(out):
    os.makedirs(out, exist_ok=True)
    from integration.gpu.cases import cases, run_case
    from tf_backend import devices
    cpu = devices.get("cpu")
    cpu.load()
    refs = {cid: run_case(cpu, op, attrs, ins)[0] for cid, op, attrs, ins in cases()}
    np.savez(os.path.join(out, "kernel_refs.npz"), **refs)
    print(f"{len(refs)} kernel cases", flush=True)

    import tensorflow as tf
    import keras
    import tf_backend
    from tf_backend import runtime
    n = record_optable(out)
    print(f"{n} op-table kernel calls recorded", flush=True)
    m = keras.applications.ResNet50(weights=None)
    path = os.path.join(out, "resnet50.tfbp")
    tf_backend.export(m, [tf.TensorSpec((None, 224, 224, 3), tf.float32)], path,
                      weights_dtype="float16")
    print(f"exported {os.path.getsize(path) / 2**20:.1f} MiB", flush=True)
    r = {}
    p32 = runtime.load(path)
    for b in (1, 8):
        t = time.perf_counter()
        r[f"fp32_b{b}"] = p32(inputs(b))[0]
        print(f"cpu fp32 b{b}: {time.perf_counter() - t:.2f} s", flush=True)
    p16 = runtime.load(path, dtype="float16")
    r["fp16_b1"] = p16(inputs(1, np.float16))[0]
    np.savez(os.path.join(out, "resnet50_refs.npz"), **r)



RECORDS = 6
MAX_ELEMENTS = 1 << 14
try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None


def record_optable(out):
    """Run the op table with the backend on and record its ops' CPU kernel calls."""
    import json

    import kernels
    from tests import harness
    from tests.optable import all_cases
    from tf_backend.runtime import format as fmt
    kernels.load("cpu")
    index, arrays, current = [], {}, {}

    def wrap(kdef):
        fn = kdef.fn

        def recorded(inputs, outputs, attrs):
            fn(inputs, outputs, attrs)
            c = current.get("case")
            if c is None or kdef.op != c["op"] or current["n"] >= RECORDS:
                return
            every = list(inputs) + list(outputs)
            if any(getattr(a, "size", 0) > MAX_ELEMENTS for a in every):
                return
            if any(getattr(a, "dtype", None) == BF16 for a in every):
                return      # .npz keeps no bfloat16 (ml_dtypes); no GPU kernel takes it yet
            i = len(index)
            current["n"] += 1
            for j, a in enumerate(inputs):
                arrays[f"{i}_in{j}"] = np.array(a)
            for j, o in enumerate(outputs):
                arrays[f"{i}_out{j}"] = np.array(o)
            index.append({"id": f"{c['id']}-{current['n']}", "op": kdef.op,
                          "attrs": {k: fmt.encode_attr(v) for k, v in attrs.items()},
                          "n_in": len(inputs), "n_out": len(outputs), "kind": c["kind"],
                          "rlen": current["rlen"]})
        recorded.__qualname__ = getattr(fn, "__qualname__", kdef.op)
        return recorded

    for (op, dev), defs in kernels.KERNELS.items():
        if dev == "cpu":
            for k in defs:
                k.fn = wrap(k)
    for case in all_cases():
        if case.skip:
            continue
        for dt in case.dtypes:
            rng = np.random.default_rng(1234)
            current.update(case={"id": f"{case.name}-{dt}", "op": case.op, "kind": case.kind},
                           n=0)
            for args in case.samples(np.dtype(dt), rng):
                current["rlen"] = int(case.reduction_len(args)) if case.reduction_len else 1
                try:
                    harness.run_ours(case.fn, args)
                except Exception:  # noqa: BLE001 - samples stock refuses on this CPU
                    pass
    current["case"] = None
    np.savez_compressed(os.path.join(out, "optable.npz"), **arrays)
    with open(os.path.join(out, "optable.json"), "w") as f:
        json.dump(index, f)
    return len(index)


if __name__ == "__main__":
    main(sys.argv[1])
