"""A small video DiT whose self-attention can be switched between dense, STA and token SWA.

Patchify (Conv3d) -> tokens in tile-major order (``masks.tile`` once at the input, ``untile`` at
the output: every other op is per token, so this equals FastVideo's tile/untile around each
attention call) -> DiT blocks with adaLN-Zero time conditioning -> linear unpatchify. Rectified flow
x_t = (1 - t) x_0 + t eps: the network predicts either the velocity v = eps - x_0 (``prediction="v"``,
as HunyuanVideo and Wan) or the clean video x_0 (``"x"``, as in Li & He 2025, "Back to Basics: Let
Denoising Generative Models Denoise": a narrow model on high-dimensional patches learns x_0 far
faster); ``denoise`` and ``velocity`` convert between the two.

Attention paths (``set_attention``), each with one window for every head or one window per head:
  dense    scaled_dot_product_attention, no mask;
  sta      the STA mask through ``backend``: "gather" (each query tile attends its window's gathered
           key tiles only: the mask's cost, exact; used to train and evaluate on CPU), "sdpa" (boolean
           token mask; dense cost, exact: the reference the gathered path is checked against), "flex"
           (FlexAttention with the STA BlockMask; compiled on a GPU) or "triton" (the project's kernel,
           forward only; tiles need >= 16 tokens);
  swa      token-level sliding window (NATTEN-style) of given token windows, via masked SDPA.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.common.triton_mode import import_kernel

from .masks import (
    Canvas,
    same_reach_token_window,
    sta_block_mask,
    sta_key_tiles,
    sta_tile_attention,
    sta_token_mask,
    swa_token_mask,
    tile,
    untile,
)

TILE_ONLY = (1, 1, 1)  # the too-local window: every query tile attends its own tile only


def load_kernel():
    """The Triton STA kernel module; without a usable GPU the interpreter is switched on first."""
    return import_kernel("models.sta.kernel")


def sincos_3d(canvas: Canvas, dim: int) -> torch.Tensor:
    """(tokens, dim) fixed sin-cos position code of the (t, h, w) coordinates, tile-major order."""
    coords = canvas.token_coords().float()
    per_axis = 2 * (dim // 6)
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(per_axis // 2) / max(per_axis // 2, 1))
    parts = []
    for axis in range(3):
        angle = coords[:, axis, None] * freqs[None, :]
        parts += [angle.sin(), angle.cos()]
    code = torch.cat(parts, 1)
    return F.pad(code, (0, dim - code.shape[1]))


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device) / half)
    angle = 1000.0 * t[:, None] * freqs[None, :]
    return torch.cat([angle.cos(), angle.sin()], 1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attend) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(attend(q, k, v).transpose(1, 2).reshape(B, N, D))


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.ada[1].weight)  # adaLN-Zero: every block starts as the identity
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x: torch.Tensor, c: torch.Tensor, attend) -> torch.Tensor:
        s1, g1, a1, s2, g2, a2 = self.ada(c).chunk(6, dim=1)
        x = x + a1[:, None] * self.attn(modulate(self.norm1(x), s1, g1), attend)
        return x + a2[:, None] * self.mlp(modulate(self.norm2(x), s2, g2))


class VideoDiT(nn.Module):
    """Velocity model v(x_t, t) on (B, C, F, S, S) videos."""

    def __init__(
        self,
        channels: int,
        frames: int,
        size: int,
        patch,
        dim: int,
        depth: int,
        heads: int,
        mlp_ratio: float,
        tile_size,
        windows,
        backend: str = "gather",
        prediction: str = "x",
    ) -> None:
        super().__init__()
        if prediction not in ("x", "v"):
            raise ValueError(f"prediction must be 'x' or 'v', got {prediction!r}")
        self.prediction = prediction
        self.channels, self.patch, self.heads = channels, tuple(patch), heads
        self.canvas = Canvas((frames // patch[0], size // patch[1], size // patch[2]), tuple(tile_size))
        self.sta_windows = self.per_head(windows)
        self.backend = backend
        self.embed = nn.Conv3d(channels, dim, kernel_size=self.patch, stride=self.patch)
        self.register_buffer("pos", sincos_3d(self.canvas, dim)[None], persistent=False)
        self.time = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads, mlp_ratio) for _ in range(depth))
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.out = nn.Linear(dim, channels * math.prod(self.patch))
        for layer in (self.final_ada[1], self.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.set_attention("dense")

    # -- attention switch -------------------------------------------------------------------

    def per_head(self, windows) -> tuple:
        """One validated window triple per head from one triple or one triple per head."""
        rows = [windows] * self.heads if isinstance(windows[0], int) else list(windows)
        if len(rows) == 1:
            rows = rows * self.heads
        if len(rows) != self.heads:
            raise ValueError(f"{len(rows)} windows for {self.heads} heads: give one or one per head")
        return tuple(self.canvas.check_window(w) for w in rows)

    def set_attention(self, kind: str, windows=None, backend: str | None = None, token_windows=None) -> VideoDiT:
        """kind: "dense", "sta" (windows in tiles, one or one per head; default the configured ones) or "swa"
        (token windows; default the same reach as the STA windows). Weights are untouched: the training-free
        switch."""
        self.kind, self.windows = kind, None
        self.path = backend or self.backend
        self._mask = self._block_mask = self._key_tiles = None
        if kind == "sta":
            self.windows = self.per_head(windows or self.sta_windows)
            if self.path == "gather":
                self._key_tiles = sta_key_tiles(self.canvas, self.windows, self.heads)
            elif self.path == "sdpa":
                self._mask = torch.stack([sta_token_mask(self.canvas, w) for w in self.windows])
            elif self.path == "flex":
                self._block_mask = sta_block_mask(self.canvas, self.windows, self.heads)
            elif self.path != "triton":
                raise ValueError(f"unknown STA backend {self.path!r}: gather, sdpa, flex or triton")
        elif kind == "swa":
            reach = self.per_head(windows or self.sta_windows)
            rows = token_windows or [same_reach_token_window(self.canvas, w) for w in reach]
            self.windows = tuple(tuple(w) for w in ([rows] * self.heads if isinstance(rows[0], int) else rows))
            self._mask = torch.stack([swa_token_mask(self.canvas, w) for w in self.windows])
        elif kind != "dense":
            raise ValueError(f"unknown attention {kind!r}: dense, sta or swa")
        return self

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.kind == "dense":
            return F.scaled_dot_product_attention(q, k, v)
        if self._key_tiles is not None:
            return sta_tile_attention(q, k, v, self._key_tiles)
        if self._mask is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self._mask.to(q.device))
        if self.path == "flex":
            from .masks import flex_sta_attention

            if self._block_mask.kv_num_blocks.device != q.device:
                self._block_mask = self._block_mask.to(q.device)
            return flex_sta_attention(q, k, v, self._block_mask, compiled=q.is_cuda)
        if torch.is_grad_enabled() and q.requires_grad:
            raise RuntimeError("the Triton STA kernel is forward-only; train with backend 'gather', 'sdpa' or 'flex'")
        return load_kernel().sta_attention(q, k, v, self.canvas, self.windows)

    # -- rectified flow ---------------------------------------------------------------------------

    T_MIN = 0.05  # x-prediction: v = (x_t - x_0) / max(t, T_MIN), so v stays bounded near the data

    def denoise(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The model's estimate of the clean video x_0."""
        out = self(x_t, t)
        return out if self.prediction == "x" else x_t - t[:, None, None, None, None] * out

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The model's estimate of dx_t/dt = eps - x_0."""
        out = self(x_t, t)
        if self.prediction == "v":
            return out
        return (x_t - out) / t.clamp_min(self.T_MIN)[:, None, None, None, None]

    # -- forward --------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        tokens = tile(self.embed(x).flatten(2).transpose(1, 2), self.canvas, dim=1) + self.pos
        c = self.time(timestep_embedding(t, tokens.shape[-1]))
        for block in self.blocks:
            tokens = block(tokens, c, self.attend)
        shift, scale = self.final_ada(c).chunk(2, dim=1)
        patches = self.out(modulate(self.final_norm(tokens), shift, scale))
        patches = untile(patches, self.canvas, dim=1)
        (nt, nh, nw), (pt, ph, pw) = self.canvas.size, self.patch
        video = patches.reshape(B, nt, nh, nw, self.channels, pt, ph, pw)
        return video.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(B, self.channels, nt * pt, nh * ph, nw * pw)


def build_dit(cfg) -> VideoDiT:
    m, d = cfg.model, cfg.data
    return VideoDiT(
        d.channels,
        d.frames,
        d.size,
        m.patch,
        m.dim,
        m.depth,
        m.heads,
        m.mlp_ratio,
        m.tile,
        m.windows,
        m.backend,
        m.prediction,
    )
