"""Float32 convolutions where the float32 tiles are not the rule (no AVX-512F): conv_ops picks
a Conv2D's kernel (im2col + BLAS, Winograd, the tiles for few input channels) and a first
layer's filter gradient (the tiles' few-row kernel or its own) by measurement per shape
(kernels/cpu/variants.py). Each candidate, forced, against stock TensorFlow; the measurement
keeps one of the candidates and runs it from then on."""
import numpy as np
import pytest

from kernels.cpu import bf16_gemm, conv_ops, variants, winograd
from shape_fns.host import cpu_flags
from tests.test_f32_tiles import _attrs, _close, spy  # noqa: F401 - spy is a fixture

pytestmark = pytest.mark.skipif(
    "avx512f" in cpu_flags(),
    reason="this CPU has AVX-512F: its float32 convolutions follow the tiles' rule (test_f32_tiles)")


def _geom(xs, fs, stride, pad):
    return conv_ops._geometry(xs, fs, _attrs(stride, pad), "Conv2D", np.dtype(np.float32))[2]


def _force(monkeypatch, family, xs, fs, g, choice):
    monkeypatch.setitem(variants._choices, conv_ops.measured_name(family, xs, fs, g), choice)


@pytest.fixture
def wino_spy(monkeypatch):
    ran = []
    real = winograd.conv3x3

    def wrap(*a, **k):
        ok = real(*a, **k)
        if ok:
            ran.append("winograd")
        return ok
    monkeypatch.setattr(winograd, "conv3x3", wrap)
    return ran


@pytest.mark.parametrize("xs,fs,stride,pad,choice,ran", [
    ((128, 28, 28, 1), (3, 3, 1, 32), 1, "VALID", "tiles", ["conv2d_into"]),   # MNIST's first
    ((128, 28, 28, 1), (3, 3, 1, 32), 1, "VALID", "im2col", []),
    ((16, 13, 13, 32), (3, 3, 32, 64), 1, "VALID", "winograd", ["winograd"]),  # MNIST's second
    ((16, 13, 13, 32), (3, 3, 32, 64), 1, "VALID", "im2col", []),
])
def test_forced_forward_matches_stock(tf, monkeypatch, spy, wino_spy, xs, fs, stride, pad,
                                      choice, ran):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    f = rng.standard_normal(fs).astype(np.float32)
    g = _geom(xs, fs, stride, pad)
    _force(monkeypatch, "conv_f32_forward", xs, fs, g, choice)
    ref = tf.nn.conv2d(x, f, stride, pad).numpy()
    out = np.full(ref.shape, np.nan, np.float32)
    conv_ops.conv2d([x, f], [out], _attrs(stride, pad))
    assert spy + wino_spy == ran
    _close(out, ref, fs[0] * fs[1] * fs[2])


def test_forced_tiles_fuse_bias_and_relu(tf, monkeypatch, spy):
    xs, fs = (32, 28, 28, 1), (3, 3, 1, 32)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(np.float32)
    f = rng.standard_normal(fs).astype(np.float32)
    b = rng.standard_normal(fs[3]).astype(np.float32)
    g = _geom(xs, fs, 1, "VALID")
    ref = tf.nn.relu(tf.nn.conv2d(x, f, 1, "VALID") + b).numpy()
    out = np.full(ref.shape, np.nan, np.float32)
    _force(monkeypatch, "conv_f32_forward", xs, fs, g, "im2col")
    assert not conv_ops.conv_bias_relu([x, f], b, out, _attrs(1, "VALID"))   # ops in turn
    _force(monkeypatch, "conv_f32_forward", xs, fs, g, "tiles")
    assert conv_ops.conv_bias_relu([x, f], b, out, _attrs(1, "VALID"))
    assert spy == ["conv2d_into"]
    _close(out, ref, fs[0] * fs[1] * fs[2])


@pytest.mark.parametrize("xs,fs,pad,choice,ran", [
    ((128, 28, 28, 1), (3, 3, 1, 32), "VALID", "tiles", ["backprop_filter_few_into"]),
    ((128, 28, 28, 1), (3, 3, 1, 32), "VALID", "own", []),
])
def test_forced_first_layer_filter_gradient_matches_stock(tf, monkeypatch, spy, xs, fs, pad,
                                                          choice, ran):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    y = tf.nn.conv2d(x, np.zeros(fs, np.float32), 1, pad)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    g = _geom(xs, fs, 1, pad)
    _force(monkeypatch, "conv_f32_few_filter_grad", xs, fs, g, choice)
    ref = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=fs, out_backprop=dy,
                                          strides=[1, 1, 1, 1], padding=pad).numpy()
    df = np.full(fs, np.nan, np.float32)
    conv_ops.conv2d_backprop_filter([x, np.array(fs, np.int32), dy], [df], _attrs(1, pad))
    assert spy == ran
    _close(df, ref, xs[0] * y.shape[1] * y.shape[2])


def test_padded_non_finite_filter_leaves_the_tiles(tf, monkeypatch, spy):
    """zeros times Inf: the tiles decline a non-finite filter with padding, and the Conv2D
    kernel goes back to TensorFlow (stock's oneDNN skips the padded taps)."""
    xs, fs = (8, 24, 24, 3), (3, 3, 3, 32)
    rng = np.random.default_rng(6)
    x = rng.standard_normal(xs).astype(np.float32)
    f = rng.standard_normal(fs).astype(np.float32)
    f[0, 0, 0, 0] = np.inf
    _force(monkeypatch, "conv_f32_forward", xs, fs, _geom(xs, fs, 1, "SAME"), "tiles")
    out = np.empty((8, 24, 24, 32), np.float32)
    with pytest.raises(conv_ops.Unsupported):
        conv_ops.conv2d([x, f], [out], _attrs(1, "SAME"))
    assert spy == []


def test_first_call_measures_and_keeps_a_candidate(monkeypatch):
    xs, fs = (64, 28, 28, 1), (3, 3, 1, 32)
    monkeypatch.setattr(variants, "_choices", {})
    monkeypatch.setattr(variants, "_record", lambda name, choice: None)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    f = rng.standard_normal(fs).astype(np.float32)
    out = np.empty((64, 26, 26, 32), np.float32)
    conv_ops.conv2d([x, f], [out], _attrs(1, "VALID"))
    (name, choice), = variants._choices.items()
    assert name.startswith("conv_f32_forward|") and choice in ("im2col", "tiles")
    again = np.empty_like(out)
    conv_ops.conv2d([x, f], [again], _attrs(1, "VALID"))
    assert variants._choices == {name: choice}
    # the candidates' sums differ in order only: each is within float32 rounding of the other
    _close(again, out, 9)
