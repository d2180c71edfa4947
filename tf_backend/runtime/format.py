"""Program files: read and write (TensorFlow-free). The format is described in FORMAT.md.

A zip archive (stored, not compressed): `program.json` (the header: magic, format version,
slots, nodes, inputs/outputs) and one `weights/<n>.npy` per constant. zip's CRC-32 per entry
catches corrupt data; a truncated file has no central directory and fails to open.
"""
import io
import json
import math
import os
import zipfile

import numpy as np

from .errors import ProgramFileError

MAGIC = "tf_backend.program"
FORMAT_VERSION = 1     # what a writer writes unless a file needs version 2
READS = (1, 2)         # 2: a float constant may be stored narrower than its slot (weights_dtype)
HEADER = "program.json"
KINDS = ("kernel", "alias", "noop")


def encode_attr(v, where=""):
    """An attr value as JSON: dtypes, tuples and non-finite floats are tagged one-key objects."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return {"dtype": np.dtype(v).name}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, tuple):
        return {"tuple": [encode_attr(e, where) for e in v]}
    if isinstance(v, list):
        return [encode_attr(e, where) for e in v]
    raise TypeError(f"attr value {v!r} ({type(v).__name__}) {where} has no program-file encoding")


def decode_attr(v):
    if isinstance(v, list):
        return [decode_attr(e) for e in v]
    if isinstance(v, dict):
        (tag, x), = v.items()
        if tag == "dtype":
            return np.dtype(x)
        if tag == "tuple":
            return tuple(decode_attr(e) for e in x)
        if tag == "float":
            return float(x)
        raise ValueError(f"unknown attr tag {tag!r}")
    return v


def write(path, header, blobs, version=FORMAT_VERSION):
    """Write a program file. header: the JSON-able dict (magic/version added here);
    blobs: {entry name: numpy array}."""
    header = {"magic": MAGIC, "format_version": version, **header}
    tmp = f"{path}.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(HEADER, json.dumps(header, indent=1, allow_nan=False))
        for name, arr in blobs.items():
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
            zf.writestr(name, buf.getvalue())
    os.replace(tmp, path)


def read(path):
    """(header, {entry name: read-only numpy array}); ProgramFileError for anything wrong."""
    try:
        zf = zipfile.ZipFile(path, "r")
    except FileNotFoundError:
        raise ProgramFileError(path, "no such file") from None
    except zipfile.BadZipFile as e:
        raise ProgramFileError(path, f"not a tf_backend program file, or truncated ({e})") from None
    except OSError as e:
        raise ProgramFileError(path, f"cannot read ({e})") from None
    with zf:
        try:
            header = json.loads(zf.read(HEADER))
        except KeyError:
            raise ProgramFileError(path, f"not a tf_backend program file (no {HEADER})") from None
        except (zipfile.BadZipFile, ValueError, EOFError, OSError) as e:
            raise ProgramFileError(path, f"corrupt header ({type(e).__name__}: {e})") from None
        if not isinstance(header, dict) or header.get("magic") != MAGIC:
            raise ProgramFileError(path, "not a tf_backend program file (bad magic)")
        version = header.get("format_version")
        if version not in READS:
            raise ProgramFileError(path, f"format version {version!r}; this runtime reads version "
                                         f"{' and '.join(map(str, READS))} (re-export with a "
                                         f"matching tf_backend)")
        blobs = {}
        for name in {b for _, b in header.get("consts", ())}:
            try:
                arr = np.load(io.BytesIO(zf.read(name)), allow_pickle=False)
            except KeyError:
                raise ProgramFileError(path, f"missing weights entry {name}") from None
            except (zipfile.BadZipFile, ValueError, EOFError, OSError) as e:
                raise ProgramFileError(path, f"corrupt weights entry {name} "
                                             f"({type(e).__name__}: {e})") from None
            arr.flags.writeable = False
            blobs[name] = arr
    return header, blobs


def retype(header, blobs, old, new):
    """A program's header and weights with every `old` dtype (slots, inputs, constants, node
    attrs and output specs) made `new`: a float32 program run in float16. Pure data."""
    old, new = np.dtype(old).name, np.dtype(new).name

    def attr(v):
        if isinstance(v, dict) and v.get("dtype") == old:
            return {"dtype": new}
        if isinstance(v, list):
            return [attr(e) for e in v]
        if isinstance(v, dict) and "tuple" in v:
            return {"tuple": [attr(e) for e in v["tuple"]]}
        return v

    h = json.loads(json.dumps(header))
    h["slot_specs"] = [[s, new if d == old else d, shape] for s, d, shape in h["slot_specs"]]
    for i in h["inputs"]:
        i["dtype"] = new if i["dtype"] == old else i["dtype"]
    for n in h["nodes"]:
        n["attrs"] = {k: attr(v) for k, v in n.get("attrs", {}).items()}
        if n.get("out_specs") is not None:
            n["out_specs"] = [[new if d == old else d, s] for d, s in n["out_specs"]]
    specs = {s: d for s, d, _ in h["slot_specs"]}
    out = dict(blobs)
    for slot, entry in h["consts"]:
        a = out[entry]
        if specs.get(slot) == new and a.dtype.kind == "f" and a.dtype != np.dtype(new):
            a = a.astype(new)
            a.flags.writeable = False
            out[entry] = a
    return h, out
