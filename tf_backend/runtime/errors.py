"""Errors of loaded programs (TensorFlow-free)."""


class ProgramFileError(Exception):
    """A program file cannot be read: wrong format or version, corrupt or truncated."""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = str(path), problem


class ProgramInputError(ValueError):
    """Inputs that do not match the program's input specs."""


class ProgramRunError(RuntimeError):
    """A node failed while running a loaded program; names the node, op and input shapes."""

    def __init__(self, message, node=None, op=None):
        super().__init__(message)
        self.node, self.op = node, op


class ExportError(Exception):
    """A function or model cannot be exported as a program file."""
