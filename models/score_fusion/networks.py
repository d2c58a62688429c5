"""Networks: epsilon nets (FiLM conv stack / guided-diffusion U-Net), slice-wise 2-D models run on
volumes, and the Score-Fusion model that fuses three of them per voxel.

Volume tensors are (B, C, D, H, W); axis 0, 1, 2 slices along D, H, W (axial, coronal, sagittal).
The conditioning volume ``cond`` is (B, 4, D, H, W) = [up(LR), coord_D, coord_H, coord_W]; the
coordinates are the official global position embedding i / D * 2 - 1 (computed before any crop).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from models.common.diffusion import sinusoidal_embedding

from .config import NetConfig, SliceNetConfig

AXIS_NAMES = ("axial", "coronal", "sagittal")


def _conv(dims: int):
    return nn.Conv2d if dims == 2 else nn.Conv3d


def zero_module(module: nn.Module) -> nn.Module:
    """The official ``zero_module``: every parameter set to 0."""
    for p in module.parameters():
        nn.init.zeros_(p)
    return module


# ----------------------------------------------------------------------------- epsilon nets


class ConvEpsNet(nn.Module):
    """``layers`` 3x3(x3) convolutions; every hidden one followed by FiLM (scale, shift from the time
    embedding of the step index) and SiLU. ``zero_last`` zero-initialises the output convolution.

    3-D nets run on channels-last activations: oneDNN's CPU 3-D convolutions take ~30 % less time on that
    layout. The forward pass is bit for bit the same; weight gradients differ only in float32 summation
    order (~1e-6 relative; the tests check both). 2-D ones gain nothing at these sizes and keep the layout."""

    def __init__(self, dims: int, in_ch: int, out_ch: int, cfg: NetConfig, zero_last: bool = False) -> None:
        super().__init__()
        conv = _conv(dims)
        self.dims, self.width, self.time_dim, self.hidden = dims, cfg.width, cfg.time_dim, cfg.layers - 1
        self.layout = torch.channels_last_3d if dims == 3 else torch.contiguous_format
        self.convs = nn.ModuleList(
            [conv(in_ch if i == 0 else cfg.width, cfg.width, 3, padding=1) for i in range(self.hidden)]
        )
        self.out = conv(cfg.width, out_ch, 3, padding=1)
        if zero_last:
            zero_module(self.out)
        self.film = nn.Sequential(
            nn.Linear(cfg.time_dim, 2 * cfg.time_dim),
            nn.SiLU(),
            nn.Linear(2 * cfg.time_dim, 2 * cfg.width * self.hidden),
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        film = self.film(sinusoidal_embedding(t, self.time_dim)).view(len(x), self.hidden, 2, self.width)
        film = film.view(*film.shape, *(1,) * self.dims)
        h = x.contiguous(memory_format=self.layout)
        for i, conv in enumerate(self.convs):
            h = F.silu(conv(h) * (1 + film[:, i, 0]) + film[:, i, 1])
        return self.out(h)


def _groups(ch: int) -> int:
    return math.gcd(32, ch)


class ResBlock(nn.Module):
    """guided-diffusion ResBlock: GN-SiLU-conv, + time embedding, GN-SiLU-dropout-conv (zero init), skip."""

    def __init__(self, dims: int, cin: int, cout: int, emb: int, dropout: float) -> None:
        super().__init__()
        conv = _conv(dims)
        self.dims = dims
        self.in_layers = nn.Sequential(nn.GroupNorm(_groups(cin), cin), nn.SiLU(), conv(cin, cout, 3, padding=1))
        self.emb = nn.Sequential(nn.SiLU(), nn.Linear(emb, cout))
        self.out_layers = nn.Sequential(
            nn.GroupNorm(_groups(cout), cout),
            nn.SiLU(),
            nn.Dropout(dropout),
            zero_module(conv(cout, cout, 3, padding=1)),
        )
        self.skip = nn.Identity() if cin == cout else conv(cin, cout, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.in_layers(x) + self.emb(emb).view(len(x), -1, *(1,) * self.dims)
        return self.skip(x) + self.out_layers(h)


class UNet(nn.Module):
    """A compact guided-diffusion U-Net (no attention, as in the Palette/med-ddpm configs used):
    ``res_blocks`` ResBlocks per level at ``width * mult`` channels, strided-conv down, nearest-up + conv."""

    def __init__(self, dims: int, in_ch: int, out_ch: int, cfg: NetConfig, zero_last: bool = False) -> None:
        super().__init__()
        conv = _conv(dims)
        emb = 4 * cfg.width
        self.time_dim = cfg.width
        self.time = nn.Sequential(nn.Linear(cfg.width, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.inp = conv(in_ch, cfg.width, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        skips, ch = [cfg.width], cfg.width
        for level, mult in enumerate(cfg.mults):
            for _ in range(cfg.res_blocks):
                self.down.append(ResBlock(dims, ch, cfg.width * mult, emb, cfg.dropout))
                ch = cfg.width * mult
                skips.append(ch)
            if level < len(cfg.mults) - 1:
                self.down.append(conv(ch, ch, 3, stride=2, padding=1))
                skips.append(ch)
        self.mid = nn.ModuleList([ResBlock(dims, ch, ch, emb, cfg.dropout) for _ in range(2)])
        for level, mult in reversed(list(enumerate(cfg.mults))):
            for _i in range(cfg.res_blocks + 1):
                self.up.append(ResBlock(dims, ch + skips.pop(), cfg.width * mult, emb, cfg.dropout))
                ch = cfg.width * mult
            if level > 0:
                self.up.append(nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), conv(ch, ch, 3, padding=1)))
        self.out = nn.Sequential(nn.GroupNorm(_groups(ch), ch), nn.SiLU(), conv(ch, out_ch, 3, padding=1))
        if zero_last:
            zero_module(self.out[-1])

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = self.time(sinusoidal_embedding(t, self.time_dim))
        h = self.inp(x)
        hs = [h]
        for layer in self.down:
            h = layer(h, emb) if isinstance(layer, ResBlock) else layer(h)
            hs.append(h)
        for layer in self.mid:
            h = layer(h, emb)
        for layer in self.up:
            h = layer(torch.cat([h, hs.pop()], 1), emb) if isinstance(layer, ResBlock) else layer(h)
        return self.out(h)


def eps_net(dims: int, in_ch: int, out_ch: int, cfg: NetConfig, zero_last: bool = False) -> nn.Module:
    return (ConvEpsNet if cfg.arch == "conv" else UNet)(dims, in_ch, out_ch, cfg, zero_last)


# ----------------------------------------------------------------------------- slicing


def coordinates(shape: tuple[int, int, int]) -> torch.Tensor:
    """(3, D, H, W) global position embedding i / n * 2 - 1 per axis (``global_pos_emb``)."""
    axes = [torch.arange(n, dtype=torch.float32) / n * 2 - 1 for n in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"))


def make_cond(lr: torch.Tensor) -> torch.Tensor:
    """(B, D, H, W) or (B, 1, D, H, W) upsampled LR -> (B, 4, D, H, W) = [LR, coordinates]."""
    lr = lr if lr.dim() == 5 else lr[:, None]
    coords = coordinates(tuple(lr.shape[-3:])).to(lr)
    return torch.cat([lr, coords.expand(len(lr), -1, -1, -1, -1)], 1)


def to_slices(volume: torch.Tensor, axis: int) -> torch.Tensor:
    """(B, C, D, H, W) -> (B * S, C, P, Q): the S slices along ``axis`` (0, 1, 2 = D, H, W) as 2-D images."""
    b, c = volume.shape[:2]
    moved = volume.movedim(2 + axis, 1)  # (B, S, C, P, Q)
    return moved.reshape(b * moved.shape[1], c, *moved.shape[3:])


def from_slices(slices: torch.Tensor, axis: int, batch: int) -> torch.Tensor:
    """Inverse of ``to_slices``: restack (B * S, C, P, Q) into (B, C, D, H, W)."""
    stacked = slices.reshape(batch, len(slices) // batch, *slices.shape[1:])
    return stacked.movedim(1, 2 + axis)


def neighbour_volume(lr: torch.Tensor, axis: int, k: int) -> torch.Tensor:
    """(B, 1, D, H, W) -> (B, 2k+1, D, H, W): the LR volume shifted by -k..k along ``axis`` (edge replicated),
    so slice s of channel j is LR slice clamp(s + j - k)."""
    n = lr.shape[2 + axis]
    idx = torch.arange(n, device=lr.device)
    return torch.cat([lr.index_select(2 + axis, (idx + o).clamp(0, n - 1)) for o in range(-k, k + 1)], 1)


def slice_inputs(x: torch.Tensor, cond: torch.Tensor, axis: int, k: int) -> torch.Tensor:
    """The 2.5-D model's input for every slice along ``axis``: [x slice, 2k+1 LR slices, 3 coordinates]."""
    return to_slices(torch.cat([x, neighbour_volume(cond[:, :1], axis, k), cond[:, 1:]], 1), axis)


