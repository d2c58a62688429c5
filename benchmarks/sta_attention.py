"""Sliding tile attention speed on a CUDA GPU (a measurement, never a test assertion).

    python benchmarks/sta_attention.py [--quick] [--settings hunyuan wan_333 ...] [--no-flex] [--json PATH]

Times, in bfloat16 at the brief's shapes (B = 1, H = 24, D = 128; tiles of 6 x 8 x 8 = 384 tokens):
dense SDPA over all valid tokens, FlexAttention (compiled) with the STA BlockMask, and the project's
Triton kernel (``models/sta/kernel.py``, best of a few fixed block configurations). Reports
per call: latency, TFLOP/s of useful work (the (query, key) pairs the mask allows among valid
tokens), MFU = useful TFLOP/s over a measured bf16 matmul peak, the paper's "effective" TFLOP/s
(dense FLOPs / latency, as FastVideo's bench_sta.py), and the speed-up over dense against the
ideal 1 / density. Before timing it checks the kernel against dense masked attention (float32,
small canvas) and against FlexAttention at the benchmark shape (bfloat16).

Without a GPU it runs the correctness check on tiny shapes under the Triton interpreter, says
that timing needs a GPU, and exits 0 (1 if the check fails). ``--quick`` (Hunyuan only, fewer
configurations and repetitions) finishes in under 2 minutes on an H100/H200; the rest of the
time is mostly FlexAttention's first compile. ``--json PATH`` also writes the rows (and the
correctness checks) as JSON, e.g. ``--json "$OUT/sta_bench.json"`` on a lent GPU machine.

The kernel is imported through ``models.sta.networks.load_kernel`` (``models.common.triton_mode``: the
project's one Triton switch, which turns the interpreter on only where no GPU is usable).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.common.triton_mode import use_interpreter_without_gpu  # noqa: E402

use_interpreter_without_gpu()  # before anything imports triton.language
import torch  # noqa: E402

from models.sta import masks  # noqa: E402
from models.sta.networks import load_kernel  # noqa: E402

sta_attention = load_kernel().sta_attention

# name: (canvas, tile, window in tiles, text tokens (padded to one tile))
SETTINGS = {
    "hunyuan": ((30, 48, 80), (6, 8, 8), (3, 3, 3), 256),  # HunyuanVideo 720p, 117 frames: 91 % sparsity
    "wan_333": ((18, 48, 80), (6, 8, 8), (3, 3, 3), 0),
    "wan_157": ((18, 48, 80), (6, 8, 8), (1, 5, 7), 0),
    "stepvideo": ((36, 48, 48), (6, 8, 8), (3, 3, 3), 0),
}
# (BLOCK_Q, BLOCK_KV, num_warps, num_stages): a fixed grid instead of autotuning.
CONFIGS = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 64, 4, 2)]
QUICK_CONFIGS = CONFIGS[:2]


def correctness_rows(device: str) -> list[tuple[str, float, bool]]:
    """Kernel vs dense masked reference in float32 on small canvases (interpreter-sized on CPU)."""
    cases = [
        ((2, 12, 12), (2, 4, 4), [(1, 1, 1), (1, 3, 3)], 0, 16),  # (1, 3, 3) = the whole canvas
        ((2, 4, 20), (2, 4, 4), [(1, 1, 3)], 0, 32),  # clamped window on a 5-tile axis
        ((2, 12, 12), (2, 4, 4), [(1, 1, 3)], 20, 16),  # text tokens
    ]
    if device == "cuda":
        cases.append(((18, 24, 24), (6, 8, 8), [(1, 1, 1), (3, 3, 1), (1, 3, 3), (3, 3, 3)], 100, 128))
    rows = []
    g = torch.Generator().manual_seed(0)
    for size, tile, windows, text, head_dim in cases:
        canvas = masks.Canvas(size, tile)
        pad = canvas.tile_tokens if text else 0
        q, k, v = (
            torch.randn(1, len(windows), canvas.tokens + pad, head_dim, generator=g).to(device) for _ in range(3)
        )
        out = sta_attention(q, k, v, canvas, windows, text, out=torch.full_like(q, float("nan")))
        err = float((out - masks.sta_reference(q, k, v, canvas, windows, text)).abs().max())
        label = f"fp32 canvas {size} tile {tile} windows {windows}" + (f" text {text}" if text else "")
        rows.append((label, err, err < 1e-4 and bool(torch.isfinite(out).all())))
    return rows


def bench(fn, quick: bool) -> float:
    """Median milliseconds per call (triton.testing.do_bench: L2 cache flushed, CUDA-event timed)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25 if quick else 100, rep=100 if quick else 500, return_mode="median"))


