"""GPU kernels against the CPU device, one body for both (as CuPy's tests run one body against
numpy and CuPy): each case of integration/gpu/cases.py runs through the device contract on
"cpu" and "cuda" and must agree within the numerics contract. The CPU side is computed here, or
read from TFB_GPU_REFS (an .npz written by integration/gpu/make_refs.py) on a GPU machine that
should not spend its time compiling CPU kernels. Skips where CuPy or a GPU is absent."""
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


def _load_refs():
    path = os.environ.get("TFB_GPU_REFS")
    return dict(np.load(path)) if path else {}


REFS = _load_refs()


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