class SliceModel(nn.Module):
    """A 2-D epsilon model for one slice direction, runnable on whole volumes (slice, predict, restack)."""

    def __init__(self, axis: int, cfg: SliceNetConfig) -> None:
        super().__init__()
        self.axis, self.k, self.slice_batch = axis, cfg.neighbours, cfg.slice_batch
        self.net = eps_net(2, self.in_channels(cfg.neighbours), 1, cfg)

    @staticmethod
    def in_channels(k: int) -> int:
        return 1 + (2 * k + 1) + 3

    def forward_slices(self, inputs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(N, in_channels, P, Q) slice inputs and (N,) steps -> (N, 1, P, Q) epsilon."""
        if not self.slice_batch or len(inputs) <= self.slice_batch:
            return self.net(inputs, t)
        return torch.cat(
            [
                self.net(inputs[i : i + self.slice_batch], t[i : i + self.slice_batch])
                for i in range(0, len(inputs), self.slice_batch)
            ]
        )

    def forward(self, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, 1, D, H, W) noisy volume, its conditioning and (B,) steps -> (B, 1, D, H, W) epsilon field."""
        inputs = slice_inputs(x_t, cond, self.axis, self.k)
        steps = t.repeat_interleave(len(inputs) // len(x_t))
        return from_slices(self.forward_slices(inputs, steps), self.axis, len(x_t))


# ----------------------------------------------------------------------------- score fusion


FusionMode = Literal["full", "residual_only"]
FUSION_MODES: tuple[FusionMode, ...] = ("full", "residual_only")


def fuse(eps: torch.Tensor, w: torch.Tensor, mode: FusionMode = "full") -> torch.Tensor:
    """eps: (B, 3, ...) the three 2-D epsilon fields; w: (B, 3, ...) the fusion net's output.

    ``full`` (Score-Fusion): eps_fused = (w0 + 1/3) eps1 + (w1 + 1/3) eps2 + (1/3 - w0 - w1) eps3 + w2 (per
    voxel; the three weights sum to 1, w2 is a free residual). ``residual_only`` (the review's ablation):
    the weights stay 1/3, eps_fused = mean(eps) + w2, so only a residual correction is learned. At w = 0
    both are exactly the mean (the ``merge`` baseline).
    """
    mean = eps.mean(1, keepdim=True)
    if mode == "residual_only":
        return mean + w[:, 2:3]
    if mode != "full":
        raise ValueError(f"fusion mode {mode!r}: expected one of {FUSION_MODES}")
    # The same sum written as mean + corrections, so that w = 0 reproduces the mean bit for bit:
    # (w0 + 1/3) e1 + (w1 + 1/3) e2 + (1/3 - w0 - w1) e3 = mean(e) + w0 (e1 - e3) + w1 (e2 - e3).
    e1, e2, e3 = eps[:, 0:1], eps[:, 1:2], eps[:, 2:3]
    return mean + w[:, 0:1] * (e1 - e3) + w[:, 1:2] * (e2 - e3) + w[:, 2:3]


def fusion_coefficients(w: torch.Tensor, mode: FusionMode = "full") -> torch.Tensor:
    """(B, 3, ...) per-voxel weights of the three 2-D fields: (w0 + 1/3, w1 + 1/3, 1/3 - w0 - w1), or 1/3
    each for ``residual_only``."""
    third = 1.0 / 3.0
    if mode == "residual_only":
        return torch.full_like(w, third)
    w0, w1 = w[:, 0:1], w[:, 1:2]
    return torch.cat([w0 + third, w1 + third, third - w0 - w1], 1)


class ScoreFusion(nn.Module):
    """Three frozen slice models (axial, coronal, sagittal) and a 3-D fusion net whose last conv is zero:
    at initialisation the fused epsilon is the average of the three 2-D epsilons. ``mode`` picks the
    fusion rule (``fuse``): the method's per-voxel weights plus residual, or the residual-only ablation."""

    FUSION_IN = 5  # [x_t, LR, eps1, eps2, eps3]

    def __init__(self, slice_cfg: SliceNetConfig, fusion_cfg: NetConfig, mode: FusionMode = "full") -> None:
        super().__init__()
        if mode not in FUSION_MODES:
            raise ValueError(f"fusion mode {mode!r}: expected one of {FUSION_MODES}")
        self.mode = mode
        self.slices = nn.ModuleList([SliceModel(axis, slice_cfg) for axis in range(3)])
        self.fusion = eps_net(3, self.FUSION_IN, 3, fusion_cfg, zero_last=True)

    def eps_2d(self, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, 3, D, H, W): the three slice models' epsilon fields (same x_t, same step t)."""
        return torch.cat([model(x_t, cond, t) for model in self.slices], 1)

    def merge(self, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The TOSM/MADM baseline: the mean of the three 2-D epsilons."""
        return self.eps_2d(x_t, cond, t).mean(1, keepdim=True)

    def weights(
        self,
        x_t: torch.Tensor,
        cond: torch.Tensor,
        t: torch.Tensor,
        eps: torch.Tensor,
        fusion: nn.Module | None = None,
    ) -> torch.Tensor:
        """The fusion net's raw output w (B, 3, ...); ``fusion`` replaces the net (an EMA copy, say)."""
        return (self.fusion if fusion is None else fusion)(torch.cat([x_t, cond[:, :1], eps], 1), t)

    def forward(
        self, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor, eps: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The fused epsilon (B, 1, D, H, W); pass ``eps`` (from ``eps_2d``) to reuse the 2-D passes."""
        eps = self.eps_2d(x_t, cond, t) if eps is None else eps
        return fuse(eps, self.weights(x_t, cond, t, eps), self.mode)
