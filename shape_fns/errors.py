"""TensorFlow-free error classes; dispatch maps each to the tf.errors class of the same name."""


class BackendError(Exception):
    """Base: `code` is TensorFlow's canonical error code (tf.errors.*)."""

    code = 2  # UNKNOWN

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class InvalidArgumentError(BackendError, ValueError):
    code = 3


class OutOfRangeError(BackendError):
    code = 11


class UnimplementedError(BackendError):
    code = 12


class InternalError(BackendError):
    code = 13


class ResourceExhaustedError(BackendError):
    code = 8


class Unsupported(Exception):
    """Raised by a shape fn or kernel *before writing anything*: fall back to TensorFlow.

    `reason` goes into the ledger, e.g. "attr:data_format=NCHW".
    """

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason
