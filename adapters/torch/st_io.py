"""Safetensors read/write without the `safetensors` package.

The format: an 8-byte little-endian header length N, N bytes of JSON (padded with spaces), then the raw
little-endian tensor bytes. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin,
end]} (offsets into the data section) and may hold a "__metadata__" string map. The harness's native
store (native/CONTRACT.md) reads what `save` writes: data in entry order, no holes, no trailing bytes.
"""
from __future__ import annotations

import json
import os
import struct

import torch

DTYPES = {
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F64": torch.float64,
}
NAMES = {v: k for k, v in DTYPES.items()}


def load(path: str, shared: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of the file and the metadata map. The data section is read once into one buffer and the
    tensors are views of it (one copy from the page cache, none per tensor: this runs for every cell).
    shared: the buffer is the file itself, mapped shared (no copy at all): writing a tensor writes the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"safetensors {path}: {size} bytes is too short for a header")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise ValueError(f"safetensors {path}: header length {n} runs past the end of the file")
        header = json.loads(f.read(n).decode("utf-8"))
        if shared:
            data = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)[8 + n :]
        else:
            data = torch.empty(size - 8 - n, dtype=torch.uint8)
        if data.numel() and not shared:
            got = f.readinto(memoryview(data.numpy()))
            if got != data.numel():
                raise ValueError(f"safetensors {path}: read {got} of {data.numel()} data bytes")
    meta = header.pop("__metadata__", {}) or {}
    out: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"safetensors {path}: tensor {name!r}: dtype {info['dtype']!r} is not supported")
        begin, end = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        count = 1
        for s in shape:
            count *= s
        item = torch.empty((), dtype=dtype).element_size()
        if end - begin != count * item or not 0 <= begin <= end <= data.numel():
            raise ValueError(f"safetensors {path}: tensor {name!r}: bytes [{begin}, {end}) do not hold shape {shape} of {info['dtype']}")
        if count == 0:
            out[name] = torch.empty(shape, dtype=dtype)
        elif begin % item == 0:
            out[name] = data[begin:end].view(dtype).reshape(shape)
        elif shared:
            raise ValueError(f"safetensors {path}: tensor {name!r} is not aligned for {info['dtype']}: it cannot be mapped")
        else:  # unaligned for its dtype (not written by clip-parity): a copy of its own
            out[name] = data[begin:end].clone().view(dtype).reshape(shape)
    return out, meta


def write_back(views: dict[str, torch.Tensor], tensors: list[tuple[str, torch.Tensor]]) -> bool:
    """Puts each (name, tensor) into the mapped file tensor of that name (load(shared=True)): nothing to do for
    one clipped in place, a copy for one the caller replaced. False, with nothing written, when some tensor has
    no mapped tensor of its name, dtype and shape: the caller then writes the file anew (save), so that the
    reader sees what was returned."""
    for name, t in tensors:
        v = views.get(name)
        if v is None or v.dtype != t.dtype or v.shape != t.shape:
            return False
    for name, t in tensors:
        v = views[name]
        if t.data_ptr() != v.data_ptr() or t.stride() != v.stride():
            v.copy_(t)
    return True


def save(path: str, tensors: list[tuple[str, torch.Tensor]], metadata: dict[str, str] | None = None) -> None:
    """Writes atomically (temp file, rename). Tensors are written contiguous, in the order given."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name, t in tensors:
        if name in header:
            raise ValueError(f"safetensors {path}: duplicate tensor name {name!r}")
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in NAMES:
            raise ValueError(f"safetensors {path}: tensor {name!r}: dtype {t.dtype} is not supported")
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        blobs.append(t)
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for t in blobs:
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy())  # buffer protocol: no copy
    os.replace(tmp, path)
