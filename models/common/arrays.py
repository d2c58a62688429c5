"""Byte-stable array files: the dataset hashes DVC and the manifests record depend on content only."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """An ``.npz`` whose bytes depend only on the arrays: entries sorted by name, fixed timestamps."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())
