"""TensorFlow's shipped DepthwiseConv2dNative test base
(tensorflow/python/kernel_tests/nn_ops/depthwise_conv_op_base.py).

`tfb conformance -- integration/tf_suites/depthwise_conv_op_test.py`; or run this file directly.
"""
import tensorflow as tf
from tensorflow.python.kernel_tests.nn_ops import depthwise_conv_op_base

DepthwiseConv2DTest = depthwise_conv_op_base.DepthwiseConv2DBase

if __name__ == "__main__":
    tf.test.main()
