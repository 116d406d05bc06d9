"""A report's BLAS runs on one thread: its processes, one per core, are the parallelism."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg  # noqa: F401  (loads scipy's own OpenBLAS, when it ships one)

from vmtax.report.forked import run_forked
from vmtax.report.threads import blas_threads, one_blas_thread

pytestmark = pytest.mark.fast


def _openblas_build() -> bool:
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return "openblas" in str(blas.get("name", "")).lower()


def test_an_openblas_numpy_is_found():
    if not _openblas_build():
        pytest.skip("numpy is not built with OpenBLAS: nothing to limit")
    assert blas_threads(), "numpy's OpenBLAS was not found among the loaded libraries"


def test_one_thread_inside_as_many_as_before_after():
    before = blas_threads()
    with one_blas_thread():
        assert all(count == 1 for count in blas_threads())
        # The report's workers are forked inside: they inherit the one thread.
        assert run_forked([blas_threads, blas_threads]) == [blas_threads()] * 2
    assert blas_threads() == before


def test_results_are_the_same_on_one_thread():
    rng = np.random.default_rng(0)
    a, b = rng.random((300, 300)), rng.random((300, 200))
    many = a @ b
    with one_blas_thread():
        one = a @ b
    np.testing.assert_allclose(one, many, rtol=1e-12)
