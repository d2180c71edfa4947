"""Program files: export with TensorFlow, load and run where TensorFlow cannot be imported."""
import json
import zipfile

import numpy as np
import pytest

import tf_backend
from tf_backend import numerics, runtime, zoo
from tf_backend.runtime import ExportError, ProgramFileError, ProgramInputError, ProgramRunError

from . import notf

# model -> reduction length for the numerics contract (the longest sum behind an output)
SMALL = {"small_mlp": 32, "small_cnn": 144, "resnet_block": 144}
BIG = {"mlp": 784, "cnn": 400, "resnet50": 4608, "mobilenetv2": 1280, "transformer": 1024}

RUN = '''
import json, threading, numpy as np
import tf_backend.runtime as runtime
D, NAMES = DIR, NAMES_
res = {"outputs": {}}
for name in NAMES:
    p = runtime.load(f"{D}/{name}.tfbp")
    out = p([np.load(f"{D}/{name}.x.npy")])
    assert isinstance(out, list) and all(type(o) is np.ndarray for o in out)
    np.save(f"{D}/{name}.ours.npy", out[0])
if CONCURRENT:
    p = runtime.load(f"{D}/{NAMES[0]}.tfbp")
    x = np.load(f"{D}/{NAMES[0]}.x.npy")
    xs = [x * np.float32(1 + 0.25 * k) for k in range(8)]
    want = [p(xi)[0] for xi in xs]
    bad, errors = [], []
    def work(k):
        try:
            for _ in range(6):
                if not np.array_equal(p(xs[k])[0], want[k]):
                    bad.append(k)
        except Exception as e:
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    res["concurrent"] = {"mismatches": len(bad), "errors": errors,
                         "distinct": len({w.tobytes() for w in want})}
print(json.dumps(res))
'''


def _export_zoo(tf, names, d, batch):
    import keras
    assert tf_backend.mode() == "off"   # the reference is stock TensorFlow
    for name in names:
        m = zoo.build(name, keras)
        x, _ = zoo.sample_batch(m, batch)
        tf_backend.export(m, [tf.TensorSpec(x.shape, tf.float32)], str(d / f"{name}.tfbp"))
        ref = tf.function(lambda v: m(v, training=False))(x).numpy()
        np.save(d / f"{name}.x.npy", x)
        np.save(d / f"{name}.ref.npy", ref)


def _run_without_tf(d, names, concurrent):
    code = (RUN.replace("DIR", repr(str(d))).replace("NAMES_", repr(list(names)))
            .replace("CONCURRENT", repr(concurrent)))
    return notf.run(code, timeout=600)


def _check_outputs(d, tolerances):
    for name, rlen in tolerances.items():
        ours, ref = np.load(d / f"{name}.ours.npy"), np.load(d / f"{name}.ref.npy")
        assert numerics.compare(ours, ref, "reduction", rlen) is None, (
            name, numerics.compare(ours, ref, "reduction", rlen))


def test_zoo_export_runs_without_tensorflow_and_matches_stock(tf, tmp_path):
    names = ["small_cnn", "small_mlp", "resnet_block"]
    _export_zoo(tf, names, tmp_path, batch=4)
    res = _run_without_tf(tmp_path, names, concurrent=True)
    _check_outputs(tmp_path, SMALL)
    c = res["concurrent"]
    assert c == {"mismatches": 0, "errors": [], "distinct": 8}, c


@pytest.mark.slow
def test_big_zoo_export_runs_without_tensorflow_and_matches_stock(tf, tmp_path):
    _export_zoo(tf, list(BIG), tmp_path, batch=1)
    _run_without_tf(tmp_path, list(BIG), concurrent=False)
    _check_outputs(tmp_path, BIG)


@pytest.fixture
def mlp_file(tf, tmp_path):
    import keras
    m = zoo.build("small_mlp", keras)
    path = tmp_path / "mlp.tfbp"
    tf_backend.export(m, [tf.TensorSpec((None, 20), tf.float32)], str(path))
    return m, path