def matmul_peak(quick: bool) -> float:
    """Measured bf16 dense matmul TFLOP/s (8192^3), the MFU denominator."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ b, quick)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def run_setting(name: str, args, peak: float) -> list[dict]:
    import torch.nn.functional as F

    size, tile, window, text = SETTINGS[name]
    canvas = masks.Canvas(size, tile)
    pad = canvas.tile_tokens if text else 0
    B, H, D = args.batch, args.heads, args.head_dim
    n = canvas.tokens + pad
    q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    n_valid = canvas.tokens + text
    dense_flops = masks.dense_flops(B, H, n_valid, D)
    useful = masks.sta_useful_flops(canvas, window, B, H, D, text)
    density = useful / dense_flops
    rows: list[dict] = []

    def row(impl: str, ms: float, flops: float, note: str = "") -> None:
        rows.append(
            {
                "setting": name,
                "impl": impl,
                "ms": ms,
                "tflops": flops / (ms * 1e-3) / 1e12,
                "effective": dense_flops / (ms * 1e-3) / 1e12,
                "note": note,
            }
        )

    qd, kd, vd = (x[:, :, :n_valid] for x in (q, k, v))  # dense attention over the valid tokens only
    dense_ms = bench(lambda: F.scaled_dot_product_attention(qd, kd, vd), args.quick)
    row("dense SDPA", dense_ms, dense_flops)

    best = None
    for bq, bkv, warps, stages in QUICK_CONFIGS if args.quick else CONFIGS:
        fn = lambda: sta_attention(
            q,
            k,
            v,
            canvas,
            window,
            text,
            block_q=bq,
            block_kv=bkv,
            num_warps=warps,
            num_stages=stages,
        )
        try:
            fn()
            ms = bench(fn, args.quick)
        except Exception as exc:  # a configuration that does not fit (shared memory) on this GPU
            print(f"  {name}: Triton config {(bq, bkv, warps, stages)} failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        if best is None or ms < best[0]:
            best = (ms, f"BLOCK_Q {bq}, BLOCK_KV {bkv}, {warps} warps, {stages} stages")
    if best is not None:
        row("STA Triton (ours)", best[0], useful, best[1])

    if not args.no_flex:
        block_mask = masks.sta_block_mask(canvas, window, H, text, pad, block=128, device="cuda")
        started = time.perf_counter()
        flex_out = masks.flex_sta_attention(q, k, v, block_mask, compiled=True)
        compile_s = time.perf_counter() - started
        ms = bench(lambda: masks.flex_sta_attention(q, k, v, block_mask, compiled=True), args.quick)
        row("STA FlexAttention", ms, useful, f"first call (compile) {compile_s:.0f} s")
        if best is not None:
            ours = sta_attention(q, k, v, canvas, window, text).float()
            diff = (ours[:, :, :n_valid] - flex_out.float()[:, :, :n_valid]).abs()
            rows[-1]["note"] += f"; vs Triton bf16: max |diff| {float(diff.max()):.2e}, mean {float(diff.mean()):.2e}"

    for r in rows:
        r["mfu"] = r["tflops"] / peak
        r["speedup"] = dense_ms / r["ms"]
        r["ideal"] = 1.0 if r["impl"] == "dense SDPA" else 1.0 / density
    print(
        f"  {name}: canvas {size}, tile {tile}, window {window}, text {text}: N = {n_valid} valid tokens, "
        f"density {density:.3f} (ideal x{1 / density:.1f})",
        flush=True,
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Hunyuan only, 2 kernel configs, short timing")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=None)
    parser.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compile takes ~30-60 s)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here as JSON")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    checks = correctness_rows(device)
    print("| correctness check | max abs error | ok |\n|---|---|---|")
    for label, err, ok in checks:
        print(f"| {label} | {err:.2e} | {'yes' if ok else 'NO'} |")
    report = {"checks": [{"case": label, "max_abs_err": err, "ok": ok} for label, err, ok in checks], "rows": []}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    if not all(ok for *_, ok in checks):
        print("Kernel correctness check FAILED.")
        return 1
    if device == "cpu":
        print(
            f"\nCorrectness checked under the Triton interpreter ({time.perf_counter() - started:.0f} s). "
            "Timing needs a CUDA GPU (H100/H200 for the paper's numbers): no benchmark run."
        )
        return 0

    settings = args.settings or (["hunyuan"] if args.quick else list(SETTINGS))
    print(f"\nGPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    peak = matmul_peak(args.quick)
    print(f"measured bf16 matmul peak (8192^3): {peak:.0f} TFLOP/s\n", flush=True)
    rows = []
    for name in settings:
        rows += run_setting(name, args, peak)
        if args.json:  # after every setting, so a run cut short still returns what it measured
            report.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, peak_tflops=peak, rows=rows)
            args.json.write_text(json.dumps(report, indent=1))
    print(
        "\n| setting | implementation | ms / call | useful TFLOP/s | MFU | effective TFLOP/s | speed-up vs dense "
        "| ideal (1/density) | note |\n|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['setting']} | {r['impl']} | {r['ms']:.2f} | {r['tflops']:.0f} | {100 * r['mfu']:.1f} % "
            f"| {r['effective']:.0f} | {r['speedup']:.2f}x | {r['ideal']:.2f}x | {r['note']} |"
        )
    print(
        f"\nB = {args.batch}, H = {args.heads}, D = {args.head_dim}, bf16; total {time.perf_counter() - started:.0f} s. "
        "Useful FLOPs = 4 B H D x allowed (query, key) pairs among valid tokens; effective = dense FLOPs / latency."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
