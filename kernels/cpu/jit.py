"""numba compilation helpers for the CPU kernels."""
import os
import types

from numba import njit


def parallel(fn, **options):
    """njit(parallel=True, cache=True, nogil=True, **options) over a copy of `fn` with its own
    qualified name.

    numba's on-disk cache files a function under its qualified name and first line, and keys
    the entries by signature and bytecode only, not by options such as parallel=True. The
    serial and the parallel compilation of one function therefore load each other's machine
    code: whichever compiled first served both (measured: the "parallel" im2col and Winograd
    transforms ran on one thread, and the GEMM team's parallel driver once ran its blocks in
    turn, ResNet-50 taking 108 ms instead of 60). A copy named `<name>__parallel` gets its own
    cache file."""
    clone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "__parallel",
                               fn.__defaults__, fn.__closure__)
    clone.__qualname__ = fn.__qualname__ + "__parallel"
    clone.__module__ = fn.__module__
    clone.__doc__ = fn.__doc__
    opts = {"cache": True, "nogil": True, **options, "parallel": True}
    return njit(**opts)(clone)


def readonly_inputs(disp, written):
    """Compile `disp` (a numba dispatcher) with its array arguments typed read-only, but those
    whose parameter is named in `written`, whatever the flags of the arrays it is called with;
    returns `disp`.

    numba types an array's writeable flag: an input that is a tensor's read-only view and one
    that is our own buffer are two signatures, two compiles of the same machine code (a cold
    default test run compiled 67 elementwise loops twice so, 27 s). Here a call with writeable
    inputs compiles, or loads from the disk cache, the read-only signature and files the
    entry point under both (read-only and writeable arrays have one data model, so the
    compiled function unboxes either); writing an input stays a typing error, as before."""
    import inspect
    from numba.core import sigutils, types as nt
    from numba.core.compiler_lock import global_compiler_lock
    names = list(inspect.signature(disp.py_func).parameters)
    reads = {i for i, n in enumerate(names) if n not in written}

    def compile_exact(sig):   # the class's, looked up at each call (deferred.py replaces it)
        return type(disp).compile(disp, sig)

    def compile(sig):
        args, _ = sigutils.normalize_signature(sig)
        args = tuple(args)
        ro = tuple(a.copy(readonly=True)
                   if i in reads and isinstance(a, nt.Array) and a.mutable else a
                   for i, a in enumerate(args))
        if ro == args:
            return compile_exact(sig)
        entry = compile_exact(ro)
        with global_compiler_lock:
            cres = disp.overloads[ro]
            disp._insert([a._code for a in args], cres.entry_point, cres.objectmode)
        return entry

    disp.compile = compile
    return disp


def entry_point(disp, arg_types):
    """The compiled entry point of numba dispatcher `disp` for these argument types (numba
    types), or None while it has none: calling it skips the dispatcher's typing of each
    argument (a 4x4 product through mm32: 0.79 us by the dispatcher, 0.40 by its entry point).
    The caller guarantees the arguments' types (dtype, rank, layout): the entry point unboxes
    them as typed."""
    cres = disp.overloads.get(tuple(arg_types))
    return None if cres is None else cres.entry_point


