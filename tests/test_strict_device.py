"""Programs on a device whose memory the host cannot touch (tests/strict_device.py): the
exported zoo and test_export's programs run there with stock results, host inputs reach kernels
as host arrays and nothing else leaves the device; recorded runs replay."""
import numpy as np
import pytest

import kernels
import shape_fns
import tf_backend
from tf_backend import numerics, runtime, zoo
from tf_backend.runtime import ProgramRunError

from tf_backend.devices import Capabilities

from .strict_device import CPU, HostAccess, StrictDevice
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


# tf.function programs on a device (tf_backend.enable(device=...)): values live on the device,
# inputs copied in and outputs out at each call, TensorFlow's nodes (variables, what the device
# has no kernel for) copy their device inputs out and their outputs in.

def _zoo_functions(tf, names, batch):
    import keras
    out = []
    for name in names:
        m = zoo.build(name, keras)
        x, _ = zoo.sample_batch(m, batch)
        fn = tf.function(lambda v, m=m: m(v, training=False))
        out.append((name, fn, x, fn(x).numpy()))      # stock: the backend is off here
    return out


def test_zoo_functions_run_on_the_strict_device_with_stock_results(tf):
    assert tf_backend.mode() == "off"
    funcs = _zoo_functions(tf, list(SMALL), batch=4)
    dev = StrictDevice()
    tf_backend.reset_stats()
    with tf_backend.enabled(device=dev):
        for name, fn, x, ref in funcs:
            for _ in range(2):
                out = fn(x)
                assert isinstance(out, tf.Tensor)
                assert numerics.compare(out.numpy(), ref, "reduction", SMALL[name]) is None, name
    assert tf_backend.mode() == "off"
    ops = tf_backend.stats()["ops"]
    assert ops["MatMul"]["backend"] >= 2 and ops["Conv2D"]["backend"] >= 2
    assert "ReadVariableOp" in ops       # the weights: TensorFlow's reads, copied in
    assert dev.counts["allocate"] > 0 and dev.counts["copy_in"] > 0 and dev.counts["copy_out"] > 0


def test_control_flow_views_and_dynamic_shapes_on_the_strict_device(tf):
    w = tf.constant(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec((None, 8), tf.float32)])
    def f(x):
        a = tf.matmul(x, w)
        y = tf.cond(tf.reduce_sum(a) > 0, lambda: a * 2.0, lambda: a - 1.0)
        i, s = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 1.5 + 1.0),
                             (tf.constant(0), x))
        k = tf.switch_case(tf.cast(tf.reduce_max(x) > 1.0, tf.int32),
                           [lambda: tf.reduce_mean(a, axis=0), lambda: tf.reduce_max(a, axis=0)])
        return tf.exp(tf.reshape(a, [-1])), y, s, tf.pad(a, [[1, 0], [0, 2]]), k, i

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 8)).astype(np.float32) * sc for n, sc in
          ((8, 1.0), (3, -1.0), (5, 0.1))]
    refs = [[r.numpy() for r in f(x)] for x in xs]
    dev = StrictDevice()
    with tf_backend.enabled(device=dev):
        for x, ref in zip(xs, refs):
            got = f(x)
            for g, r in zip(got, ref):
                assert g.dtype == r.dtype and g.shape == r.shape
                assert numerics.compare(g.numpy(), r, "reduction", 8) is None


def test_training_step_on_the_strict_device_matches_stock(tf):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((6, 16)).astype(np.float32) * 0.3, np.zeros(16, np.float32),
            rng.standard_normal((16, 3)).astype(np.float32) * 0.3]
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)

    def train(device):
        vs = [tf.Variable(v) for v in init]

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, vs[0]) + vs[1])
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    y, tf.matmul(h, vs[2])))
            for v, g in zip(vs, tape.gradient(loss, vs)):
                v.assign_sub(0.1 * g)
            return loss
        if device is None:
            losses = [step(x, y).numpy() for _ in range(5)]
        else:
            with tf_backend.enabled(device=device):
                losses = [step(x, y).numpy() for _ in range(5)]
        return losses, [v.numpy() for v in vs]

    ref_losses, ref_w = train(None)
    tf_backend.reset_stats()
    losses, w = train(StrictDevice())
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(w, ref_w):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    ops = tf_backend.stats()["ops"]
    assert ops["AssignSubVariableOp"]["fallback"] == 15     # TensorFlow's, in program order
    assert ops["SparseSoftmaxCrossEntropyWithLogits"]["backend"] == 5


