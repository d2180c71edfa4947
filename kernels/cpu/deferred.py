"""First-use compiles off the critical path: a kernel whose numba function is not compiled for
its argument types yet declines the call (`Deferred`, an Unsupported: TensorFlow's kernel runs
it, counted in the ledger as `runtime:compiling`) while a child process compiles the function
into numba's disk cache; a later call loads it from there in milliseconds and runs ours.

Why: a cold cache made a Keras MNIST training script's first run 47 s against stock's 11 s on
the 2-core AVX2 EPYC VM, 38.5 s of it numba compiling 53 functions on the main thread (Winograd
transforms, pooling gradients, the parallel im2col, random fills, elementwise loops), each the
first time an op met its shapes. Compiling in a thread takes the GIL from the steps; a child
process (at the lowest priority, one at a time, a batch of requests per child) takes only the
cores' idle time, as the compiled loops and regions already do (loops.compile_elsewhere).

Which calls may decline: the host runtime registers the frames that fall back to TensorFlow on
Unsupported (`allow_under`: an eager op's kernel call, a constant fold, an interpreted program
node whose kernel has not written anything yet). At a compile the innermost such frame on the
stack decides; with none (a generated driver, a loop body, a kernel called from a helper), and
for functions without an on-disk cache or not reachable from their module, numba compiles here
as before.
Compiles nested in an allowed compile always run here. `mode("sync")` (tests, shadow and
strict modes) turns it off: the first call compiles and runs our kernel.
"""
import os
import pickle
import subprocess
import sys
import tempfile
import threading

import kernels
from shape_fns import Unsupported

MODE = os.environ.get("TF_BACKEND_KERNEL_COMPILE", "async")
_OURS = ("kernels.", "_tf_backend_")


class Deferred(Unsupported):
    """The kernel's compile runs in the background: TensorFlow runs this call."""
    deferred = True


_markers = {}            # code object -> predicate(frame) -> bool
_state = {}              # (dispatcher, sig) or a kernel call's key -> "pending" | "done" | "failed"
_queue = []              # requests not handed to a child yet
_lock = threading.Lock()
_local = threading.local()
_worker = [None]
_running = [0]           # requests in the child now
raised = [0]             # Deferred raised so far (programs stay interpreted while this moves)
_installed = [False]


def mode(value=None):
    """The compile mode ("async" or "sync"); sets it when `value` is given."""
    global MODE
    if value is not None:
        MODE = value
    return MODE


def allow_under(code, predicate=None):
    """Calls made below a frame running `code` may be deferred when `predicate(frame)` is true
    (always, without one); the innermost registered frame decides."""
    _markers[code] = predicate
    install()


def pending():
    """Requests queued or compiling in a child."""
    with _lock:
        return len(_queue) + _running[0]


def install():
    if _installed[0]:
        return
    from numba.core.registry import CPUDispatcher
    orig = CPUDispatcher.compile

    def compile(self, sig):
        if MODE != "async" or getattr(_local, "depth", 0):
            return _nested(orig, self, sig)
        key = (self, tuple(sig) if isinstance(sig, (list, tuple)) else sig)
        state = _state.get(key)
        if state == "pending" and _allowed():
            raised[0] += 1
            raise Deferred("compiling")
        if state is None and _ours(self) and _allowed() and _defer(self, key):
            raised[0] += 1
            raise Deferred("compiling")
        return _nested(orig, self, sig)

    CPUDispatcher.compile = compile
    _installed[0] = True
    import atexit
    atexit.register(_hand_off)


def _nested(orig, disp, sig):
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        return orig(disp, sig)
    finally:
        _local.depth -= 1


def _ours(disp):
    return getattr(disp.py_func, "__module__", "").startswith(_OURS)


def _allowed():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code in _markers:
            p = _markers[f.f_code]
            return p is None or bool(p(f))
        f = f.f_back
    return False


def _address(disp):
    """How a child rebuilds `disp`: (module file or None, module name, the module global whose
    code `disp` compiles, qualified name, jit options, locals), or None. The kernels build
    their dispatchers in many ways (pairs, `jit.parallel` clones, loops generated on first use)
    but always over a module-level function; numba's cache files an entry under the module's
    file, the qualified name and the code, so an equal rebuild in the child finds it."""
    fn = disp.py_func
    mod = sys.modules.get(fn.__module__)
    if mod is None or fn.__closure__ is not None:
        return None
    for name, v in vars(mod).items():
        v = getattr(v, "py_func", v)
        if getattr(v, "__code__", None) is fn.__code__ and getattr(v, "__closure__", 1) is None:
            file = None if mod.__name__.startswith("kernels.") else mod.__file__
            return (file, mod.__name__, name, fn.__qualname__, dict(disp.targetoptions),
                    dict(disp.locals))
    return None


