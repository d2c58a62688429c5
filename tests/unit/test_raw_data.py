"""The pinned benchmark files: present, unaltered, readable from inside their archives."""

import hashlib
import io
import tarfile
import zipfile

import pytest

from models.common import raw_data


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw").mkdir(parents=True)
    return tmp_path / "data" / "raw"


def _pin(monkeypatch, name, blob):
    entry = raw_data.RawFile(hashlib.sha256(blob).hexdigest(), "test origin")
    monkeypatch.setitem(raw_data.COMMITTED, name, entry)
    return entry


def test_every_committed_file_matches_its_pin():
    for name in raw_data.COMMITTED:
        assert raw_data.raw_file(name).is_file()


def test_missing_file_names_itself_and_its_hash(fake_root, monkeypatch):
    entry = _pin(monkeypatch, "x/a.bin", b"abc")
    with pytest.raises(raw_data.RawDataError, match=rf"a.bin is missing \(expected sha256 {entry.sha256}"):
        raw_data.raw_file("x/a.bin")


def test_altered_file_is_refused(fake_root, monkeypatch):
    entry = _pin(monkeypatch, "a.bin", b"abc")
    (fake_root / "a.bin").write_bytes(b"abd")
    with pytest.raises(raw_data.RawDataError, match=f"expected {entry.sha256}.*corrupt or altered"):
        raw_data.raw_file("a.bin")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(raw_data.RawDataError, match="unknown raw data file 'nope'.*graphs/cora.npz"):
        raw_data.raw_file("nope")


def test_members_of_wheel_tar_and_deb(fake_root, monkeypatch):
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/data/x.csv", "1,2\n")
    tar_blob = io.BytesIO()
    with tarfile.open(fileobj=tar_blob, mode="w") as archive:
        info = tarfile.TarInfo("./usr/share/x.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))
    data_tar = tar_blob.getvalue()
    header = f"{'data.tar':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data_tar):<10}`\n".encode()
    deb = b"!<arch>\n" + header + data_tar + (b"\n" if len(data_tar) % 2 else b"")
    for name, blob in {"p.whl": wheel.getvalue(), "t.tar": data_tar, "d.deb": deb}.items():
        (fake_root / name).write_bytes(blob)
        _pin(monkeypatch, name, blob)
    assert raw_data.archive_member("p.whl", "pkg/data/x.csv") == b"1,2\n"
    assert raw_data.archive_member("t.tar", "./usr/share/x.txt") == b"hello"
    assert raw_data.archive_member("d.deb", "usr/share/x.txt") == b"hello"
    with pytest.raises(raw_data.RawDataError, match="'pkg/missing' is not inside"):
        raw_data.archive_member("p.whl", "pkg/missing")


def test_numpy_only_unpickler_refuses_other_classes():
    import os
    import pickle

    import numpy as np

    from models.common.image_sets import load_numpy_pickle

    arrays = (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2]))
    loaded = load_numpy_pickle(pickle.dumps(arrays, protocol=2))
    assert np.array_equal(loaded[0], arrays[0]) and loaded[1].tolist() == [1, 2]
    with pytest.raises(raw_data.RawDataError, match="refusing to unpickle posix.system"):
        load_numpy_pickle(pickle.dumps(os.system))


def _idx_bytes(array, code: int) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.tobytes()


def test_one_idx_parser_reads_every_dtype_plain_or_gzipped_and_names_a_bad_file(tmp_path):
    import gzip

    import numpy as np

    from models.common.image_sets import parse_idx, read_idx

    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    floats = np.linspace(-1, 1, 6).astype(">f4").reshape(3, 2)
    assert np.array_equal(parse_idx(_idx_bytes(images, 0x08), "x"), images)
    assert np.array_equal(parse_idx(gzip.compress(_idx_bytes(floats, 0x0D)), "x"), floats)
    (tmp_path / "labels.gz").write_bytes(gzip.compress(_idx_bytes(np.array([7, 1], np.uint8), 0x08)))
    assert read_idx(tmp_path / "labels.gz").tolist() == [7, 1]
    with pytest.raises(ValueError, match=r"bad.idx: not an IDX file \(bad magic number 504b0304\)"):
        parse_idx(b"PK\x03\x04rest", "bad.idx")
    with pytest.raises(ValueError, match=r"short.idx: header says \(2, 3, 4\) but holds 23 values"):
        parse_idx(_idx_bytes(images, 0x08)[:-1], "short.idx")


def test_a_scratch_project_root_reads_the_checkouts_pinned_files(tmp_path, monkeypatch):
    """A PAPERLINE_ROOT with no data/raw (outputs elsewhere, e.g. benchmarks/parallel_ratio.py) still finds them."""
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    assert raw_data.raw_root() == raw_data.CHECKOUT_RAW
    assert raw_data.raw_file("graphs/cora.npz").parent.parent == raw_data.CHECKOUT_RAW
    (tmp_path / "data" / "raw").mkdir(parents=True)  # a project with its own raw folder uses that one
    assert raw_data.raw_root() == tmp_path / "data" / "raw"
    with pytest.raises(raw_data.RawDataError, match="is missing"):
        raw_data.raw_file("graphs/cora.npz")