def named(fn, name):
    """fn under a qualified name of its own, for a function a factory makes in variants.
    numba names a compiled function by module, qualified name, argument types and a counter
    of the process that compiled it, with linkonce_odr linkage: two closures of one qualified
    name and argument types (say the float16 and bfloat16 widening loops, or the tile calls of
    16- and 32-column panels), cached by code compiled in different processes, can meet under
    one symbol in a third, which then runs one for the other (seen: a filter gradient writing
    past its block, a segmentation fault once its driver and another came from the cache). A
    name per variant leaves only identical code under any one symbol."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def lock_cache_saves():
    """Make numba's on-disk cache safe between processes (our compiles run in child processes,
    several at once, beside the parent that loads their results).

    numba 0.68's IndexDataCacheFile.save reads the index, picks the first free data file
    number, writes the index, then the data, without a lock: two processes adding different
    signatures of one function can both pick `.2`, and the index keeps one key while the file
    holds the other's machine code; a reader between the index and the data write, or after
    an upgrade left older `.N` files, loads code compiled for other types or older sources.
    Either can run as a segmentation fault in a later process (numba issues 4807, 10128; the
    crashes seen here in the float32 tile drivers had another cause, see `named`, but our
    compile children do run several saves at once). Here a save holds an exclusive lock on
    `<index>.lock`, reads the index under it, and writes the data before the index, so an
    entry is only ever published with its own data. Loads stay lock-free (both files are
    replaced atomically). Applied once; a numba without these methods is left as it is."""
    try:
        import fcntl
        from numba.core import caching
    except ImportError:   # not POSIX, or another numba layout
        return False
    cls = caching.IndexDataCacheFile
    if getattr(cls, "_tf_backend_locked", False):
        return True
    if not all(hasattr(cls, a) for a in ("_load_index", "_save_index", "_save_data",
                                         "_data_name")):
        return False

    def save(self, key, data):
        try:
            fd = os.open(self._index_path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            fd = None   # an unwritable cache: numba's own save fails the same way
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            overloads = self._load_index()
            name = overloads.get(key)
            if name is None:
                taken, i = set(overloads.values()), 1
                while self._data_name(i) in taken:
                    i += 1
                name = self._data_name(i)
            self._save_data(name, data)
            overloads[key] = name
            self._save_index(overloads)
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    cls.save = save
    cls._tf_backend_locked = True
    return True


def _elf_defined_symbols(obj):
    """The names a 64-bit little-endian ELF relocatable object defines (functions and data, any
    binding), or None for anything else or a malformed one: what numba reads from the linking
    bitcode, without LLVM."""
    import struct
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    try:
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        if shentsize != 64 or shoff + shnum * 64 > len(obj):
            return None
        names = set()
        for i in range(shnum):
            if struct.unpack_from("<I", obj, shoff + i * 64 + 4)[0] != 2:   # SHT_SYMTAB
                continue
            off, size, link = struct.unpack_from("<QQI", obj, shoff + i * 64 + 0x18)
            strtab, = struct.unpack_from("<Q", obj, shoff + link * 64 + 0x18)
            for name, info, _, shndx, _, _ in struct.iter_unpack("<IBBHQQ",
                                                                 obj[off:off + size]):
                # defined (not SHN_UNDEF), named, not a section or file symbol
                if shndx and name and (info & 0xF) not in (3, 4):
                    names.add(obj[strtab + name:obj.index(b"\0", strtab + name)].decode())
        return names
    except (struct.error, ValueError):   # truncated tables, bad offsets, undecodable names
        return None


def defer_linking_bitcode():
    """Load numba's cached functions without parsing their linking bitcode.

    A cached function holds its machine code and, for inlining into functions compiled later,
    its LLVM bitcode. numba 0.68 parses that bitcode at every load only to list the symbols the
    library defines: 3.1 of a load's 4.2 ms (59 loads in a recurrent classifier's first step,
    0.19 s). Here the names come from the object code's ELF symbol table (the same set for
    every library such a step loads; a test compares them) and the bitcode is parsed when
    another library first links against this one. Objects that are not 64-bit ELF, and a numba
    of another layout, keep numba's own load. Applied once."""
    try:
        import llvmlite.binding as ll
        from numba.core import codegen
    except ImportError:
        return False
    cls = codegen.CPUCodeLibrary
    if getattr(cls, "_tf_backend_lazy_linking", False):
        return True
    needed = ("_unserialize", "_get_module_for_linking", "enable_object_caching",
              "_set_compiled_object", "_finalize_final_module")
    if not all(hasattr(cls, a) for a in needed) or \
            not hasattr(codegen, "JitEngine") or \
            not hasattr(codegen.JitEngine, "_load_defined_symbols"):
        return False
    numba_unserialize = cls.__dict__["_unserialize"].__func__
    numba_linking = cls._get_module_for_linking

    def _unserialize(klass, cg, state):
        name, kind, data = state
        names = _elf_defined_symbols(data[0]) if kind == "object" else None
        defined = getattr(getattr(cg, "_engine", None), "_defined_symbols", None)
        if names is None or not isinstance(defined, set):
            return numba_unserialize(klass, cg, state)
        self = cg.create_library(name)
        self.enable_object_caching()
        self._set_compiled_object(data[0])
        self._tf_backend_linking_bitcode = data[1]
        self._finalize_final_module()
        defined |= names
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_tf_backend_linking_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return numba_linking(self)

    cls._unserialize = classmethod(_unserialize)
    cls._get_module_for_linking = _get_module_for_linking
    cls._tf_backend_lazy_linking = True
    return True


def prepare_target():
    """Set up numba's CPU target now (its lowering and typing registries: ~0.1 s and ~48K
    objects, which the first kernel load would otherwise pay). The TF_BACKEND start-up path
    calls this before it freezes what exists, so that these long-lived objects are not scanned
    by every later full collection of the cyclic collector."""
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()