def _on_disk(disp, sig):
    """Whether numba's cache index already holds `disp` for `sig` (compile() only loads)."""
    try:
        cache = disp._cache
        key = cache._index_key(sig, disp.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - numba internals moved: assume it is there (no deferral)
        return True


def _defer(disp, key):
    """Queue a child compile of `disp` for `key`'s signature; False when it must compile here."""
    if type(disp._cache).__name__ == "NullCache" or _on_disk(disp, key[1]):
        return False
    addr = _address(disp)
    if addr is None:
        return False
    with _lock:
        if key in _state:
            return _state[key] == "pending"
        _state[key] = "pending"
        _queue.append((key, ("function", addr, key[1])))
        _start_worker()
    return True


SMALL_VALUES = 256      # inputs up to this many elements travel with their values


def warm_kernel(op, attrs, arrays, out_specs):
    """After a Deferred call: ask the next child to run the op's kernel once on inputs like
    these (small inputs, such as shapes and axes, with their values; larger ones as zeros of the
    same shape, dtype and writability) so that every function its path needs compiles in one
    go, not one per run of the script as each is met after the one before it compiled."""
    if MODE != "async":
        return
    try:
        ins = [(a.shape, a.dtype.str, bool(a.flags.writeable),
                a.copy() if a.size <= SMALL_VALUES else None) for a in arrays]
        outs = [(tuple(sp.shape), sp.dtype.str) for sp in out_specs]
        key = ("kernel", op, repr(sorted(attrs.items())), tuple((i[0], i[1], i[2]) for i in ins))
        payload = pickle.dumps(("kernel", op, dict(attrs), ins, outs))
    except Exception:  # noqa: BLE001 - unpicklable attrs, no specs: the function requests do
        return
    with _lock:
        if key in _state:
            return
        _state[key] = "pending"
        _queue.insert(0, (key, payload))
        _start_worker()


def _start_worker():
    if _worker[0] is None or not _worker[0].is_alive():
        _worker[0] = threading.Thread(target=_serve, name="tf_backend-kernel-compile",
                                      daemon=True)
        _worker[0].start()


def _serve():
    while True:
        with _lock:
            if not _queue:
                _worker[0] = None
                return
            batch = list(_queue)
            _queue.clear()
            _running[0] = len(batch)
        ok = _child([item for _, item in batch])
        with _lock:
            for (key, _), good in zip(batch, ok):
                _state[key] = "done" if good else "failed"
            _running[0] = 0


def _hand_off():
    """At exit: the requests no child took yet go to one last child that outlives this
    process (the in-flight one finishes too), so the next run finds them in the cache."""
    with _lock:
        items = [item for _, item in _queue]
        _queue.clear()
    if not items:
        return
    try:
        fd, path = tempfile.mkstemp(suffix=".kernels.pkl")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(items, f)
        kernels.detached_child("kernels.cpu.deferred", path, "--unlink")
    except (OSError, subprocess.SubprocessError, pickle.PicklingError):
        pass


def _child(items):
    """Compile `items` (("function", address, sig) or a pickled kernel run) in one child
    process; per item whether it compiled."""
    fd, path = tempfile.mkstemp(suffix=".kernels.pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(items, f)
        r = subprocess.run([sys.executable, "-m", "kernels.cpu.deferred", path],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           preexec_fn=kernels.lowest_priority, timeout=1800,
                           cwd=kernels.ROOT)
        done = set(int(x) for x in r.stdout.split() if x.isdigit())
        return [i in done for i in range(len(items))]
    except (OSError, subprocess.SubprocessError, pickle.PicklingError):
        return [False] * len(items)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def main(path, unlink=False):
    """The child: compile each item into numba's disk cache; print the index of each that did."""
    import importlib
    with open(path, "rb") as f:
        items = pickle.load(f)
    if unlink:
        os.unlink(path)
    from kernels.cpu import elementwise as ew, gemm, loops
    gemm.available()
    loops._threads_ready()
    import types
    import numba
    for i, item in enumerate(items):
        if isinstance(item, bytes):
            if _run_kernel(*pickle.loads(item)[1:]):
                _done(i)
            continue
        _, (file, modname, name, qualname, options, local_types), sig = item
        try:
            if file is None:
                mod = importlib.import_module(modname)
            else:
                with open(file) as f:
                    mod = ew.import_generated(f.read(), os.path.basename(file), modname)
            fn = getattr(mod, name)
            fn = getattr(fn, "py_func", fn)
            ew.ensure_helpers(fn)   # the scalar functions a generated loop calls
            clone = types.FunctionType(fn.__code__, fn.__globals__, qualname.rsplit(".", 1)[-1],
                                       fn.__defaults__, None)
            clone.__qualname__, clone.__module__ = qualname, fn.__module__
            numba.jit(cache=True, locals=local_types, **options)(clone).compile(sig)
        except Exception:  # noqa: BLE001 - the parent compiles this one itself
            continue
        _done(i)
    return 0


def _done(i):
    try:
        print(i, flush=True)
    except OSError:   # the parent exited (a closed pipe): finish the batch for the next run
        pass


def _run_kernel(op, attrs, ins, outs):
    """The op's CPU kernel once on stand-in inputs (numba compiles and caches what it calls)."""
    import numpy as np
    import kernels
    kernels.load("cpu")
    kdef, _ = kernels.lookup(op, "cpu", attrs)
    if kdef is None:
        return False
    arrays = []
    for shape, dt, writable, value in ins:
        a = np.array(value) if value is not None else np.zeros(shape, np.dtype(dt))
        a.flags.writeable = writable
        arrays.append(a)
    outputs = [np.empty(shape, np.dtype(dt)) for shape, dt in outs]
    try:
        with np.errstate(all="ignore"):
            kdef.fn(arrays, outputs, attrs)
    except Exception:  # noqa: BLE001 - stand-in values may take an error path: compiled so far
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--unlink" in sys.argv[2:]))
