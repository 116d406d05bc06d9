"""Sample arrays as compressed bytes.

Timing samples are float64 values whose high bytes barely change, so the bytes are regrouped
by position within the value (a byte shuffle, as in Blosc/HDF5) before zlib: that compresses
integer-valued cycle counts to about a seventh, and decoding stays a single pass.
"""

from __future__ import annotations

import zlib

import numpy as np

CODEC = "zlib-shuffle8"
DTYPE = "<f8"


def encode(values: np.ndarray) -> tuple[str, str, int, bytes]:
    """(dtype, codec, count, data) for a 1-D array of float64 values."""
    arr = np.ascontiguousarray(np.asarray(values, dtype=DTYPE).ravel())
    shuffled = arr.view(np.uint8).reshape(-1, 8).T.tobytes()
    return DTYPE, CODEC, int(arr.size), zlib.compress(shuffled, 1)


def decode(dtype: str, codec: str, count: int, data: bytes | memoryview) -> np.ndarray:
    """The float64 array stored by :func:`encode`, in its original order."""
    if dtype != DTYPE:
        raise ValueError(f"unsupported sample dtype {dtype!r}")
    raw = zlib.decompress(data)
    if codec == CODEC:
        out = np.frombuffer(raw, dtype=np.uint8).reshape(8, count).T.copy().view(DTYPE)
        return out.reshape(count)
    if codec == "zlib":
        return np.frombuffer(raw, dtype=DTYPE).copy()
    raise ValueError(f"unsupported sample codec {codec!r}")
