"""The sample codec: exact round trips, and blocks written by earlier codecs still decode."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from vmtax.store import codec

pytestmark = pytest.mark.fast


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(0, 3000), elements=st.floats(allow_nan=True)))
def test_every_float64_array_comes_back_bit_for_bit(values):
    dtype, name, count, data = codec.encode(values)
    back = codec.decode(dtype, name, count, data)
    assert name == "zstd" and count == values.size
    assert back.tobytes() == values.astype("<f8").tobytes()


def _old_shuffled(values: np.ndarray) -> bytes:
    # What vmtax wrote before zstd, reproduced here as a fixed reference format.
    return zlib.compress(values.astype("<f8").view(np.uint8).reshape(-1, 8).T.tobytes(), 1)


@pytest.mark.parametrize("old", ["zlib-shuffle8", "zlib"])
def test_blocks_of_earlier_codecs_still_decode(old):
    values = np.random.default_rng(1).integers(1000, 5000, 4096).astype(np.float64)
    data = _old_shuffled(values) if old == "zlib-shuffle8" else zlib.compress(values.tobytes())
    assert np.array_equal(codec.decode("<f8", old, values.size, data), values)


def test_unknown_codec_or_dtype_is_refused():
    with pytest.raises(ValueError, match="codec"):
        codec.decode("<f8", "lz4", 1, b"")
    with pytest.raises(ValueError, match="dtype"):
        codec.decode("<f4", "zstd", 1, b"")


def test_repeated_timing_values_take_about_a_byte_each():
    # Cycle counts repeat whole values; the codec must keep them near a byte a sample, well
    # under the 8 raw bytes (and under the 2.9 the byte-shuffled zlib took on such data).
    rng = np.random.default_rng(2)
    values = rng.choice(
        [3120.0, 3185.0, 3250.0, 3315.0, 9800.0], 100_000, p=[0.4, 0.3, 0.2, 0.09, 0.01]
    )
    _, _, _, data = codec.encode(values)
    assert len(data) / values.size < 1.5
