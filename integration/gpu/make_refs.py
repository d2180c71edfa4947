"""Prepare a GPU machine's run here, where TensorFlow is: the CPU device's results for every
kernel case, and ResNet-50 (keras.applications, random weights) exported with float16 weights
(under 64 MiB for the trip) with our CPU program's outputs on fixed inputs.

    python integration/gpu/make_refs.py OUTDIR
writes OUTDIR/kernel_refs.npz, OUTDIR/resnet50.tfbp, OUTDIR/resnet50_refs.npz.
"""
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


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


if __name__ == "__main__":
    main(sys.argv[1])
