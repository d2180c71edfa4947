"""TensorFlow's shipped DepthwiseConv2dNative test base
(tensorflow/python/kernel_tests/nn_ops/depthwise_conv_op_base.py).

`tfb conformance -- integration/tf_suites/depthwise_conv_op_test.py`; or run this file directly.

In TF2 the base's own value and gradient tests are `run_v1_only` (graph + session, which the
backend does not intercept) or need a GPU: only testConv2D2x2Filter runs. DepthwiseConv2DEagerTest
runs the base's `_VerifyValues` (its configurations, numpy reference and tolerances) eagerly, on
the CPU, through a session stand-in.
"""
import contextlib

import tensorflow as tf
from tensorflow.python.kernel_tests.nn_ops import depthwise_conv_op_base as base

DepthwiseConv2DTest = base.DepthwiseConv2DBase


class _EagerSession:
    """What `_VerifyValues` touches of its session: `graph._kernel_label_map` (a no-op here;
    the grouped-convolution label only selects a cuDNN kernel)."""

    class graph:  # noqa: N801 - mirrors Session.graph
        @staticmethod
        def _kernel_label_map(_):
            return contextlib.nullcontext()


class DepthwiseConv2DEagerTest(tf.test.TestCase):
    _VerifyValues = base.DepthwiseConv2DBase._VerifyValues

    @contextlib.contextmanager
    def session(self, graph=None, use_gpu=False, **kw):  # noqa: ARG002 - the base's signature
        yield _EagerSession()

    def testDepthwiseConv2D(self):
        # the base's testDepthwiseConv2D without the GPU-only grouped variant
        for input_size, filter_size, _, stride, padding, dilations in base.ConfigsToTest():
            for data_type in (tf.float32, tf.float64):
                tolerance = 1e-4 if data_type == tf.float32 else 1e-12
                with self.subTest(input=input_size, filter=filter_size, stride=stride,
                                  padding=padding, dilations=dilations, dtype=data_type.name):
                    self._VerifyValues(input_size, filter_size, stride, padding, data_type,
                                       use_gpu=False, dilations=dilations, tolerance=tolerance)

    def testDepthwiseConv2DExplicit(self):
        # the base's testDepthwiseConv2DExplicit on the CPU (NHWC only, as there)
        for input_size, filter_size, _, stride, padding, dilations in base.ConfigsToTestExplicit():
            for data_type in (tf.float16, tf.float32, tf.bfloat16, tf.float64):
                tolerance = 2e-2 if data_type == tf.bfloat16 else None
                with self.subTest(input=input_size, filter=filter_size, stride=stride,
                                  padding=padding, dilations=dilations, dtype=data_type.name):
                    self._VerifyValues(input_size, filter_size, stride, padding, data_type,
                                       use_gpu=False, dilations=dilations, tolerance=tolerance)


if __name__ == "__main__":
    tf.test.main()
