"""MaxPool and AvgPool (NHWC) on the GPU: one kernel per output element over its window.
AvgPool divides by the window's count inside the input (TensorFlow's rule for SAME)."""
import cupy
import numpy as np

import kernels
from shape_fns import Unsupported
from shape_fns.conv_ops import output_size

from . import DEVICE

HALF_SINGLE = ("float16", "float32")     # windows reduce in float registers

_ARGS = ("raw T x, int32 H, int32 W, int32 C, int32 Ho, int32 Wo, int32 KH, int32 KW, "
         "int32 sh, int32 sw, int32 pt, int32 pl")
_INDEX = """
    int c = i % C, t = i / C, wo = t % Wo; t /= Wo; int ho = t % Ho, n = t / Ho;
    int h0 = ho * sh - pt, w0 = wo * sw - pl;
"""
_max = cupy.ElementwiseKernel(_ARGS, "T y", _INDEX + """
    float m = __int_as_float(0xff800000); bool has_nan = false;
    for (int kh = 0; kh < KH; kh++) { int h = h0 + kh; if (h < 0 || h >= H) continue;
      for (int kw = 0; kw < KW; kw++) { int w = w0 + kw; if (w < 0 || w >= W) continue;
        float v = (float)x[(((long long)n * H + h) * W + w) * C + c];
        if (v != v) has_nan = true; else if (v > m) m = v; } }
    y = (T)(has_nan ? __int_as_float(0x7fc00000) : m);
    """, "tfb_maxpool")
_avg = cupy.ElementwiseKernel(_ARGS, "T y", _INDEX + """
    float s = 0; int cnt = 0;
    for (int kh = 0; kh < KH; kh++) { int h = h0 + kh; if (h < 0 || h >= H) continue;
      for (int kw = 0; kw < KW; kw++) { int w = w0 + kw; if (w < 0 || w >= W) continue;
        s += (float)x[(((long long)n * H + h) * W + w) * C + c]; cnt++; } }
    y = (T)(s / (float)cnt);
    """, "tfb_avgpool")


def _pool(kernel):
    def pool(inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if attrs.get("data_format", "NHWC") != "NHWC":
            raise Unsupported("data_format:NCHW")
        N, H, W, C = x.shape
        _, KH, KW, _ = attrs["ksize"]
        _, sh, sw, _ = attrs["strides"]
        ep = attrs.get("explicit_paddings") or [0] * 8
        Ho, pt, _ = output_size(H, KH, sh, 1, attrs["padding"], ep[2], ep[3])
        Wo, pl, _ = output_size(W, KW, sw, 1, attrs["padding"], ep[4], ep[5])
        kernel(x, *(np.int32(v) for v in (H, W, C, Ho, Wo, KH, KW, sh, sw, pt, pl)), y)
    return pool


kernels.kernel("MaxPool", device=DEVICE, dtypes=HALF_SINGLE)(_pool(_max))
kernels.kernel("AvgPool", device=DEVICE, dtypes=HALF_SINGLE)(_pool(_avg))
