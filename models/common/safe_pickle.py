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


def load(file: IO[bytes], allowed: Allowed, refuse: Callable[[str, str], Exception]):
    """Unpickle ``file`` building only ``allowed``'s globals; ``refuse(module, name)`` is raised for any other."""
    return _AllowListUnpickler(file, allowed, refuse).load()
