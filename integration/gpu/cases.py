"""Kernel cases the GPU is checked on against the CPU device (TensorFlow-free, deterministic):
`cases()` -> [(case id, op, attrs, [host input arrays])]. tests/test_gpu_kernels.py runs each on
both devices through the device contract (allocate, copy_in, lookup, copy_out)."""
import numpy as np

EW_UNARY = ("Relu", "Relu6", "Exp", "Log1p", "Tanh", "Sigmoid", "Neg", "Abs", "Square", "Sqrt",
            "Rsqrt", "Elu", "Softplus", "Erf", "Floor", "Round", "Sign", "Sin")
EW_BINARY = ("AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference",
             "DivNoNan", "Xlogy", "ReluGrad", "TanhGrad", "SigmoidGrad")
POSITIVE = ("Log1p", "Sqrt", "Rsqrt", "Xlogy")


def _dt(d):
    return {"T": np.dtype(d)}


def cases():
    rng = np.random.default_rng(0)
    out = []

    def arr(shape, dtype, positive=False):
        a = rng.standard_normal(shape).astype(np.float32) * 2
        if positive:
            a = np.abs(a) + 0.1
        return a.astype(dtype)

    for d in ("float32", "float16"):
        for op in EW_UNARY:
            x = arr((3, 5, 7), d, op in POSITIVE)
            if d == "float32":
                x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf] if op not in POSITIVE else 1
            out.append((f"{op}-{d}", op, _dt(d), [x]))
        for op in EW_BINARY:
            pos = op in POSITIVE
            second = (4, 6, 8) if op.endswith("Grad") else (8,)     # gradients: same shapes
            out.append((f"{op}-{d}", op, _dt(d), [arr((4, 6, 8), d, pos), arr(second, d, pos)]))
        for (m, k, n), ta, tb in (((7, 33, 5), False, False), ((64, 128, 96), True, False),
                                  ((1, 2048, 1000), False, True)):
            s = np.asarray(k ** -0.25, d)      # products of unit scale: the contract's atol
            a = arr((k, m) if ta else (m, k), d) * s
            b = arr((n, k) if tb else (k, n), d) * s
            out.append((f"MatMul-{m}x{k}x{n}-{ta}{tb}-{d}", "MatMul",
                        {**_dt(d), "transpose_a": ta, "transpose_b": tb}, [a, b]))
        for name, (n, h, w, c, k), (kh, kw), s, pad, dil in (
                ("1x1", (2, 9, 9, 16, 24), (1, 1), 1, "VALID", 1),
                ("1x1s2", (1, 14, 14, 32, 16), (1, 1), 2, "VALID", 1),
                ("3x3same", (2, 10, 11, 8, 12), (3, 3), 1, "SAME", 1),
                ("3x3s2same", (1, 15, 15, 16, 8), (3, 3), 2, "SAME", 1),
                ("7x7s2valid", (1, 30, 30, 3, 16), (7, 7), 2, "VALID", 1),
                ("3x3dil2", (1, 12, 12, 4, 6), (3, 3), 1, "SAME", 2)):
            x, f = arr((n, h, w, c), d), arr((kh, kw, c, k), d) * np.asarray(0.3, d)
            out.append((f"Conv2D-{name}-{d}", "Conv2D",
                        {**_dt(d), "strides": [1, s, s, 1], "padding": pad,
                         "dilations": [1, dil, dil, 1], "data_format": "NHWC",
                         "explicit_paddings": []}, [x, f]))
        for op in ("MaxPool", "AvgPool"):
            for pad, k, s in (("SAME", 3, 2), ("VALID", 2, 2), ("SAME", 3, 1)):
                out.append((f"{op}-{pad}{k}s{s}-{d}", op,
                             {**_dt(d), "ksize": [1, k, k, 1], "strides": [1, s, s, 1],
                              "padding": pad, "data_format": "NHWC"},
                             [arr((2, 9, 10, 5), d)]))
        for op in ("Mean", "Sum", "Max") if d == "float32" else ("Mean", "Sum"):
            for axes, keep in (([1, 2], False), ([-1], True), ([0], False)):
                out.append((f"{op}-{axes}-{keep}-{d}", op,
                            {**_dt(d), "keep_dims": keep, "Tidx": np.dtype(np.int32)},
                            [arr((3, 7, 6, 40), d), np.asarray(axes, np.int32)]))
        out.append((f"Softmax-{d}", "Softmax", _dt(d), [arr((3, 1000), d)]))
        out.append((f"BiasAdd-{d}", "BiasAdd", {**_dt(d), "data_format": "NHWC"},
                    [arr((2, 3, 4, 5), d), arr((5,), d)]))
        out.append((f"Pad-{d}", "Pad", {**_dt(d), "Tpaddings": np.dtype(np.int32)},
                    [arr((1, 5, 6, 3), d), np.asarray([[0, 0], [3, 3], [1, 2], [0, 0]],
                                                      np.int32)]))
        out.append((f"ConcatV2-{d}", "ConcatV2", {**_dt(d), "N": 2, "Tidx": np.dtype(np.int32)},
                    [arr((2, 3, 4), d), arr((2, 5, 4), d), np.asarray(1, np.int32)]))
        out.append((f"Transpose-{d}", "Transpose", {**_dt(d), "Tperm": np.dtype(np.int32)},
                    [arr((2, 3, 4, 5), d), np.asarray([0, 3, 1, 2], np.int32)]))
    return out


def run_case(device, op, attrs, inputs):
    """One op on one device through the device contract: inputs copied in (host inputs stay
    host arrays where the device has no host memory), outputs allocated, run, copied out."""
    import kernels
    import shape_fns
    from shape_fns import Spec
    shape_fns.load_all()
    host = kernels.host_inputs(op, len(inputs))
    specs = shape_fns.get(op)([Spec(a.shape, a.dtype, a) for a in inputs], attrs)
    kdef, reason = device.lookup(op, attrs)
    if kdef is None:
        raise LookupError(f"{device.name} has no kernel for {op}: {reason}")
    bufs = [a if (i in host and not device.capabilities.host_memory) else device.copy_in(a)
            for i, a in enumerate(inputs)]
    outs = [device.allocate(s.shape, s.dtype) for s in specs]
    kdef.fn(bufs, outs, attrs)
    device.synchronize()
    return [device.copy_out(o) for o in outs]


def check(op, attrs, inputs, got, want):
    """None when a GPU result matches the CPU's under the numerics contract, else why."""
    from tf_backend import numerics
    if op == "Conv2D":
        rlen = int(np.prod(inputs[1].shape[:-1]))
    elif op == "MatMul":
        rlen = inputs[0].shape[-2 if attrs.get("transpose_a") else -1]
    else:
        rlen = max(a.size for a in inputs)
    kind = "reduction" if op in ("Conv2D", "MatMul", "Mean", "Sum", "Softmax", "AvgPool") \
        else "elementwise"
    return numerics.compare(got, want, kind, rlen)
