"""Program passes, each a small module: `run(program) -> program` (in place), notes in program.notes."""
from . import const_fold, dce, fuse_elementwise, identity, shapes

PIPELINE = (identity, shapes, const_fold, dce, fuse_elementwise)


def optimize(prog):
    for p in PIPELINE:
        p.run(prog)
        prog.finalize()
    for n in prog.nodes:
        for sub in n.subs:
            optimize(sub)
    return prog