def test_dynamic_batch_and_input_checks(tf, mlp_file):
    m, path = mlp_file
    p = runtime.load(str(path))
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 20)).astype(np.float32)
        out = p(x)   # a single array is accepted
        assert numerics.compare(out[0], m(x, training=False).numpy(), "reduction", 32) is None
    with pytest.raises(ProgramInputError, match="takes 1 inputs, got 2"):
        p([np.zeros((1, 20), np.float32)] * 2)
    with pytest.raises(ProgramInputError, match=r"expected float32\[\?,20\], got float64\[1, 20\]"):
        p(np.zeros((1, 20)))
    with pytest.raises(ProgramInputError, match=r"got float32\[1, 21\]"):
        p(np.zeros((1, 21), np.float32))


def _rewrite(src, dst, edit_header):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for zi in zin.infolist():
            data = zin.read(zi.filename)
            if zi.filename == "program.json":
                h = json.loads(data)
                edit_header(h)
                data = json.dumps(h)
            zout.writestr(zi, data)


def test_bad_files_raise_program_file_error(mlp_file, tmp_path):
    _, path = mlp_file
    blob = path.read_bytes()

    other = tmp_path / "v3.tfbp"
    _rewrite(path, other, lambda h: h.update(format_version=3))
    with pytest.raises(ProgramFileError, match="v3.tfbp: format version 3; this runtime reads "
                                               "version 1 and 2") as e:
        runtime.load(str(other))
    assert e.value.path == str(other)

    cut = tmp_path / "cut.tfbp"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ProgramFileError, match="cut.tfbp: .*truncated"):
        runtime.load(str(cut))

    bad = tmp_path / "bad.tfbp"
    with zipfile.ZipFile(path) as zf:
        zi = zf.getinfo("weights/0.npy")
    local = blob[zi.header_offset:zi.header_offset + 30]
    start = zi.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(
        local[28:30], "little")
    flipped = bytearray(blob)
    flipped[start + 200] ^= 0xFF
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ProgramFileError, match="bad.tfbp: corrupt weights entry weights/0.npy"):
        runtime.load(str(bad))

    broken = tmp_path / "broken.tfbp"
    _rewrite(path, broken, lambda h: h["nodes"][0].update(inputs=[h["n_slots"] - 1]))
    with pytest.raises(ProgramFileError, match="broken.tfbp: malformed header .*reads slot"):
        runtime.load(str(broken))

    junk = tmp_path / "junk.tfbp"
    junk.write_bytes(b"hello" * 100)
    with pytest.raises(ProgramFileError, match="junk.tfbp: not a tf_backend program file"):
        runtime.load(str(junk))
    with pytest.raises(ProgramFileError, match="no such file"):
        runtime.load(str(tmp_path / "missing.tfbp"))


def test_export_refuses_nodes_that_need_tensorflow(tf, tmp_path):
    @tf.function
    def noisy(x):
        return x + tf.random.uniform(tf.shape(x))

    with pytest.raises(ExportError, match="need TensorFlow's kernels: RandomUniform"):
        tf_backend.export(noisy, [tf.TensorSpec((4,), tf.float32)], str(tmp_path / "n.tfbp"))
    assert not (tmp_path / "n.tfbp").exists()


def test_runtime_errors_name_node_and_op(tf, tmp_path):
    path = str(tmp_path / "r.tfbp")
    tf_backend.export(lambda x: tf.reshape(x, [-1, 3]) * 2.0, [((None,), np.float32)], path)
    p = runtime.load(path)
    np.testing.assert_array_equal(p(np.arange(6, dtype=np.float32))[0],
                                  np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    with pytest.raises(ProgramRunError, match=r"op Reshape; inputs: float32\[4\]"):
        p(np.arange(4, dtype=np.float32))


def test_in_place_consumer_of_a_view_leaves_the_viewed_buffer_alone(tf, tmp_path):
    w = tf.constant(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))

    @tf.function
    def f(x):
        a = tf.matmul(x, w)
        c = tf.exp(tf.reshape(a, [-1]))   # Exp may reuse its input buffer: the Reshape view of a
        return c, a * 3.0                 # ... which is read again here

    x = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    path = str(tmp_path / "view.tfbp")
    tf_backend.export(f, [x], path)
    for got, ref in zip(runtime.load(path)(x), f(x)):
        assert numerics.compare(got, ref.numpy(), "reduction", 8) is None
