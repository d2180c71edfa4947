"""Op table: math ops (elementwise, reductions, matmul)."""
import tensorflow as tf

from . import OpCase, arr, broadcast_pairs, elementwise_shapes

CASES = [
    OpCase("AddV2", "AddV2", lambda x, y: tf.raw_ops.AddV2(x=x, y=y),
           lambda dt, rng: [(arr(rng, a, dt), arr(rng, b, dt)) for a, b in broadcast_pairs()],
           dtypes=("float32", "float64", "int32", "int64"), grad=True,
           errors=lambda dt: [(arr(__import__("numpy").random.default_rng(0), (2, 3), dt),
                               arr(__import__("numpy").random.default_rng(0), (4,), dt))]),
    OpCase("Relu", "Relu", lambda x: tf.nn.relu(x),
           lambda dt, rng: [(arr(rng, s, dt),) for s in elementwise_shapes()],
           dtypes=("float32", "float64", "int32", "int64"), grad=True, grad_ops=("ReluGrad",)),
]
