"""The one Triton-interpreter switch.

Triton runs on a CPU only through its interpreter, and ``TRITON_INTERPRET=1`` must be set before
``triton.language`` is first imported (Lightning imports it): Triton builds its standard library
(``tl.zeros``, ``tl.sum``...) as interpretable only then. Everything that may run a kernel calls
``use_interpreter_without_gpu()`` early and imports kernels through ``import_kernel``.

"A GPU" means one torch can drive: an NVIDIA driver *and* a CUDA build of torch (the CPU wheel on a
GPU machine still needs the interpreter). Decided without importing torch, so it is cheap at start-up.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


class KernelUnavailable(RuntimeError):
    """The Triton kernel cannot run in this process (no GPU and triton was imported un-interpreted)."""


def cuda_usable() -> bool:
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    if not Path("/proc/driver/nvidia").exists():
        return False
    spec = importlib.util.find_spec("torch")
    version = Path(spec.origin).with_name("version.py") if spec and spec.origin else None
    return bool(version and version.is_file() and "cuda: Optional[str] = None" not in version.read_text())


def use_interpreter_without_gpu() -> None:
    """Set ``TRITON_INTERPRET=1`` when there is no usable GPU (an explicit user setting wins)."""
    if not cuda_usable():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _language_is_interpreted() -> bool:
    language = sys.modules.get("triton.language")
    return language is None or type(language.standard.zeros).__name__ == "InterpretedFunction"


def import_kernel(module: str) -> ModuleType:
    """Import a module of ``@triton.jit`` kernels, switching on the interpreter first when there is no GPU."""
    if module not in sys.modules and not cuda_usable():
        os.environ["TRITON_INTERPRET"] = "1"
        if not _language_is_interpreted():
            raise KernelUnavailable(
                "triton.language was imported before TRITON_INTERPRET=1 was set, so the kernel cannot run on CPU in "
                "this process; set TRITON_INTERPRET=1 in the environment before starting Python"
            )
    return importlib.import_module(module)