class _NoExpDevice(StrictDevice):
    """No Exp kernel; its Log kernel declines every input at run time."""

    def lookup(self, op, attrs):
        if op == "Exp":
            return None, "not on this device"
        kdef, why = super().lookup(op, attrs)
        if op == "Log" and kdef is not None:
            def decline(inputs, outputs, attrs):
                raise shape_fns.Unsupported("test: declined")
            kdef.fn = decline
        return kdef, why


def test_what_the_device_cannot_run_goes_to_tensorflow_counted(tf):
    @tf.function
    def f(x):
        return tf.math.log(tf.exp(x) + 1.0) * 2.0

    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    ref = f(x).numpy()
    tf_backend.reset_stats()
    dev = _NoExpDevice()
    with tf_backend.enabled(device=dev):
        got = f(x).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    ops = tf_backend.stats()["ops"]
    assert ops["Exp"]["reasons"] == {"device:strict:not on this device": 1}
    assert ops["Log"]["reasons"] == {"runtime:test: declined": 1}
    assert ops["AddV2"]["backend"] == 1 and ops["Mul"]["backend"] == 1


def test_errors_on_the_strict_device_are_stock_classes(tf):
    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.float32)] * 2)
    def f(a, b):
        return tf.matmul(a, b) + 1.0

    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    with tf_backend.enabled(device=StrictDevice()):
        np.testing.assert_array_equal(f(a, np.ones((3, 2), np.float32)).numpy(),
                                      np.full((2, 2), 4.0, np.float32))
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"(?s)op MatMul; inputs: float32\[2, 3\], float32\[4, 5\]"
                                 r".*Matrix size-incompatible"):
            f(a, b)


def test_enable_with_a_device_by_name_and_errors(tf):
    from tf_backend import devices, functions
    devices.register("strict-test", lambda: _Named())
    with tf_backend.enabled(device="strict-test"):
        assert functions.DEVICE.name == "strict-test"
        with tf_backend.enabled():
            assert functions.DEVICE is None
        assert functions.DEVICE.name == "strict-test"
        f = tf.function(lambda v: v * 3.0)
        np.testing.assert_array_equal(f(np.ones(3, np.float32)).numpy(), [3.0, 3.0, 3.0])
    assert functions.DEVICE is None
    with pytest.raises(devices.DeviceError, match="unknown device 'nope'"):
        tf_backend.enable(device="nope")
    assert tf_backend.mode() == "off"


class _Named(StrictDevice):
    name = "strict-test"


@pytest.mark.slow
def test_big_zoo_functions_run_on_the_strict_device(tf):
    from .test_export import BIG
    names = ["resnet50", "mobilenetv2", "transformer"]
    funcs = _zoo_functions(tf, names, batch=1)
    with tf_backend.enabled(device=StrictDevice()):
        for name, fn, x, ref in funcs:
            err = numerics.compare(fn(x).numpy(), ref, "reduction", BIG[name])
            assert err is None, (name, err)


class _NoBoolDevice(StrictDevice):
    """No bool buffers: predicates stay TensorFlow's values, read on the host as they are."""
    capabilities = Capabilities(tuple(d for d in CPU if d != "bool"), host_memory=False)


def test_control_flow_with_predicates_the_device_cannot_hold(tf):
    @tf.function
    def f(x):
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
        _, s = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 1.5), (0, y))
        return s

    xs = [np.ones(4, np.float32), -np.ones(4, np.float32)]
    refs = [f(x).numpy() for x in xs]
    tf_backend.reset_stats()
    with tf_backend.enabled(device=_NoBoolDevice()):
        for x, ref in zip(xs, refs):
            np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-6)
    reasons = tf_backend.stats()["ops"]["Greater"]["reasons"]
    assert reasons == {"device:strict:dtype": 2}, reasons
