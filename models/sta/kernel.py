"""A Triton forward kernel for 3-D sliding tile attention (the project's own, not FastVideo's).

Import this module only where the kernel is used. On a machine without a CUDA GPU, set
``TRITON_INTERPRET=1`` *before* importing it (``networks.load_kernel`` does, through ``models.common.triton_mode``); Triton then runs
each program in numpy on CPU tensors (slowly: a few ms per block dot, programs one after another).

Layout: q, k, v are (B, H, N, D) in tile-major token order (``masks.tile``), N = image tokens +
text padding. One program per (query block, batch * head):

* an image query block lies inside one tile; the program clamps the window centre per axis
  (``centre = clamp(q_a, k_a//2, n_a - 1 - k_a//2)``), enumerates exactly k_t k_h k_w key tiles and
  runs an unmasked online softmax over their BLOCK_KV chunks: no mixed blocks, no per-element mask;
* a text (or text-padding) query block runs the same loop with the window set to the whole canvas;
* every query block then visits the text keys, masked beyond ``text_length``.

Supported: head dims 16, 32, 64, 128 (power of two, ``tl.dot`` needs >= 16), tiles whose token
count has a power-of-two factor >= 16 (blocks never straddle tiles), canvases that are whole
multiples of the tile, odd windows no larger than the tiles per axis (per head), float32
(exact ``ieee`` dots), float16 and bfloat16 (float32 accumulation; under the interpreter bfloat16
blocks are upcast to float32 before ``tl.dot``, whose numpy emulation misreads bfloat16 in Triton
3.9). No autotuning and no driver queries at import, so the module also imports on a CPU-only
machine under the interpreter.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from .masks import Canvas, head_windows

LOG2E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def _online_softmax_step(
    acc,
    m_i,
    l_i,
    q,
    K,
    V,
    kv_start,
    offs_kv,
    offs_d,
    stride_n,
    qk_scale,
    n_valid,
    MASKED: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Fold one BLOCK_KV chunk of keys/values into the running (acc, max, sum) of a query block."""
    kv_rows = kv_start + offs_kv
    k_t = tl.load(K + offs_d[:, None] + kv_rows[None, :] * stride_n)  # (D, BLOCK_KV)
    v = tl.load(V + kv_rows[:, None] * stride_n + offs_d[None, :])  # (BLOCK_KV, D)
    if UPCAST:  # the interpreter's tl.dot mis-reads bfloat16: compute in float32 there
        k_t = k_t.to(tl.float32)
        v = v.to(tl.float32)
    scores = tl.dot(q, k_t, input_precision=DOT_PRECISION) * qk_scale  # log2 domain
    if MASKED:  # only the text chunk: padding keys beyond text_length
        scores = tl.where(kv_rows[None, :] < n_valid, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def sta_forward_kernel(
    Q,
    K,
    V,
    O,
    WINDOWS,
    VISITS,
    stride_bh,
    stride_n,
    qk_scale,
    text_length,
    N_HEADS: tl.constexpr,
    NT: tl.constexpr,
    NH: tl.constexpr,
    NW: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
    TEXT_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    q_block = tl.program_id(0)
    bh = tl.program_id(1)
    head = bh % N_HEADS
    base = bh.to(tl.int64) * stride_bh
    Q += base
    K += base
    V += base
    O += base

    offs_q = q_block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_kv = tl.arange(0, BLOCK_KV)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_q[:, None] * stride_n + offs_d[None, :])
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.zeros([BLOCK_Q], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], dtype=tl.float32)

    N_IMG: tl.constexpr = NT * NH * NW * TILE_TOKENS
    CHUNKS: tl.constexpr = TILE_TOKENS // BLOCK_KV
    q_start = q_block * BLOCK_Q
    is_text = q_start >= N_IMG

    # The clamped window of this query tile; text queries get the whole canvas instead.
    q_tile = q_start // TILE_TOKENS
    qt = q_tile // (NH * NW)
    qh = (q_tile // NW) % NH
    qw = q_tile % NW
    kt = tl.load(WINDOWS + head * 3 + 0)
    kh = tl.load(WINDOWS + head * 3 + 1)
    kw = tl.load(WINDOWS + head * 3 + 2)
    t0 = tl.minimum(tl.maximum(qt, kt // 2), NT - 1 - kt // 2) - kt // 2
    h0 = tl.minimum(tl.maximum(qh, kh // 2), NH - 1 - kh // 2) - kh // 2
    w0 = tl.minimum(tl.maximum(qw, kw // 2), NW - 1 - kw // 2) - kw // 2
    t0 = tl.where(is_text, 0, t0)
    h0 = tl.where(is_text, 0, h0)
    w0 = tl.where(is_text, 0, w0)
    kt = tl.where(is_text, NT, kt)
    kh = tl.where(is_text, NH, kh)
    kw = tl.where(is_text, NW, kw)

    visited = 0
    for step in range(0, kt * kh * kw * CHUNKS):
        j = step // CHUNKS
        jt = t0 + j // (kh * kw)
        jh = h0 + (j // kw) % kh
        jw = w0 + j % kw
        kv_start = ((jt * NH + jh) * NW + jw) * TILE_TOKENS + (step % CHUNKS) * BLOCK_KV
        acc, m_i, l_i = _online_softmax_step(
            acc, m_i, l_i, q, K, V, kv_start, offs_kv, offs_d, stride_n, qk_scale, 0, False, DOT_PRECISION, UPCAST
        )
        visited += tl.where(step % CHUNKS == 0, 1, 0)

    for kv_start in range(N_IMG, N_IMG + TEXT_PAD, BLOCK_KV):
        acc, m_i, l_i = _online_softmax_step(
            acc,
            m_i,
            l_i,
            q,
            K,
            V,
            kv_start,
            offs_kv,
            offs_d,
            stride_n,
            qk_scale,
            N_IMG + text_length,
            True,
            DOT_PRECISION,
            UPCAST,
        )

    out = acc / l_i[:, None]
    tl.store(O + offs_q[:, None] * stride_n + offs_d[None, :], out.to(O.dtype.element_ty))
    tl.store(VISITS + bh * tl.num_programs(0) + q_block, visited)


def _largest_block(tile_tokens: int, cap: int) -> int:
    block = 1
    while block * 2 <= cap and tile_tokens % (block * 2) == 0:
        block *= 2
    if block < 16:
        raise ValueError(
            f"a tile of {tile_tokens} tokens has no power-of-two block >= 16 dividing it; choose a tile whose token "
            "count is a multiple of 16 (e.g. (2, 4, 4) or the paper's (6, 8, 8))"
        )
    return block


def sta_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    canvas: Canvas,
    windows: Sequence[int] | Sequence[Sequence[int]],
    text_length: int = 0,
    *,
    out: torch.Tensor | None = None,
    block_q: int | None = None,
    block_kv: int | None = None,
    num_warps: int = 4,
    num_stages: int = 2,
    return_visits: bool = False,
):
    """Sliding tile attention of tile-major (B, H, N, D) tensors; N = canvas tokens + text padding.

    ``windows``: one (k_t, k_h, k_w) in tiles, or one per head. ``out`` (optional) receives the result.
    With ``return_visits`` also returns the (B*H, query blocks) count of key tiles each block visited.
    """
    if q.shape != k.shape or q.shape != v.shape or q.dim() != 4:
        raise ValueError(
            f"q, k, v must share one (B, H, N, D) shape; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtype {q.dtype} not supported: use float32, float16 or bfloat16 for q, k and v alike")
    batch, heads, n, head_dim = q.shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} not supported; the kernel supports {HEAD_DIMS}")
    if q.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1 before importing models.sta.kernel"
        )
    text_pad = n - canvas.tokens
    if text_pad < 0 or text_pad % canvas.tile_tokens:
        raise ValueError(
            f"sequence length {n} must be the canvas's {canvas.tokens} tokens plus text padded to a multiple of "
            f"the tile ({canvas.tile_tokens} tokens)"
        )
    if not 0 <= text_length <= text_pad:
        raise ValueError(f"text_length {text_length} must be in [0, {text_pad}] (the text padding)")
    block_q = block_q or _largest_block(canvas.tile_tokens, 128)
    block_kv = block_kv or _largest_block(canvas.tile_tokens, 64)
    for name, b in (("block_q", block_q), ("block_kv", block_kv)):
        if b < 16 or b & (b - 1) or canvas.tile_tokens % b:
            raise ValueError(f"{name}={b} must be a power of two >= 16 dividing the tile's {canvas.tile_tokens} tokens")

    wins = head_windows(windows, heads, canvas).to(torch.int32).to(q.device)
    q, k, v = (x.contiguous() for x in (q, k, v))
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor of q's shape and dtype")
    n_q_blocks = n // block_q
    visits = torch.empty(batch * heads, n_q_blocks, dtype=torch.int32, device=q.device)
    grid = (n_q_blocks, batch * heads)
    nt, nh, nw = canvas.tiles
    sta_forward_kernel[grid](
        q,
        k,
        v,
        out,
        wins,
        visits,
        n * head_dim,
        head_dim,
        head_dim**-0.5 * LOG2E,
        text_length,
        N_HEADS=heads,
        NT=nt,
        NH=nh,
        NW=nw,
        TILE_TOKENS=canvas.tile_tokens,
        TEXT_PAD=text_pad,
        HEAD_DIM=head_dim,
        BLOCK_Q=block_q,
        BLOCK_KV=block_kv,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST=q.device.type == "cpu" and q.dtype == torch.bfloat16,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return (out, visits) if return_visits else out


def program_count(canvas: Canvas, batch: int, heads: int, text_pad: int = 0, block_q: int | None = None) -> int:
    """Programs a launch runs (to keep interpreter grids small)."""
    block_q = block_q or _largest_block(canvas.tile_tokens, 128)
    return batch * heads * math.ceil((canvas.tokens + text_pad) / block_q)
