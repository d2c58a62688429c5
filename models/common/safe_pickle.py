"""Unpickling by allow-list: the project's one ``pickle.Unpickler``.

Two official data formats are pickles: MNIST's ``mnist.pkl.gz`` (numpy arrays) and Planetoid's
``ind.<name>.*`` files (numpy arrays, scipy sparse matrices, a dict of lists). ``load`` builds only
the globals its caller allows; any other name in the stream raises the caller's error before that
object is built, so nothing of it runs. Both formats were written by Python 2, hence latin-1.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from typing import IO

Allowed = Mapping[tuple[str, str], object]


def numpy_array_globals() -> dict[tuple[str, str], object]:
    """The globals a pickled ndarray or numpy scalar needs, under numpy 1's and 2's module names."""
    import codecs

    import numpy as np

    reconstruct, scalar = np.ndarray.__reduce__(np.zeros(1))[0], np.float64(0).__reduce__()[0]
    allowed: dict[tuple[str, str], object] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for numpy_core in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[numpy_core, "_reconstruct"], allowed[numpy_core, "scalar"] = reconstruct, scalar
    allowed["_codecs", "encode"] = codecs.encode  # how protocols 0-2 spell bytes (an array's buffer)
    return allowed


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], allowed: Allowed, refuse: Callable[[str, str], Exception]):
        super().__init__(file, encoding="latin1")
        self.allowed, self.refuse = allowed, refuse

    def find_class(self, module: str, name: str):
        try:
            return self.allowed[module, name]
        except KeyError:
            raise self.refuse(module, name) from None


MAX_SPARSE_CELLS = 2**34  # rows x columns of a sparse matrix a loader may densify


class MalformedPickle(ValueError):
    """An allow-listed object whose structure is inconsistent (a sparse matrix with out-of-range indices)."""


def load(file: IO[bytes], allowed: Allowed, refuse: Callable[[str, str], Exception]):
    """Unpickle ``file`` building only ``allowed``'s globals; ``refuse(module, name)`` is raised for any other.

    Allow-listed classes can still carry inconsistent parts: a scipy sparse matrix is built from pickled
    ``indices``/``indptr``/``shape`` without any check, and ``toarray()`` on out-of-range indices writes out of
    bounds (a segfault). Every sparse matrix in the result is therefore checked in full before it is returned."""
    return _checked(_AllowListUnpickler(file, allowed, refuse).load())


def _checked(obj, depth: int = 0):
    if depth > 8:
        return obj
    if isinstance(obj, dict):
        for value in obj.values():
            _checked(value, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _checked(value, depth + 1)
    elif type(obj).__module__.startswith("scipy.sparse"):
        _check_sparse(obj)
    return obj


def _check_sparse(matrix) -> None:
    import numpy as np

    shape = getattr(matrix, "shape", None)
    if not (isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(n, (int, np.integer)) for n in shape)):
        raise MalformedPickle(f"a sparse matrix with shape {shape!r}")
    rows, cols = (int(n) for n in shape)
    if rows < 0 or cols < 0 or rows * cols > MAX_SPARSE_CELLS:
        raise MalformedPickle(f"a sparse matrix of shape {shape} (at most {MAX_SPARSE_CELLS} cells)")
    try:
        if hasattr(matrix, "indptr"):  # CSR/CSC: indices inside the shape, indptr monotone and ending at nnz
            matrix.check_format(full_check=True)
        elif hasattr(matrix, "row") and hasattr(matrix, "col"):  # COO
            row, col = np.asarray(matrix.row), np.asarray(matrix.col)
            if row.size and (row.min() < 0 or row.max() >= rows or col.min() < 0 or col.max() >= cols):
                raise ValueError("row/column indices outside the shape")
            if not (row.size == col.size == np.asarray(matrix.data).size):
                raise ValueError("row, col and data lengths differ")
        else:
            raise ValueError(f"unsupported sparse type {type(matrix).__name__}")
    except (ValueError, TypeError, AttributeError) as exc:
        raise MalformedPickle(f"an inconsistent sparse matrix ({type(matrix).__name__} {shape}): {exc}") from None
