"""Run exported program files without TensorFlow: `program = load(path); program([x])`.

Importing this package, loading and running programs never imports TensorFlow (numpy, numba
and the device's own libraries only). The file format: tf_backend/runtime/FORMAT.md.
"""
from .. import devices
from .errors import ExportError, ProgramFileError, ProgramInputError, ProgramRunError  # noqa: F401
from .format import FORMAT_VERSION  # noqa: F401
from .program import LoadedProgram


def load(path, device="cpu"):
    """Load a program file for `device` (a name from tf_backend.devices, or a Device)."""
    from . import format as fmt
    dev = devices.get(device) if isinstance(device, str) else device
    dev.load()
    if not dev.capabilities.supports_programs:
        raise devices.DeviceError(f"device {dev.name!r} does not run programs")
    header, blobs = fmt.read(path)
    return LoadedProgram(header, blobs, dev, path)
