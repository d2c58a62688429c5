"""`make test`'s `--dist loadgroup` keeps an xdist_group on one worker (a method's smoke run is made once).

pytest 9.2 moved node ids out of ``Node._nodeid``, where pytest-xdist 3.8 appends the group: every group
was then spread over both workers, and each worker made its own smoke runs and UI servers."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow


def test_tests_of_one_group_run_on_one_worker(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(
        textwrap.dedent(
            """
            import os
            import pytest

            pytestmark = pytest.mark.xdist_group("shared")

            @pytest.mark.parametrize("n", range(4))
            def test_grouped(n):
                with open(os.environ["WORKERS_FILE"], "a") as f:
                    f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
            """
        )
    )
    (tmp_path / "test_other.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', range(4))\ndef test_other(n): pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q",
         "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WORKERS_FILE": str(tmp_path / "workers.txt")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 4
    assert len(set(workers)) == 1, f"one xdist_group ran on several workers: {workers}"
