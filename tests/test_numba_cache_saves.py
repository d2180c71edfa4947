"""numba's on-disk cache between processes (kernels/cpu/jit.py lock_cache_saves): saves of
different signatures of one function at the same moment both end up in the index, each with
its own data, an entry is never published before its data, and functions a factory makes in
variants carry names of their own (jit.named)."""
import threading
import time

import kernels.cpu  # noqa: F401 - applies the lock
from numba.core import caching


def test_saves_are_locked_here():
    assert getattr(caching.IndexDataCacheFile, "_tf_backend_locked", False)


def test_concurrent_saves_keep_every_entry_with_its_own_data(tmp_path, monkeypatch):
    real_load = caching.IndexDataCacheFile._load_index

    def slow_load(self):   # widen the window between reading the index and writing it
        got = real_load(self)
        time.sleep(0.05)
        return got
    monkeypatch.setattr(caching.IndexDataCacheFile, "_load_index", slow_load)
    files = [caching.IndexDataCacheFile(str(tmp_path), "mod.fn-1.py311", ("stamp", 1))
             for _ in range(4)]
    threads = [threading.Thread(target=f.save, args=((f"sig{i}",), f"code for sig{i}"))
               for i, f in enumerate(files)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.setattr(caching.IndexDataCacheFile, "_load_index", real_load)
    fresh = caching.IndexDataCacheFile(str(tmp_path), "mod.fn-1.py311", ("stamp", 1))
    assert [fresh.load((f"sig{i}",)) for i in range(4)] == [f"code for sig{i}" for i in range(4)]


def test_data_is_written_before_the_index(tmp_path, monkeypatch):
    order = []
    cls = caching.IndexDataCacheFile
    real_data, real_index = cls._save_data, cls._save_index
    monkeypatch.setattr(cls, "_save_data",
                        lambda self, n, d: (order.append("data"), real_data(self, n, d))[1])
    monkeypatch.setattr(cls, "_save_index",
                        lambda self, o: (order.append("index"), real_index(self, o))[1])
    f = cls(str(tmp_path), "mod.g-1.py311", ("stamp", 2))
    f.save(("sig",), "code")
    assert order == ["data", "index"]
    assert f.load(("sig",)) == "code"


def test_an_older_sources_files_are_not_served(tmp_path):
    old = caching.IndexDataCacheFile(str(tmp_path), "mod.h-1.py311", ("old", 1))
    old.save(("sig",), "old code")
    new = caching.IndexDataCacheFile(str(tmp_path), "mod.h-1.py311", ("new", 1))
    assert new.load(("sig",)) is None
    new.save(("sig2",), "new code")
    assert new.load(("sig2",)) == "new code" and new.load(("sig",)) is None


def test_factory_made_kernels_have_a_name_per_variant():
    """The widening/narrowing loops share argument types in pairs (float16 and bfloat16 bits
    are both uint16): under one qualified name, cached code compiled in two processes could
    meet under one symbol and convert bfloat16 as float16 (jit.named)."""
    from kernels.cpu import half_bits
    loops = [half_bits._h2f_loop, half_bits._f2h_loop, half_bits._bf2f_loop,
             half_bits._f2bf_loop]
    names = {f.py_func.__qualname__ for f in loops + list(half_bits._PAR.values())}
    assert len(names) == 8 and not any("<locals>" in n for n in names)


def test_no_cached_kernel_closes_over_a_dispatcher():
    """numba keys a cached function by the pickled contents of its closure, and a dispatcher or
    intrinsic pickles with an identity of its process: such a kernel misses the cache in every
    process, compiles again and adds an entry to its index (the half-precision conversion
    loops did, 0.8 s at a mixed-precision fit's first cast)."""
    import gc
    import importlib
    import pkgutil

    import kernels.cpu
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher
    from numba.core.extending import _Intrinsic
    for m in pkgutil.iter_modules(kernels.cpu.__path__):
        importlib.import_module(f"kernels.cpu.{m.name}")
    bad = []
    for o in gc.get_objects():
        # (type(), not isinstance: gc's list can hold dead weak proxies, which raise there)
        if (issubclass(type(o), Dispatcher) and not isinstance(o._cache, NullCache)
                and o.py_func.__closure__):
            cells = [c.cell_contents for c in o.py_func.__closure__]
            if any(issubclass(type(c), (Dispatcher, _Intrinsic)) for c in cells):
                bad.append(o.py_func.__qualname__)
    assert not bad, bad


WARM_SCRIPT = """
import numpy as np, tensorflow as tf, tf_backend
tf_backend.enable()
x = tf.constant(np.linspace(-2, 2, 300000).astype(np.float32))
for t in (tf.bfloat16, tf.float16):
    h = tf.cast(x, t)
    tf.cast(h, tf.float32)
(2.0 * x).numpy()
"""


def test_a_second_process_compiles_nothing():
    """What one process compiled, the next loads: a kernel whose cache key changes between
    processes (a closure over a dispatcher, a dynamic global) compiles again in every one."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_DEBUG_CACHE="1", TF_BACKEND_KERNEL_COMPILE="sync",
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_BACKEND", None)
    runs = [subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    second = runs[1].stdout + runs[1].stderr
    saved = [l for l in second.splitlines() if "data saved" in l]
    assert not saved, saved[:10]
    assert "data loaded" in second   # the check saw numba's cache at work


_CACHED_MODULE = '''
from numba import njit

@njit(cache=True)
def inc(x):
    return x + 1.0
'''

_LOADER = '''
import sys
import kernels.cpu  # noqa: F401 - applies the deferred linking bitcode
import llvmlite.binding as ll
from numba import njit
import cachedmod

assert cachedmod.inc(1.0) == 2.0
lib = cachedmod.inc.overloads[cachedmod.inc.signatures[0]].library
if sys.argv[1] == "compile":
    sys.exit(0)
bitcode = lib.__dict__.get("_tf_backend_linking_bitcode")
assert bitcode is not None and lib._shared_module is None, "loaded without deferring"
mod = ll.parse_bitcode(bitcode)
from_bitcode = {g.name for gs in (mod.functions, mod.global_variables) for g in gs
                if not g.is_declaration}
engine = lib.codegen._engine
assert from_bitcode and all(engine.is_symbol_defined(n) for n in from_bitcode)


@njit
def twice_inc(x):   # compiled here, so it links against the loaded library's bitcode
    return cachedmod.inc(x) * 2.0


assert twice_inc(1.0) == 4.0
assert lib._shared_module is not None
print("ok")
'''


def test_cached_functions_load_without_parsing_their_linking_bitcode(tmp_path):
    """A cached function loads with its symbols read from the object code, runs, and a
    function compiled later still links against it (the bitcode is parsed then)."""
    import os
    import subprocess
    import sys
    (tmp_path / "cachedmod.py").write_text(_CACHED_MODULE)
    (tmp_path / "loader.py").write_text(_LOADER)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    for phase in ("compile", "load"):
        got = subprocess.run([sys.executable, str(tmp_path / "loader.py"), phase], env=env,
                             capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip() == "ok"


def test_elf_symbols_of_a_non_elf_or_malformed_object_are_left_to_numba():
    from kernels.cpu.jit import _elf_defined_symbols
    assert _elf_defined_symbols(b"\xcf\xfa\xed\xfe" + bytes(60)) is None   # Mach-O
    assert _elf_defined_symbols(b"") is None
    truncated = b"\x7fELF\x02\x01" + bytes(0x22) + (10**6).to_bytes(8, "little") + bytes(20)
    assert _elf_defined_symbols(truncated) is None


def test_writeable_and_read_only_inputs_share_one_compile():
    """jit.readonly_inputs: an elementwise loop called with a tensor's read-only view and with a
    writeable buffer compiles once (the read-only signature); the output stays writeable, the
    values are the same, and a loop given a read-only output still fails as numba does."""
    import numpy as np
    import pytest
    from numba.core import errors as nerr
    from kernels.cpu import elementwise as ew
    from kernels.cpu.jit import readonly_inputs
    from numba import njit

    L = ew._Loops("AddV2_f")
    x = np.arange(7, dtype=np.float64)
    ro = x.copy()
    ro.flags.writeable = False
    out_a, out_b = np.empty(7), np.empty(7)
    L.loop(ro, ro, out_a, True, True)
    L.loop(x, x.copy(), out_b, True, True)
    np.testing.assert_array_equal(out_a, 2 * x)
    np.testing.assert_array_equal(out_b, 2 * x)
    f64 = [s for s in L.loop.signatures if str(s[0].dtype) == "float64"]
    assert len(f64) == 1 and not f64[0][0].mutable and f64[0][2].mutable, L.loop.signatures

    def copy(x, out):
        for i in range(out.size):
            out[i] = x[i]

    fn = readonly_inputs(njit(copy), ("out",))
    with pytest.raises(nerr.TypingError):
        fn(x, ro)
    np.testing.assert_array_equal(ro, x)
