"""Compiles a generated loop function in a child process (TF-free): `python -m
kernels.cpu.loop_compile PAYLOAD` where PAYLOAD is a pickle of (loop module file, module name,
[(fused module file, module name)], numba signature). numba writes the machine code to its
on-disk cache; the parent then loads it from there in milliseconds.

Why a process: numba's compile of one loop is seconds of Python (typing, lowering) and LLVM
holding numba's compiler lock. In a thread of the training process it took the GIL from the
steps running meanwhile and blocked their own first-use kernel compiles on that lock: a cold
recurrent classifier's fit took 56 s against 28 s without compiled loops (AVX2 EPYC, 2 cores).
A child process uses the other core and shares neither.
"""
import os
import pickle
import sys


def main(path):
    with open(path, "rb") as f:
        loop_file, loop_mod, fused, sig = pickle.load(f)
    from kernels.cpu import elementwise as ew, gemm, loops
    gemm.available()
    loops._threads_ready()
    for file, mod in fused:
        with open(file) as f:
            ew.import_generated(f.read(), os.path.basename(file), mod)
    with open(loop_file) as f:
        m = ew.import_generated(f.read(), os.path.basename(loop_file), loop_mod)
    m.loop_fn.compile(sig)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
