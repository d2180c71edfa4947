"""TensorFlow's shipped SoftmaxCrossEntropyWithLogits test base
(tensorflow/python/kernel_tests/nn_ops/xent_op_test_base.py).

`tfb conformance -- integration/tf_suites/xent_op_test.py`; or run this file directly.
"""
import tensorflow as tf
from tensorflow.python.kernel_tests.nn_ops import xent_op_test_base

XentOpTest = xent_op_test_base.XentOpTestBase

if __name__ == "__main__":
    tf.test.main()
