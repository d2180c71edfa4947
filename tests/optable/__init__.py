"""The op table: one record per op drives correctness, error, shape-fn and gradient tests.

A case names the TF op type that must run on our kernel, a TF-level callable, sample inputs per
dtype, error inputs, and whether gradients are checked. A skip is data with a reason.
"""
import dataclasses
import importlib
from typing import Callable, Optional

import numpy as np

MODULES = (
    "math_ops", "reduction_ops", "matmul_ops", "array_ops", "array_index_ops", "nn_ops",
    "conv_ops", "pooling_ops", "gather_scatter_ops", "scan_ops", "misc_math_ops", "image_ops",
    "einsum_ops", "norm_ops", "depthwise_ops", "loss_ops", "random_ops",
)


@dataclasses.dataclass
class OpCase:
    name: str                      # test id stem, unique
    op: str                        # TF op type whose kernel this case exercises (ledger-checked)
    fn: Callable                   # fn(*args) -> tf.Tensor | list; args: tf.Tensors / Python values
    samples: Callable              # samples(dtype: np.dtype, rng) -> list[tuple(args)]
    dtypes: tuple = ("float32",)
    kind: str = "elementwise"      # numerics.tolerance kind: exact | elementwise | reduction
    reduction_len: Optional[Callable] = None   # reduction_len(args) -> int, for kind="reduction"
    errors: Optional[Callable] = None          # errors(dtype) -> list[tuple(args)] that must raise
    grad: bool = False             # check tape gradients against stock (float dtypes)
    grad_args: Optional[tuple] = None          # indices of args to differentiate (default: float arrays)
    grad_ops: tuple = ()           # op types the gradient must run on our kernels
    shape_check: bool = True       # compare our shape fn with TF's graph shape inference
    skip: Optional[str] = None     # reason, if the whole case is skipped
    rtol: Optional[float] = None
    atol: Optional[float] = None


def all_cases():
    cases = []
    for m in MODULES:
        mod = importlib.import_module(f"{__name__}.{m}")
        cases.extend(mod.CASES)
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate op-table names: {sorted(dup)}"
    return cases


# --- sample helpers ------------------------------------------------------------------------

def arr(rng, shape, dtype, low=-3, high=3):
    """Random array of dtype; floats in [low, high), ints in [low, high], bools random."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(low, high + 1, size=shape).astype(dtype)
    return (rng.random(shape) * (high - low) + low).astype(dtype)


def positive(rng, shape, dtype, low=0.1, high=4):
    return arr(rng, shape, dtype, low, high)


def special_floats(dtype):
    """NaN, ±Inf, ±0, tiny and huge values of a float dtype (bfloat16 too)."""
    import ml_dtypes   # np.finfo does not know bfloat16; ml_dtypes.finfo knows every float
    f = ml_dtypes.finfo(dtype)
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, f.tiny, -f.tiny, f.max, -f.max, 1.5, -2.5],
                    dtype=dtype)


def int_edges(dtype):
    i = np.iinfo(dtype)
    return np.array([i.min, i.min + 1, -7, -1, 0, 1, 7, i.max - 1, i.max], dtype=dtype)


def elementwise_shapes():
    """Shapes for unary ops: scalar, empty, vector, matrix, 4-d, and one big enough to go parallel."""
    return [(), (0,), (7,), (3, 5), (2, 3, 4, 5), (300, 500)]


def broadcast_pairs():
    """Shape pairs for binary ops: equal, scalar either side, empty, general broadcasting."""
    return [((), ()), ((3, 4), (3, 4)), ((3, 4), ()), ((), (3, 4)), ((0, 4), (4,)),
            ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5, 1), (1, 6)), ((400, 400), (400, 400))]
