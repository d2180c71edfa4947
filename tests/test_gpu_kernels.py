"""GPU kernels against the CPU device, one body for both (as CuPy's tests run one body against
numpy and CuPy): each case of integration/gpu/cases.py runs through the device contract on
"cpu" and "cuda" and must agree within the numerics contract. The CPU side is computed here, or
read from TFB_GPU_DATA (the directory integration/gpu/make_refs.py writes) on a GPU machine that
should not spend its time compiling CPU kernels. With that directory, the op table's own samples
(tests/optable, recorded at kernel level where TensorFlow runs) run on every op and dtype the
GPU registers, against our CPU kernels' outputs. Skips where CuPy or a GPU is absent."""
import json
import os

import numpy as np
import pytest

from integration.gpu.cases import cases, check, run_case
from tf_backend import devices

CASES = cases()


def _probe():
    try:
        d = devices.get("cuda")
        d.load()
        return d, None
    except devices.DeviceError as e:
        return None, str(e)


GPU, WHY = _probe()
if GPU is None:
    pytest.skip(f"no CUDA device here ({WHY})", allow_module_level=True)


DATA = os.environ.get("TFB_GPU_DATA")
REFS = dict(np.load(os.path.join(DATA, "kernel_refs.npz"))) if DATA else {}


def _optable():
    if not DATA or not os.path.exists(os.path.join(DATA, "optable.json")):
        return [], {}
    with open(os.path.join(DATA, "optable.json")) as f:
        return json.load(f), np.load(os.path.join(DATA, "optable.npz"))


OPTABLE, ARRAYS = _optable()


@pytest.mark.parametrize("cid,op,attrs,inputs", CASES, ids=[c[0] for c in CASES])
def test_gpu_matches_cpu(cid, op, attrs, inputs):
    gpu = GPU
    if cid in REFS:
        want = REFS[cid]
    else:
        cpu = devices.get("cpu")
        cpu.load()
        want = run_case(cpu, op, attrs, inputs)[0]
    got = run_case(gpu, op, attrs, inputs)[0]
    err = check(op, attrs, inputs, got, want)
    assert err is None, err


@pytest.mark.parametrize("i", range(len(OPTABLE)), ids=[r["id"] for r in OPTABLE])
def test_optable_on_gpu_matches_cpu(i):
    from shape_fns import Unsupported
    from tf_backend import numerics
    from tf_backend.runtime import format as fmt
    r = OPTABLE[i]
    attrs = {k: fmt.decode_attr(v) for k, v in r["attrs"].items()}
    if GPU.lookup(r["op"], attrs)[0] is None:
        pytest.skip(f"{r['op']} {GPU.lookup(r['op'], attrs)[1]} not on the GPU")
    inputs = [ARRAYS[f"{i}_in{j}"] for j in range(r["n_in"])]
    want = [ARRAYS[f"{i}_out{j}"] for j in range(r["n_out"])]
    try:
        got = run_case(GPU, r["op"], attrs, inputs)
    except Unsupported as e:
        pytest.skip(f"the GPU kernel declines: {e.reason}")
    for g, w in zip(got, want):
        err = numerics.compare(g, w, r["kind"], r["rlen"])
        assert err is None, err
