"""Stand-in for the `conftest.py` at the root of the Keras repository, which the wheel does not
ship but some test modules import (`from conftest import skip_if_backend`).

Put this directory on PYTHONPATH when running Keras' shipped tests:
    PYTHONPATH=integration/tf_suites/keras_shim KERAS_BACKEND=tensorflow tfb conformance -- ...
"""
import pytest

from keras.src.backend import backend


def skip_if_backend(given_backend, reason):
    return pytest.mark.skipif(backend() == given_backend, reason=reason)
