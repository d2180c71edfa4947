"""Which of stock TensorFlow's CPU kernels runs a dtype on this machine: oneDNN or Eigen.

Stock's choice (TensorFlow's IsDataTypeSupportedByOneDNNOnThisCPU, util.cc) depends on the CPU's
features, and some of its outputs depend on the choice (FusedBatchNormV3's reserve-space shapes,
Softmax on rows holding NaN). TF-free: read from /proc/cpuinfo once.
"""
import functools
import os


@functools.lru_cache(maxsize=1)
def _cpuinfo():
    """(model name, flags) of the first CPU in /proc/cpuinfo; ("", frozenset()) elsewhere."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags":
                    return model, frozenset(value.split())
    except OSError:
        pass
    return model, frozenset()


def cpu_flags():
    """The CPU's feature flags as Linux names them (avx512f, avx512_fp16, amx_bf16, ...)."""
    return _cpuinfo()[1]


def cpu_model():
    """The CPU's model name (`lscpu`'s), "" where /proc/cpuinfo has none."""
    return _cpuinfo()[0]


def cpu_key():
    """The CPU as measured choices are kept per it: model name and how many flags it has."""
    return f"{cpu_model() or 'unknown'} [{len(cpu_flags())} flags]"


# TensorFlow turns its oneDNN ops on by default only on CPUs with these (util.cc IsMKLEnabled:
# AVX512_VNNI, AVX512_BF16, AVX_VNNI, AMX); elsewhere (an AVX2-only EPYC, measured: stock's
# float32 convolution backprops then refuse dilations, as Eigen's do) TF_ENABLE_ONEDNN_OPTS=1
# turns them on.
ONEDNN_DEFAULT_FLAGS = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                                  "amx_int8", "amx_bf16"})


def onednn_enabled():
    """Whether TensorFlow's oneDNN ops are on: TF_ENABLE_ONEDNN_OPTS when set to a boolean,
    else on exactly for CPUs with neural-network instructions (ONEDNN_DEFAULT_FLAGS)."""
    v = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower()
    if v in ("1", "true"):
        return True
    if v in ("0", "false"):
        return False
    return bool(cpu_flags() & ONEDNN_DEFAULT_FLAGS)


_runs = {}   # (dtype, TF_ENABLE_ONEDNN_OPTS) -> bool: kernels ask on every call


def onednn_runs(dtype):
    """Whether stock runs `dtype` (a numpy dtype or its name) on oneDNN on this CPU."""
    key = (dtype, os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
    got = _runs.get(key)
    if got is None:
        got = _runs[key] = _onednn_runs(dtype)
    return got


def _onednn_runs(dtype):
    name = getattr(dtype, "name", str(dtype))
    if not onednn_enabled():
        return False
    f = cpu_flags()
    if name == "float32":
        return True
    if name == "bfloat16":
        return "avx512f" in f or "avx_ne_convert" in f
    if name == "float16":
        return (("avx512bw" in f and ("avx512_fp16" in f or "amx_fp16" in f))
                or "avx_ne_convert" in f)
    return False
