"""shape_fns/host.py: stock's oneDNN-or-Eigen choice per dtype and CPU, and the outputs that
depend on it, checked for CPU families other than the one at hand by substituting its flags."""
import numpy as np
import pytest

from shape_fns import host, norm_ops
from shape_fns.spec import Spec

# /proc/cpuinfo flags (the relevant subset) of the CPU families the project runs on
SAPPHIRE_RAPIDS = frozenset("avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 "
                            "avx512_fp16 amx_tile amx_bf16 amx_int8".split())
EPYC_ZEN4 = frozenset("avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16".split())
AVX2_ONLY = frozenset("avx2 fma".split())


@pytest.fixture
def cpu(monkeypatch):
    def use(flags):
        monkeypatch.setattr(host, "cpu_flags", lambda: flags)
        monkeypatch.setattr(host, "_runs", {})
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    return use


@pytest.mark.parametrize("flags, f32, f16, bf16", [(SAPPHIRE_RAPIDS, True, True, True),
                                                   (EPYC_ZEN4, True, False, True),
                                                   (AVX2_ONLY, False, False, False)])
def test_onednn_choice_by_cpu(cpu, flags, f32, f16, bf16):
    """TensorFlow's oneDNN ops are on by default only with AVX512_VNNI/BF16, AVX_VNNI or AMX:
    an AVX2-only CPU runs even float32 on Eigen."""
    cpu(flags)
    assert host.onednn_runs(np.dtype(np.float32)) == f32
    assert host.onednn_runs("float16") == f16
    assert host.onednn_runs("bfloat16") == bf16
    assert not host.onednn_runs(np.dtype(np.float64))


def test_onednn_off_by_env(cpu, monkeypatch):
    cpu(SAPPHIRE_RAPIDS)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert not host.onednn_runs("float32")


def test_onednn_on_by_env_without_nn_instructions(cpu, monkeypatch):
    cpu(AVX2_ONLY)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert host.onednn_runs("float32") and not host.onednn_runs("bfloat16")


def test_this_cpu_matches_stocks_onednn_switch(tf):
    """The rule agrees with TensorFlow's own switch on the CPU at hand."""
    from tensorflow.python.util import _pywrap_util_port
    assert host.onednn_enabled() == _pywrap_util_port.IsMklEnabled()


@pytest.mark.parametrize("flags, r3", [(SAPPHIRE_RAPIDS, (0,)), (EPYC_ZEN4, ())])
def test_batch_norm_reserve_space_follows_stock_kernel(cpu, flags, r3):
    """float16 batch norm: oneDNN's reserve_space_3 is [0] (Sapphire Rapids, measured in the
    issue), Eigen's a scalar (EPYC, measured here); the gradient's reserve_space_4/5 mirror it."""
    cpu(flags)
    x = Spec((2, 4, 4, 3), np.dtype(np.float16))
    v = Spec((3,), np.dtype(np.float32))
    out = norm_ops.fused_batch_norm([x, v, v, Spec((0,), v.dtype), Spec((0,), v.dtype)],
                                    {"is_training": True})
    assert out[5].shape == r3
    g = norm_ops.fused_batch_norm_grad([x, x, v, v, v, Spec(r3, v.dtype)], {})
    assert g[3].shape == g[4].shape == ((0,) if r3 == () else ())


def test_this_cpu_matches_stock_reserve_space(tf):
    """On the CPU at hand, the rule gives stock's own shapes for every half type."""
    for dt in (tf.float16, tf.bfloat16, tf.float32):
        r = tf.raw_ops.FusedBatchNormV3(x=tf.ones([2, 4, 4, 3], dt), scale=tf.ones([3]),
                                        offset=tf.zeros([3]), mean=tf.zeros([0]),
                                        variance=tf.zeros([0]), is_training=True)
        want = (0,) if host.onednn_runs(dt.name) else ()
        assert tuple(r[5].shape) == want, dt.name
