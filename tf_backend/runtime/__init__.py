"""Run exported program files without TensorFlow: `program = load(path); program([x])`.

Importing this package, loading and running programs never imports TensorFlow (numpy, numba
and the device's own libraries only). The file format: tf_backend/runtime/FORMAT.md.
"""
from .. import devices
from .errors import ExportError, ProgramFileError, ProgramInputError, ProgramRunError  # noqa: F401
from .format import FORMAT_VERSION  # noqa: F401
from .program import LoadedProgram


def load(path, device="cpu", dtype=None, replay=True):
    """Load a program file for `device` (a name from tf_backend.devices, or a Device).

    dtype: "float16" (or "bfloat16") runs a float32 program in that type: every float32 slot,
    constant, input and dtype attr becomes `dtype` (as PyTorch's `.half()`); inputs are then
    given in `dtype`. replay: let a device that records runs (CUDA graphs) replay them.
    """
    from . import format as fmt
    dev = devices.for_programs(device)
    header, blobs = fmt.read(path)
    if dtype is not None:
        header, blobs = fmt.retype(header, blobs, "float32", dtype)
    return LoadedProgram(header, blobs, dev, path, replay=replay)
