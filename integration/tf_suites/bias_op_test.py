"""TensorFlow's shipped BiasAdd test base (tensorflow/python/kernel_tests/nn_ops/bias_op_base.py).

Run with the backend off and on: `tfb conformance -- integration/tf_suites/bias_op_test.py`,
or directly: `python integration/tf_suites/bias_op_test.py` (TF_BACKEND=on to turn it on).
"""
import tensorflow as tf
from tensorflow.python.kernel_tests.nn_ops import bias_op_base  # the module, so pytest collects
                                                                # the base once, as BiasAddTest

BiasAddTest = bias_op_base.BiasAddTestBase

if __name__ == "__main__":
    tf.test.main()
