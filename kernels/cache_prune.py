"""The cache directory stays bounded: generated kernel modules (`ew_cpu_*`, `fused_cpu_*`,
`region_cpu_*`, `loop_cpu_*`, ...) and the machine code numba keeps for each under
`__pycache__/<module stem>.*` are removed, a module with its files, once unused for
TF_BACKEND_CACHE_DAYS (30) days, and least recently used first while the whole directory is
over TF_BACKEND_CACHE_MB (2048) MiB. Nothing used within the last hour is removed (another
process may be loading it; numba treats a file that vanished as a cache miss and compiles
again). Without this the directory only grew: every change of the generators' sources names a
new set of modules (~90 elementwise modules a set), and a developer's cache reached 980 MiB.
The FunctionDefs kept under `tf_groups/` (tf_adapter._group_fdef) and the drivers' code objects
under `drivers/` (program/driver.py) go by the same rules, each file on its own (a use is a read).

A use is a module's import (elementwise.import_generated marks it: the access time of its .py,
set explicitly, as its modification time is numba's stamp of the source and must not move).
`maybe_start()` (enable) runs `prune` in a detached child at the lowest priority at most once a
day; `tfb cache [--prune]` reports and prunes on demand. No TensorFlow, no numba here (the
kernels package itself imports numpy only).
"""
import os
import subprocess
import sys
import time

import kernels

STAMP = "prune.stamp"
GROUPS = "tf_groups"   # TensorFlow FunctionDefs of variable-op groups (tf_adapter._group_fdef)
DRIVERS = "drivers"    # generated drivers' code objects (tf_backend/program/driver.py)
KEPT = {GROUPS: ".pb", DRIVERS: ".marshal"}   # directories of files each a group of its own
EVERY_S = 24 * 3600
RECENT_S = 3600


def limits():
    """(max bytes, max age in seconds) from TF_BACKEND_CACHE_MB and TF_BACKEND_CACHE_DAYS."""
    def number(name, default):
        try:
            v = float(os.environ.get(name, default))
        except ValueError:
            v = float(default)
        return v if v > 0 else float(default)
    return (int(number("TF_BACKEND_CACHE_MB", 2048) * 2**20),
            number("TF_BACKEND_CACHE_DAYS", 30) * 86400)


def mark_used(path):
    """Record a use of the generated module at `path` (its access time; mtime kept exactly)."""
    try:
        st = os.stat(path)
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except OSError:
        pass


def groups(root):
    """{name: [last use (s), bytes, [paths], orphan]} for the cache directory `root`: each
    generated module's .py with its bytecode and numba's files under its stem; numba files
    whose module is gone and unfinished writes (`*.tmp`) are orphans (last use: their newest
    modification)."""
    out = {}
    dirs = [(root, "", ".py"), (os.path.join(root, "__pycache__"), None, None)]
    dirs += [(os.path.join(root, sub), sub + "/", ext) for sub, ext in KEPT.items()]
    for d, prefix, ext in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if not e.is_file(follow_symlinks=False):
                continue
            if ext and not e.name.endswith((ext, ".tmp")):
                continue   # the choice tables, the stamp
            st = e.stat(follow_symlinks=False)
            name = e.name if e.name.endswith(".tmp") else e.name.split(".", 1)[0]
            g = out.setdefault((prefix or "") + name, [0.0, 0, [], True])
            if ext and e.name.endswith(ext):   # a module, or a kept file: used when read
                g[3] = False
                g[0] = max(g[0], st.st_atime)
            g[0] = max(g[0], st.st_mtime)
            g[1] += st.st_size
            g[2].append(e.path)
    return out


def _remove(paths):
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def prune(root, max_bytes=None, max_age_s=None, now=None):
    """Remove what the policy above says; returns (groups removed, bytes removed, bytes kept)."""
    d_bytes, d_age = limits()
    max_bytes = d_bytes if max_bytes is None else max_bytes
    max_age_s = d_age if max_age_s is None else max_age_s
    now = time.time() if now is None else now
    removed = freed = total = 0
    kept = []
    for used, size, paths, orphan in groups(root).values():
        if orphan and now - used >= RECENT_S:
            _remove(paths)
            removed, freed = removed + 1, freed + size
        else:
            kept.append((used, size, paths))
            total += size
    for used, size, paths in sorted(kept, key=lambda g: g[0]):   # least recently used first
        if now - used < RECENT_S or (now - used < max_age_s and total <= max_bytes):
            break
        _remove(paths)
        removed, freed, total = removed + 1, freed + size, total - size
    return removed, freed, total


def maybe_start(root=None):
    """Start a pruning child for `root` (the cache directory) when the last one started a day
    ago or more, or never; True when one started."""
    if root is None:
        root = kernels.cache_dir()
    stamp = os.path.join(root, STAMP)
    try:
        if time.time() - os.stat(stamp).st_mtime < EVERY_S:
            return False
    except FileNotFoundError:
        if not os.path.isdir(root):
            return False
    except OSError:
        return False
    try:
        with open(stamp, "w"):
            pass
        kernels.detached_child("kernels.cache_prune", root)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


if __name__ == "__main__":
    prune(sys.argv[1])
