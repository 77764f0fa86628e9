"""Without numba (or with it refused) BLAS ranks, with the same answers; asking for numba without it is one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from irflow.errors import IrflowError
from irflow.kernels import dense_kernel, switch
from irflow.kernels.dense import dense_topk
from irflow.kernels.dense_index import DenseIndex


def no_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled module as if numba were not installed (imported afresh, failing)."""
    def refuse(name: str) -> None:
        raise ImportError(f"No module named 'numba' (importing {name})")

    monkeypatch.setattr(dense_kernel.SWITCH, "loaded", [])
    monkeypatch.setattr(switch.importlib, "import_module", refuse)


def test_without_numba_blas_ranks_and_an_index_given_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((300, 8)).astype(np.float32)
    queries = rng.standard_normal((3, 8)).astype(np.float32)
    index = DenseIndex.build(matrix)  # the numpy encoder needs no numba
    assert index is not None
    expected = dense_topk(matrix, queries, None, 5)
    no_numba(monkeypatch)
    with dense_kernel.use_kernel("auto"):
        assert dense_kernel.kernel_name(10 ** 7) == "numpy"
        assert dense_kernel.build_index(matrix) is None
        assert dense_kernel.scan_candidates(index, queries, None, 5) is None
        assert dense_topk(matrix, queries, None, 5, index=index) == expected


def test_asking_for_numba_without_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    no_numba(monkeypatch)
    with dense_kernel.use_kernel("numba"):
        with pytest.raises(IrflowError, match=r"IRFLOW_DENSE_KERNEL=numba.*numba cannot be imported.*fast"):
            dense_kernel.kernel_name()


def test_an_unknown_setting_warns_and_means_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_kernel.SWITCH, "chosen", [])
    monkeypatch.setenv(dense_kernel.KERNEL_ENV, "gpu")
    with pytest.warns(UserWarning, match="not one of auto, numba, numpy"):
        assert dense_kernel.SWITCH.choice() == "auto"
