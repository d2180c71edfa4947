"""Programs on a device whose memory the host cannot touch (tests/strict_device.py): the
exported zoo and test_export's programs run there with stock results, host inputs reach kernels
as host arrays and nothing else leaves the device; recorded runs replay."""
import numpy as np
import pytest

import kernels
import tf_backend
from tf_backend import numerics, runtime, zoo
from tf_backend.runtime import ProgramRunError

from .strict_device import HostAccess, StrictDevice
from .test_export import SMALL, _export_zoo


@pytest.fixture(scope="module")
def zoo_files(tf, tmp_path_factory):
    d = tmp_path_factory.mktemp("strict")
    _export_zoo(tf, list(SMALL), d, batch=4)
    return d


@pytest.mark.parametrize("graphs", [False, True], ids=["runs", "recorded"])
def test_zoo_runs_on_the_strict_device_with_stock_results(zoo_files, graphs):
    dev = StrictDevice(graphs=graphs)
    for name, rlen in SMALL.items():
        p = runtime.load(str(zoo_files / f"{name}.tfbp"), device=dev)
        x = np.load(zoo_files / f"{name}.x.npy")
        ref = np.load(zoo_files / f"{name}.ref.npy")
        for k in range(3):
            out = p(x)
            assert type(out[0]) is np.ndarray
            assert numerics.compare(out[0], ref, "reduction", rlen) is None, (name, k)
    assert dev.counts["allocate"] > 0 and dev.counts["copy_out"] > 0
    if graphs:      # the second call records, the third replays
        assert dev.counts["record"] == len(SMALL) and dev.counts["replay"] == 2 * len(SMALL)


def test_recorded_runs_take_new_inputs(tf, tmp_path):
    import keras
    path = str(tmp_path / "mlp.tfbp")
    tf_backend.export(zoo.build("small_mlp", keras), [tf.TensorSpec((None, 20), tf.float32)],
                      path)
    dev = StrictDevice(graphs=True)
    p, cpu = runtime.load(path, device=dev), runtime.load(path)
    x = np.random.default_rng(0).standard_normal((4, 20)).astype(np.float32)
    for k in range(4):
        xk = x * np.float32(1 + k)
        np.testing.assert_allclose(p(xk)[0], cpu(xk)[0], rtol=1e-5, atol=1e-6)
    x2 = np.concatenate([x, x])          # another signature: runs, then records its own
    for _ in range(3):
        np.testing.assert_allclose(p(x2)[0], cpu(x2)[0], rtol=1e-5, atol=1e-6)
    assert dev.counts["record"] == 2


