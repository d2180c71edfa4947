"""TensorFlow's shipped SparseSoftmaxCrossEntropyWithLogits test base
(tensorflow/python/kernel_tests/sparse_ops/sparse_xent_op_test_base.py).

`tfb conformance -- integration/tf_suites/sparse_xent_op_test.py`; or run this file directly.
"""
import tensorflow as tf
from tensorflow.python.kernel_tests.sparse_ops import sparse_xent_op_test_base

SparseXentOpTest = sparse_xent_op_test_base.SparseXentOpTestBase

if __name__ == "__main__":
    tf.test.main()
