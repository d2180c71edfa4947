"""Buffer reuse: an elementwise node writes its result into an input buffer that nobody reads
afterwards (same shape and dtype, produced by one of our kernels in this program, not a program
output). At run time the executor reuses the buffer only if it still holds our own numpy array
(a kernel that fell back to TensorFlow hands back TensorFlow's memory, which is never written)."""
from kernels.elementwise_table import TABLE

from ...executor import VIEW_OPS, view_source


def _sole_view_chain(s, producer, consumers, prog):
    """A view op's output shares its input's buffer (kernels.view): writing it is safe only if
    every buffer up the chain of views is read by nothing else either (a split's other pieces
    are other parts of that buffer)."""
    p = producer.get(s)
    while p is not None and p.kind == "kernel" and p.op in VIEW_OPS:
        src = view_source(p)
        if consumers.get(src) != 1 or src in prog.consts:
            return False
        p = producer.get(src)
    return True


def run(prog):
    consumers = prog.consumers()
    producer = prog.producers()
    count = 0
    for n in prog.nodes:
        n.inplace = None
        if not (n.kind == "fused" or (n.kind == "kernel" and n.op in TABLE)) or len(n.outputs) != 1:
            continue
        out = prog.slot_specs.get(n.outputs[0])
        if out is None or not out.fully_defined:
            continue
        for k, s in enumerate(n.inputs):
            p = producer.get(s)
            spec = prog.slot_specs.get(s)
            if (p is not None and p.kind in ("kernel", "fused") and consumers.get(s) == 1
                    and spec is not None and spec.shape == out.shape and spec.dtype == out.dtype
                    and s not in prog.consts and _sole_view_chain(s, producer, consumers, prog)):
                n.inplace = k
                count += 1
                break
    if count:
        prog.notes.append(f"inplace: {count} nodes write into a dead input buffer")
    return prog
