"""Print the environment that limits torch/oneDNN/MKL to an instruction set below this host's best.

``make test`` reruns the tests that compare numerics (marker ``numerics``) under it, so an assertion that
holds only where two kernels happen to sum in the same order (bit-identity across layouts, batching or
thread counts) fails on this machine instead of on a user's: an AVX-512 host is limited to AVX2, an AVX2
host to SSE4 (ATen's ``default`` kernels). Printed as ``KEY=value`` words for ``env``.
"""

from __future__ import annotations

LIMITS = {
    "AVX512": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "AVX2": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}


def limits(capability: str) -> dict[str, str]:
    for level, env in LIMITS.items():
        if capability.upper().startswith(level):
            return env
    return LIMITS["AVX2"]  # anything else (a default build, another architecture): ATen's portable kernels


if __name__ == "__main__":
    import torch

    print(" ".join(f"{k}={v}" for k, v in limits(torch.backends.cpu.get_cpu_capability()).items()))
