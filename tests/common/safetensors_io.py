"""safetensors files for the PyTorch reference scripts of the tests.

One reader and one writer (F32, F64 and I64 tensors, the header padded to 8
bytes as psync writes it), so the references and psync exchange weights,
inputs and results in the format psync-worker --init/--save uses. Imported by
tests/integration/worker/*_reference.py and tests/unit/optim/torch_optim_reference.py.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def write_safetensors(path, tensors):
    """Writes {name: tensor} in insertion order; each keeps its dtype."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        a = t.detach().contiguous().numpy()
        data = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path, with_metadata=False):
    """{name: tensor}, and the "__metadata__" map too when with_metadata."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=_DTYPES[e["dtype"]]).copy().reshape(e["shape"])
        out[name] = torch.from_numpy(arr)
    return (out, meta) if with_metadata else out