def test_export_programs_run_on_the_strict_device(tf, tmp_path):
    w = tf.constant(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))

    @tf.function
    def views(x):
        a = tf.matmul(x, w)
        c = tf.exp(tf.reshape(a, [-1]))
        return c, a * 3.0, tf.reduce_sum(a, axis=1), tf.pad(a, [[1, 0], [0, 2]])

    x = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    tf_backend.export(views, [x], str(tmp_path / "v.tfbp"))
    got = runtime.load(str(tmp_path / "v.tfbp"), device=StrictDevice())(x)
    for g, r in zip(got, views(x)):
        assert numerics.compare(g, r.numpy(), "reduction", 8) is None

    # a dynamic shape: Reshape's shape fn reads its (host) shape input on every call
    path = str(tmp_path / "r.tfbp")
    tf_backend.export(lambda v: tf.reshape(v, [-1, 3]) * 2.0, [((None,), np.float32)], path)
    p = runtime.load(path, device=StrictDevice())
    np.testing.assert_array_equal(p(np.arange(6, dtype=np.float32))[0],
                                  np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    with pytest.raises(ProgramRunError, match=r"op Reshape; inputs: float32\[4\]"):
        p(np.arange(4, dtype=np.float32))


def test_an_undeclared_host_input_fails_on_the_strict_device(tf, tmp_path, monkeypatch):
    # a dynamic length: Pad's shape fn reads the paddings on every call, which it may only
    # where they are declared a host input
    path = str(tmp_path / "pad.tfbp")
    tf_backend.export(lambda v: tf.pad(v, [[1, 1]]) + 1.0, [((None,), np.float32)], path)
    np.testing.assert_array_equal(runtime.load(path, device=StrictDevice())(
        np.ones(4, np.float32))[0], [1, 2, 2, 2, 2, 1])
    monkeypatch.delitem(kernels.HOST_INPUTS, "Pad")
    with pytest.raises(ProgramRunError, match="op Pad"):
        runtime.load(path, device=StrictDevice())(np.ones(4, np.float32))


def test_weights_stored_in_half_and_programs_run_in_half(tf, tmp_path):
    import keras
    m = zoo.build("small_cnn", keras)
    x, _ = zoo.sample_batch(m, 2)
    full, half = str(tmp_path / "full.tfbp"), str(tmp_path / "half.tfbp")
    tf_backend.export(m, [tf.TensorSpec(x.shape, tf.float32)], full)
    h = tf_backend.export(m, [tf.TensorSpec(x.shape, tf.float32)], half, weights_dtype="float16")
    assert h["weights_dtype"] == "float16"
    import zipfile

    def weight_bytes(path):
        return sum(i.file_size for i in zipfile.ZipFile(path).infolist()
                   if i.filename.startswith("weights/"))
    assert weight_bytes(half) < 0.6 * weight_bytes(full)
    ref = m(x, training=False).numpy()
    p = runtime.load(half)
    assert p.input_specs[0].dtype == np.float32
    # rounded weights: within float16's precision of stock
    np.testing.assert_allclose(p(x)[0], ref, rtol=2e-2, atol=2e-3)
    p16 = runtime.load(full, dtype="float16")
    assert p16.input_specs[0].dtype == np.float16
    out = p16(x.astype(np.float16))[0]
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=5e-2, atol=5e-3)
    with pytest.raises(runtime.ExportError, match="float16 or bfloat16"):
        tf_backend.export(m, [tf.TensorSpec(x.shape, tf.float32)], half, weights_dtype="int8")


class _FoldingDevice(StrictDevice):
    """The strict device running the CUDA device's affine folding at load (a pass over data,
    checked here on CPU kernels)."""

    def prepare(self, program):
        from tf_backend.devices import cuda_passes
        cuda_passes.fold_affine(program, self)
        program.finalize()
        return super().prepare(program)


def test_batch_norm_folded_into_products_keeps_stock_results(zoo_files):
    dev = _FoldingDevice()
    for name, rlen in SMALL.items():
        p = runtime.load(str(zoo_files / f"{name}.tfbp"), device=dev)
        plain = runtime.load(str(zoo_files / f"{name}.tfbp"), device=StrictDevice())
        x = np.load(zoo_files / f"{name}.x.npy")
        ref = np.load(zoo_files / f"{name}.ref.npy")
        assert numerics.compare(p(x)[0], ref, "reduction", rlen) is None, name
        if name != "small_mlp":     # biases, and in resnet_block batch norms, after a Conv2D
            assert any("fold_affine" in n for n in p.program.notes), p.program.notes
        if name == "resnet_block":
            assert len(p._steps) < len(plain._steps)


@pytest.mark.slow
def test_big_zoo_runs_on_the_strict_device(tf, tmp_path):
    from .test_export import BIG
    names = ["resnet50", "mobilenetv2", "transformer"]
    _export_zoo(tf, names, tmp_path, batch=1)
    for name in names:
        p = runtime.load(str(tmp_path / f"{name}.tfbp"), device=StrictDevice())
        out = p(np.load(tmp_path / f"{name}.x.npy"))[0]
        err = numerics.compare(out, np.load(tmp_path / f"{name}.ref.npy"), "reduction", BIG[name])
        assert err is None, (name, err)
