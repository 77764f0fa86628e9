"""Which BM25 kernel scores: IRFLOW_BM25_KERNEL, the size rule of "auto", and a missing or broken numba."""

from __future__ import annotations

import numpy as np
import pytest

from irflow.kernels.bm25 import BM25ParamError, bm25_topk, kernel as kernel_module
from irflow.errors import IrflowError
from irflow.kernels import switch
from irflow.kernels.postings import Postings

try:
    import numba  # noqa: F401

    HAVE_NUMBA = True
except ImportError:
    HAVE_NUMBA = False


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    """The choice and the module resolved again, as in a new process (restored afterwards)."""
    monkeypatch.setattr(kernel_module.SWITCH, "chosen", [])
    monkeypatch.setattr(kernel_module.SWITCH, "loaded", [])
    return monkeypatch


def test_auto_compiles_only_large_indexes(fresh) -> None:
    fresh.delenv(kernel_module.KERNEL_ENV, raising=False)
    small = kernel_module.AUTO_MIN_ROWS - 1
    assert kernel_module.kernel_name(small) == "numpy"  # no numba import for a small corpus
    assert kernel_module.SWITCH.loaded == []
    assert kernel_module.kernel_name(kernel_module.AUTO_MIN_ROWS) == ("numba" if HAVE_NUMBA else "numpy")


@pytest.mark.parametrize("value, large", [("numpy", "numpy"), (" NumPy ", "numpy"), ("", "auto")])
def test_the_environment_variable_picks_the_kernel(fresh, value: str, large: str) -> None:
    fresh.setenv(kernel_module.KERNEL_ENV, value)
    want = ("numba" if HAVE_NUMBA else "numpy") if large == "auto" else large
    assert kernel_module.kernel_name() == want


def test_an_unknown_kernel_name_warns_and_means_auto(fresh) -> None:
    fresh.setenv(kernel_module.KERNEL_ENV, "fortran")
    with pytest.warns(UserWarning, match="IRFLOW_BM25_KERNEL='fortran' is not one of auto, numba, numpy"):
        assert kernel_module.kernel_name(10) == "numpy"
    with pytest.raises(BM25ParamError, match="kernel must be one of auto, numba, numpy; got 'fast'"):
        with kernel_module.use_kernel("fast"):
            pass


def test_numba_missing(fresh) -> None:
    def no_numba(name: str):
        raise ImportError("No module named 'numba'")

    fresh.setattr(switch.importlib, "import_module", no_numba)
    fresh.setenv(kernel_module.KERNEL_ENV, "auto")
    assert kernel_module.kernel_name() == "numpy"  # auto falls back silently: numba is an extra
    postings = Postings.build([["a", "b"], ["b"]] * 40_000)  # large enough for auto to want numba
    assert bm25_topk(postings, [["a"]], None, 3).row.tolist() == [0, 2, 4]
    fresh.setattr(kernel_module.SWITCH, "chosen", ["numba"])
    fresh.setattr(kernel_module.SWITCH, "loaded", [])
    with pytest.raises(IrflowError, match=r"numba cannot be imported .*pip install .*\[fast\]'"):
        kernel_module.kernel_name()


def test_a_broken_numba_warns_and_numpy_scores(fresh) -> None:
    def broken(name: str):
        raise OSError("llvmlite: symbol not found")

    fresh.setattr(switch.importlib, "import_module", broken)
    with pytest.warns(UserWarning, match="compiled BM25 kernel failed to load .*llvmlite.*using the numpy kernel"):
        assert kernel_module.kernel_name() == "numpy"


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
def test_memory_mapped_and_in_memory_indexes_share_one_compiled_signature(tmp_path) -> None:
    from irflow.kernels.bm25 import compiled

    docs = [["a", "b", "a"], ["b", "c"], ["c"], ["a"]] * 5
    built = Postings.build(docs)
    for name, array in built.arrays().items():
        np.save(tmp_path / f"{name}.npy", array)
    mapped = Postings.from_arrays(built.vocab_terms, {name: np.load(tmp_path / f"{name}.npy", mmap_mode="r")
                                                      for name in built.arrays()})
    with kernel_module.use_kernel("numba"):
        before = set(compiled.topk.signatures)
        a = bm25_topk(built, [["a", "c"]], None, 5)
        middle = set(compiled.topk.signatures)
        b = bm25_topk(mapped, [["a", "c"]], None, 5)
        mask = np.arange(built.n_rows) % 2 == 0  # a writable caller mask: the same signature too
        bm25_topk(built, [["a", "c"]], mask, 5)
    assert a == b
    assert set(compiled.topk.signatures) == middle and len(middle - before) <= 1
