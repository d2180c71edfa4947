"""Devices behind one contract (base.Device), found by name.

The CPU device is built in; other devices come from installed packages through the entry-point
group `tf_backend.devices` (`name = module:DeviceClass`, a class or factory called with no
arguments) or from `register()`. TensorFlow-free; entry points are read only when a name is not
already known, or by `available()`.
"""
import importlib
import threading

from .base import REQUIRED, Capabilities, Device, DeviceError, check  # noqa: F401

GROUP = "tf_backend.devices"
_BUILTIN = {"cpu": "tf_backend.devices.cpu:CpuDevice",
            "cuda": "tf_backend.devices.cuda:CudaDevice"}   # loads CuPy only on first use
_instances = {}
_factories = {}      # name -> (factory, origin), from register()
_lock = threading.Lock()


def _entry_points():
    """name -> EntryPoint of the installed device plugins (read fresh each time)."""
    import importlib.metadata   # only here: it costs start-up time the host runtime need not pay
    out = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        out.setdefault(ep.name, ep)
    return out


def available():
    """Names of every known device: built in, registered, and installed plugins (not loaded)."""
    return sorted(set(_BUILTIN) | set(_factories) | set(_entry_points()))


def register(name, factory):
    """Add a device by hand (tests, embedding); `factory()` returns the device."""
    with _lock:
        _factories[name] = (factory, f"register({name!r})")
        _instances.pop(name, None)


def _load_ref(ref):
    mod, _, attr = ref.partition(":")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def get(name="cpu"):
    """The device called `name` (one instance per process), contract-checked; call its
    `load()` before the first lookup."""
    d = _instances.get(name)
    if d is not None:
        return d
    with _lock:
        d = _instances.get(name)
        if d is not None:
            return d
        if name in _BUILTIN:          # built-ins win over a plugin claiming the same name
            factory, origin = _load_ref(_BUILTIN[name]), "tf_backend"
        elif name in _factories:
            factory, origin = _factories[name]
        else:
            ep = _entry_points().get(name)
            if ep is None:
                raise DeviceError(f"unknown device {name!r}; available: {', '.join(available())}")
            origin = f"entry point {ep.name} = {ep.value}"
            try:
                factory = ep.load()
            except Exception as e:
                raise DeviceError(f"device plugin {origin} failed to import: "
                                  f"{type(e).__name__}: {e}") from e
        d = check(factory(), origin)
        if d.name != name:
            raise DeviceError(f"device from {origin} calls itself {d.name!r}, not {name!r}")
        _instances[name] = d
        return d


def host():
    """The device the host runtime (eager dispatch, tf.function programs) runs on."""
    return get("cpu")


def for_programs(device):
    """`device` (a name, or a Device) loaded and able to run programs; DeviceError otherwise."""
    dev = get(device) if isinstance(device, str) else check(device, repr(device))
    dev.load()
    if not dev.capabilities.supports_programs:
        raise DeviceError(f"device {dev.name!r} does not run programs")
    return dev


def library(name):
    """The host device's implementation of a runtime service (Device.library), or None."""
    return host().library(name)
