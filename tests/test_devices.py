"""The device contract, the CPU device, entry-point discovery and the example numpy device."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tf_backend.devices as devices
from tf_backend.runtime import format as fmt

from . import notf

ROOT = notf.ROOT


def test_cpu_device_implements_the_contract():
    cpu = devices.get("cpu")
    assert devices.check(cpu, "test") is cpu and cpu is devices.get("cpu") is devices.host()
    assert "cpu" in devices.available()
    caps = cpu.capabilities.as_dict()
    assert caps["supports_programs"] and caps["host_memory"] and "float32" in caps["dtypes"]
    cpu.load()
    buf = cpu.allocate((64, 32), np.float32)
    assert buf.shape == (64, 32) and buf.dtype == np.float32 and buf.ctypes.data % 64 == 0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp = cpu.copy_in(x)
    assert np.shares_memory(inp, x) and not inp.flags.writeable and x.flags.writeable
    kdef, reason = cpu.lookup("AddV2", {"T": np.dtype(np.float32)})
    assert reason is None and kdef.name.startswith("cpu:")
    out = cpu.allocate((2, 3), np.float32)
    kdef.fn([inp, inp], [out], {"T": np.dtype(np.float32)})
    cpu.synchronize()
    res = cpu.copy_out(out, owned=True)
    np.testing.assert_array_equal(res, 2 * x)
    assert res is out and cpu.copy_out(out) is not out   # borrowed buffers are copied
    assert not np.shares_memory(cpu.copy_out(inp), x)   # shared memory is copied out
    assert cpu.lookup("NoSuchOp", {}) == (None, "not_registered")
    assert cpu.lookup("AddV2", {"T": np.dtype("complex64")})[1].startswith("dtype:")


def test_host_runtime_resolves_its_device_once():
    from tf_backend import dispatch
    assert dispatch.HOST is devices.get("cpu")


def test_registry_errors_are_clear():
    with pytest.raises(devices.DeviceError, match="unknown device 'nope'.*cpu"):
        devices.get("nope")

    class Broken:
        name = "broken"

    class Misnamed(devices.Device):
        name = "other"
        capabilities = devices.Capabilities(("float32",))
    try:
        devices.register("broken", Broken)
        with pytest.raises(devices.DeviceError, match="missing .*allocate"):
            devices.get("broken")
        devices.register("misnamed", Misnamed)
        with pytest.raises(devices.DeviceError, match="calls itself 'other'"):
            devices.get("misnamed")
    finally:
        devices._factories.pop("broken", None)
        devices._factories.pop("misnamed", None)


def test_setup_registers_the_cpu_device_entry_point():
    src = open(os.path.join(ROOT, "setup.py")).read()
    assert '"tf_backend.devices": ["cpu = tf_backend.devices.cpu:CpuDevice",' in src
    assert '"cuda = tf_backend.devices.cuda:CudaDevice"]' in src


def tiny_program(path, ops=("MatMul", "BiasAdd", "Relu")):
    """x[2,3] @ w[3,4] + b -> relu (-> extra ops), written by hand: no TensorFlow involved."""
    f32 = {"dtype": "float32"}
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [
        {"name": "mm", "op": ops[0], "kind": "kernel", "inputs": [0, 1], "outputs": [3],
         "attrs": {"T": f32, "transpose_a": False, "transpose_b": False},
         "out_specs": [["float32", [2, 4]]]},
        {"name": "bias", "op": ops[1], "kind": "kernel", "inputs": [3, 2], "outputs": [4],
         "attrs": {"T": f32, "data_format": "NHWC"}, "out_specs": [["float32", [2, 4]]]},
        {"name": "act", "op": ops[2], "kind": "kernel", "inputs": [4], "outputs": [5],
         "attrs": {"T": f32}, "out_specs": None},
    ]
    header = {"producer": {"tf_backend": "test"}, "name": "tiny", "n_slots": 6,
              "inputs": [{"slot": 0, "name": "x", "dtype": "float32", "shape": [2, 3]}],
              "outputs": [{"slot": 5, "name": "y"}],
              "slot_specs": [[s, "float32", sh] for s, sh in
                             ((0, [2, 3]), (1, [3, 4]), (2, [4]), (3, [2, 4]), (4, [2, 4]),
                              (5, [2, 4]))],
              "consts": [[1, "weights/0.npy"], [2, "weights/1.npy"]], "nodes": nodes}
    fmt.write(path, header, {"weights/0.npy": w, "weights/1.npy": b})
    return w, b


PLUGIN_RUN = '''
import json, numpy as np
import tf_backend.devices as devices, tf_backend.runtime as runtime
names = devices.available()
dev = devices.get("numpy")
x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
out = {"available": names, "class": type(dev).__module__ + "." + type(dev).__name__}
for d in ("numpy", "cpu"):
    p = runtime.load(PATH, device=d)
    out[d] = p([x])[0].tolist()
out["x"] = x.tolist()
mlp = runtime.load(MLP, device="numpy")
out["mlp"] = mlp([np.load(MLP + ".x.npy")])[0].tolist()
try:
    runtime.load(BAD, device="numpy")
except devices.DeviceError as e:
    out["error"] = str(e)
print(json.dumps(out))
'''


def test_example_device_is_discovered_through_its_entry_point(tf, tmp_path):
    src, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "integration", "numpy_device"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--no-cache-dir", "--target", str(target),
                        str(src)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (target / "tfb_numpy_device-0.1.0.dist-info" / "entry_points.txt").exists()
    w, b = tiny_program(str(tmp_path / "tiny.tfbp"))
    tiny_program(str(tmp_path / "bad.tfbp"), ops=("MatMul", "BiasAdd", "Softplus"))
    import keras
    import tf_backend
    from tf_backend import numerics, zoo
    model = zoo.build("small_mlp", keras)   # MatMul, BiasAdd (-> AddV2), Relu, Tanh
    xm, _ = zoo.sample_batch(model, 4)
    mlp = str(tmp_path / "mlp.tfbp")
    tf_backend.export(model, [xm], mlp)
    np.save(mlp + ".x.npy", xm)
    code = PLUGIN_RUN.replace("PATH", repr(str(tmp_path / "tiny.tfbp"))).replace(
        "BAD", repr(str(tmp_path / "bad.tfbp"))).replace("MLP", repr(mlp))
    out = notf.run(code, extra_path=[str(target)])
    assert "numpy" in out["available"] and "cpu" in out["available"]
    assert out["class"] == "tfb_numpy_device.NumpyDevice"
    x = np.asarray(out["x"], np.float32)
    ref = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(np.asarray(out["numpy"], np.float32), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out["cpu"], np.float32), ref, rtol=1e-6, atol=1e-6)
    assert "no kernel for Softplus" in out["error"] and "bad.tfbp" in out["error"]
    ref = model(xm, training=False).numpy()
    assert numerics.compare(np.asarray(out["mlp"], np.float32), ref, "reduction", 32) is None
    assert "numpy" not in devices.available()   # this process is untouched


def test_host_runtime_does_without_the_libraries_a_device_lacks(tf, monkeypatch):
    # Device.library: no "fusion" -> no fused nodes; no "loops" -> no compiled regions/loops;
    # programs still run with stock results
    import tf_backend
    from tf_backend import functions
    assert devices.get("cpu").library("fusion") is not None
    assert devices.Device().library("fusion") is None
    monkeypatch.setattr(devices, "library", lambda name: None)

    @tf.function
    def f(x):
        y = tf.exp(x) * 2.0 + 1.0
        return tf.reduce_sum(tf.tanh(y) - x, axis=1)

    x = np.linspace(-1, 1, 4000, dtype=np.float32).reshape(40, 100)
    ref = f(x).numpy()
    functions.clear_cache()
    with tf_backend.enabled():
        np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-6)
        progs = [c.program for c in functions._cache.values() if c.program is not None]
    functions.clear_cache()
    assert progs and not any(n.kind in ("fused", "region") for p in progs for n in p.nodes)
