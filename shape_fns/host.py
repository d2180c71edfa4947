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


def onednn_enabled():
    """TensorFlow's oneDNN ops are on unless TF_ENABLE_ONEDNN_OPTS is false (x86-64 default)."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def onednn_runs(dtype):
    """Whether stock runs `dtype` (a numpy dtype or its name) on oneDNN on this CPU."""
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
