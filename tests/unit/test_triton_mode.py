"""The one Triton switch: the interpreter exactly when torch cannot drive a GPU, decided without importing torch."""

import subprocess
import sys
import types

from models.common import triton_mode


def _fake_torch(available: bool):
    return types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: available))


def test_interpreter_only_without_a_usable_gpu(monkeypatch):
    for available, expected in ((False, "1"), (True, None)):
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        monkeypatch.setitem(sys.modules, "torch", _fake_torch(available))
        triton_mode.use_interpreter_without_gpu()
        assert __import__("os").environ.get("TRITON_INTERPRET") == expected


def test_user_setting_wins(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False))
    triton_mode.use_interpreter_without_gpu()
    assert __import__("os").environ["TRITON_INTERPRET"] == "0"


def test_cpu_wheel_on_a_gpu_machine_still_needs_the_interpreter(monkeypatch, tmp_path):
    """Without torch imported, a driver alone is not enough: the torch build must have CUDA."""
    (tmp_path / "version.py").write_text("cuda: Optional[str] = None\n")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(triton_mode.Path, "exists", lambda self: True)  # /proc/driver/nvidia "present"
    spec = types.SimpleNamespace(origin=str(tmp_path / "__init__.py"))
    monkeypatch.setattr(triton_mode.importlib.util, "find_spec", lambda name: spec)
    assert triton_mode.cuda_usable() is False
    (tmp_path / "version.py").write_text("cuda: Optional[str] = '12.8'\n")
    assert triton_mode.cuda_usable() is True


def test_decided_without_importing_torch():
    code = "import sys; from models.common import triton_mode; triton_mode.cuda_usable(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
