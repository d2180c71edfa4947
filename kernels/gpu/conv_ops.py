"""Conv2D (NHWC, HWIO filters) on the GPU as an implicit GEMM: a 1x1 stride-1 convolution is
one cuBLAS product (gemm.py) over the NHWC buffer as it is; any other is one gather kernel (im2col into
(N*Ho*Wo, KH*KW*C), zeros for padding) and one product with the filter read as
(KH*KW*C, K). Float16 products accumulate in float32."""
import cupy
import numpy as np

import kernels
from shape_fns import Unsupported
from shape_fns.conv_ops import output_size

from . import DEVICE, FLOATS, gemm

_im2col = cupy.ElementwiseKernel(
    "raw T x, int32 H, int32 W, int32 C, int32 Ho, int32 Wo, int32 KW, int32 sh, int32 sw, "
    "int32 dh, int32 dw, int32 pt, int32 pl, int32 KC",
    "T col",
    """
    int r = i / KC, q = i - r * KC;             // row = (n, ho, wo); column = (kh, kw, c)
    int c = q % C, kk = q / C, kw = kk % KW, kh = kk / KW;
    int wo = r % Wo, t = r / Wo, ho = t % Ho, n = t / Ho;
    int h = ho * sh - pt + kh * dh, w = wo * sw - pl + kw * dw;
    col = (h >= 0 && h < H && w >= 0 && w < W) ? x[(((long long)n * H + h) * W + w) * C + c]
                                                : (T)(0.0f);
    """,
    "tfb_im2col")


@kernels.kernel("Conv2D", device=DEVICE, dtypes=FLOATS)
def conv2d(inputs, outputs, attrs):
    x, w = inputs
    out = outputs[0]
    if attrs.get("data_format", "NHWC") != "NHWC":
        raise Unsupported("data_format:NCHW")
    N, H, W, C = x.shape
    KH, KW, CI, K = w.shape
    if CI != C:
        raise Unsupported("grouped convolution")
    sh, sw = attrs["strides"][1], attrs["strides"][2]
    dh, dw = attrs.get("dilations", [1, 1, 1, 1])[1:3]
    ep = attrs.get("explicit_paddings") or [0] * 8
    Ho, pt, _ = output_size(H, KH, sh, dh, attrs["padding"], ep[2], ep[3])
    Wo, pl, _ = output_size(W, KW, sw, dw, attrs["padding"], ep[4], ep[5])
    if KH == KW == 1 and sh == sw == 1 and pt == pl == 0:
        gemm.matmul(x.reshape(N * H * W, C), w.reshape(C, K), out.reshape(N * H * W, K))
        return
    KC = KH * KW * C
    col = cupy.empty((N * Ho * Wo, KC), x.dtype)
    _im2col(x, np.int32(H), np.int32(W), np.int32(C), np.int32(Ho), np.int32(Wo),
            np.int32(KW), np.int32(sh), np.int32(sw), np.int32(dh), np.int32(dw),
            np.int32(pt), np.int32(pl), np.int32(KC), col)
    gemm.matmul(col, w.reshape(KC, K), out.reshape(N * Ho * Wo, K))
