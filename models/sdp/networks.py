"""SDP-lite (l <= 1 irreps encoder + Spherical-FiLM temporal U-net) and the Diffusion Policy baseline.

Irreps features are tensors ``(B, 4, C, T)``: C channels ("fields"), each with one l=0 coefficient
(index 0 of dim 1) and one l=1 vector (indices 1..3, Cartesian x, y, z), over T time steps. A
rotation R acts as ``x[:, 1:4] -> R x[:, 1:4]`` and leaves ``x[:, 0]`` alone. Every layer below
commutes with that action exactly (no S^2 grid), so the policy's equivariance error is float
round-off. Layers follow SDP's ``irreps_conv1d_components.py`` / ``irreps_conditional_unet1d.py``:

* ``IrrepConv1d``: one temporal kernel W_l per degree, shared by the 2l+1 orders m; bias on l=0
  only (two ``conv1d`` calls: W_0 on the scalars, W_1 on the 3 orders of l=1 folded into the batch);
* ``IrrepRMSNorm``: EquiformerV2's ``rms_norm_sh`` (centre l=0 over channels, one degree-balanced
  RMS per position, affine weight per degree and channel, bias on l=0);
* ``GateActivation``: SiLU(linear([scalars, |v|])) for the scalars, l=1 fields scaled by
  sigmoid(linear([scalars, |v|])) -- the brief's exactly equivariant norm gate (rotation-invariant
  inputs only) in place of SDP's ``SeparableS2Activation`` (an S^2-grid SiLU, equivariant only up
  to the grid);
* ``SFiLM``: out_l <- <out_l, s_l> out_l / (|out_l| + 1e-12) + b_l per degree and channel, (s, b) from a
  per-degree linear map of the condition; ``FlatFiLM`` is the non-equivariant ablation (a Linear on
  the flattened condition, elementwise scale and bias on every coefficient);
* resampling by nearest ``interpolate`` along time (x0.5 / x2) after a k=3 irreps conv block;
* the time embedding (sinusoidal -> MLP) sits in the l=0 slot of the global condition.

The action (pos, x-axis, y-axis, gripper) is packed into 3 input fields: field 0 = (gripper,
position), fields 1 and 2 = (0, x-axis), (0, y-axis); the network's output is read back from the
same slots.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.common.diffusion import sinusoidal_embedding

from .config import DPNetConfig, SDPNetConfig

EPS_FILM = 1e-12  # SDP's epsilon in |out_l|
EPS_NORM = 1e-8


# ----------------------------------------------------------------------------- action <-> irreps


def pack_actions(a: torch.Tensor) -> torch.Tensor:
    """(B, T, 10) actions -> (B, 4, 3, T) irreps fields (see the module docstring)."""
    pos, ax, ay, grip = a[..., 0:3], a[..., 3:6], a[..., 6:9], a[..., 9]
    zero = torch.zeros_like(grip)
    scalars = torch.stack([grip, zero, zero], -1)  # (B, T, 3 fields)
    vectors = torch.stack([pos, ax, ay], -2)  # (B, T, 3 fields, 3 xyz)
    x = torch.cat([scalars.unsqueeze(-1), vectors], -1)  # (B, T, fields, 4)
    return x.permute(0, 3, 2, 1).contiguous()


def unpack_actions(x: torch.Tensor) -> torch.Tensor:
    """(B, 4, 3, T) -> (B, T, 10): positions / axes from the l=1 slots, the gripper from field 0's l=0."""
    v = x[:, 1:4].permute(0, 3, 2, 1)  # (B, T, fields, xyz)
    return torch.cat([v[:, :, 0], v[:, :, 1], v[:, :, 2], x[:, 0, 0].unsqueeze(-1)], -1)


def rotate_actions(a: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """The group action on 10-D actions: R on the position and both axes, the gripper unchanged.
    ``R`` is (3, 3) or (B, 3, 3)."""
    R = R.expand(a.shape[0], 3, 3) if R.dim() == 2 else R
    parts = [torch.einsum("bij,btj->bti", R, a[..., k : k + 3]) for k in (0, 3, 6)]
    return torch.cat(parts + [a[..., 9:]], -1)


# ----------------------------------------------------------------------------- irreps layers


class IrrepConv1d(nn.Module):
    """Per-degree temporal convolution (C_in -> C_out fields, kernel k), bias on l=0 only."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, bias: bool = True) -> None:
        super().__init__()
        bound = 1 / math.sqrt(c_in * kernel_size)  # torch's Conv1d default initialisation
        self.weight = nn.Parameter(torch.empty(2, c_out, c_in, kernel_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(c_out).uniform_(-bound, bound)) if bias else None
        self.c_in, self.c_out, self.padding = c_in, c_out, kernel_size // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, C, T = x.shape
        # Two plain convolutions (the 3 orders of l=1 folded into the batch): on CPU this is ~2x faster
        # than one grouped conv1d over the 4 coefficients, with the same weights.
        s = F.conv1d(x[:, 0], self.weight[0], self.bias, padding=self.padding)
        v = F.conv1d(x[:, 1:4].reshape(B * 3, C, T), self.weight[1], None, padding=self.padding)
        return torch.cat([s.unsqueeze(1), v.reshape(B, 3, self.c_out, -1)], 1)


class IrrepLinear(nn.Module):
    """Per-degree linear map of (B, 4, C_in) global features (bias on l=0)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(c_in)
        self.weight = nn.Parameter(torch.empty(2, c_out, c_in).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x[:, 0] @ self.weight[0].T + self.bias
        v = x[:, 1:4] @ self.weight[1].T
        return torch.cat([s.unsqueeze(1), v], 1)


class IrrepRMSNorm(nn.Module):
    """EquiformerV2's rms_norm_sh for l <= 1 on (B, 4, C, T), normalising over channels per (B, T)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2, channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x[:, :1] - x[:, :1].mean(2, keepdim=True), x[:, 1:]], 1)
        # degree-balanced mean square: each degree weighs 1/(l_max+1), spread over its 2l+1 orders
        ms = x.pow(2).mean(2, keepdim=True)  # (B, 4, 1, T)
        ms = 0.5 * ms[:, :1] + ms[:, 1:].sum(1, keepdim=True) / 6
        weight = torch.cat([self.weight[:1], self.weight[1:].expand(3, -1)], 0)[None, :, :, None]
        bias = torch.cat([self.bias[None], self.bias.new_zeros(3, len(self.bias))], 0)[None, :, :, None]
        return torch.addcmul(bias, x * torch.rsqrt(ms + EPS_NORM), weight)


def vector_norm(v: torch.Tensor) -> torch.Tensor:
    """|v| over the xyz axis (dim 1 of (B, 3, C, T)), smooth at 0."""
    return torch.sqrt(v.pow(2).sum(1) + EPS_NORM)


class GateActivation(nn.Module):
    """Scalars: SiLU(W_s [s, |v|]); vectors: v * sigmoid(W_g [s, |v|] + b). Invariant gates, exact equivariance."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(2 * channels, 2 * channels, 1)
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, v = x[:, 0], x[:, 1:4]
        h = self.linear(torch.cat([s, vector_norm(v)], 1))
        s_out = F.silu(h[:, : self.channels])
        gate = torch.sigmoid(h[:, self.channels :])
        return torch.cat([s_out.unsqueeze(1), v * gate.unsqueeze(1)], 1)


class IrrepConvBlock(nn.Module):
    """IrrepConv1d -> rms_norm_sh -> gate activation -> optional nearest resampling in time."""

    def __init__(
        self, c_in: int, c_out: int, kernel_size: int, norm: bool = True, activation: bool = True, scale: float = 1.0
    ) -> None:
        super().__init__()
        self.conv = IrrepConv1d(c_in, c_out, kernel_size)
        self.norm = IrrepRMSNorm(c_out) if norm else nn.Identity()
        self.act = GateActivation(c_out) if activation else nn.Identity()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.norm(self.conv(x)))
        if self.scale != 1.0:
            B, _, C, T = h.shape
            h = F.interpolate(h.reshape(B, 4 * C, T), scale_factor=self.scale).reshape(B, 4, C, -1)
        return h


class SFiLM(nn.Module):
    """Spherical FiLM: out_l <- <out_l, s_l> out_l / (|out_l| + eps) + b_l, per degree and channel."""

    def __init__(self, c_cond: int, c_out: int) -> None:
        super().__init__()
        self.encoder = IrrepLinear(c_cond, 2 * c_out)

    def forward(self, out: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        embed = self.encoder(cond).unsqueeze(-1)  # (B, 4, 2C, 1)
        scale, bias = embed[:, :, 0::2], embed[:, :, 1::2]  # SDP's interleaving
        s0, v = out[:, 0], out[:, 1:4]
        s0 = (s0 * scale[:, 0]) * (s0 / (s0.abs() + EPS_FILM)) + bias[:, 0]  # l=0: <s, k> s/|s| + b
        length = (v * scale[:, 1:4]).sum(1, keepdim=True)  # rotation-invariant dot product
        # |v| as sqrt(|v|^2 + eps^2): finite (zero) gradient at v = 0; SDP adds eps = 1e-12 to torch.norm
        v = length * v / (torch.sqrt(v.pow(2).sum(1, keepdim=True) + EPS_FILM**2) + EPS_FILM) + bias[:, 1:4]
        return torch.cat([s0.unsqueeze(1), v], 1)


class FlatFiLM(nn.Module):
    """Conventional FiLM on the flattened irreps (SDP's ``FiLM_type='FiLM'`` ablation; not equivariant)."""

    def __init__(self, c_cond: int, c_out: int) -> None:
        super().__init__()
        self.encoder = nn.Linear(4 * c_cond, 2 * 4 * c_out)
        self.c_out = c_out

    def forward(self, out: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        embed = self.encoder(cond.flatten(1)).reshape(len(cond), 4, 2 * self.c_out, 1)
        return out * embed[:, :, 0::2] + embed[:, :, 1::2]


class IrrepResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, c_cond: int, kernel_size: int, film: str) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [IrrepConvBlock(c_in, c_out, kernel_size), IrrepConvBlock(c_out, c_out, kernel_size)]
        )
        self.film = SFiLM(c_cond, c_out) if film == "sfilm" else FlatFiLM(c_cond, c_out)
        self.residual = IrrepConv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        out = self.film(self.blocks[0](x), cond)
        return self.blocks[1](out) + self.residual(x)


class TimeEmbedding(nn.Module):
    """Diffusion Policy's step encoder: sinusoidal -> Linear(d, 4d) -> Mish -> Linear(4d, d)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.Mish(), nn.Linear(4 * dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(sinusoidal_embedding(t, self.dim))


class IrrepConditionalUnet1D(nn.Module):
    """SDP's denoiser (SDTU): a temporal U-net on irreps fields conditioned through (S)FiLM."""

    def __init__(self, c_cond: int, cfg: SDPNetConfig, film: str = "sfilm", input_fields: int = 3) -> None:
        super().__init__()
        dims = (input_fields,) + tuple(cfg.down_dims)
        in_out = list(zip(dims[:-1], dims[1:]))
        k, cond = cfg.kernel_size, cfg.time_dim + c_cond
        self.time = TimeEmbedding(cfg.time_dim)
        n = cfg.res_blocks

        def blocks(c_in: int, c_out: int) -> nn.ModuleList:
            return nn.ModuleList([IrrepResBlock(c_in if i == 0 else c_out, c_out, cond, k, film) for i in range(n)])

        self.down = nn.ModuleList()
        for i, (d_in, d_out) in enumerate(in_out):
            last = i == len(in_out) - 1
            self.down.append(
                nn.ModuleList(
                    [blocks(d_in, d_out), IrrepConvBlock(d_out, d_out, 3, norm=False, scale=1.0 if last else 0.5)]
                )
            )
        self.mid = blocks(dims[-1], dims[-1])
        self.up = nn.ModuleList()
        for d_in, d_out in reversed(in_out[1:]):
            self.up.append(
                nn.ModuleList([blocks(2 * d_out, d_in), IrrepConvBlock(d_in, d_in, 3, norm=False, scale=2.0)])
            )
        self.final = IrrepConvBlock(dims[1], input_fields, 3, norm=False, activation=False)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x (B, 4, fields, T), t (B,), cond (B, 4, C_cond) -> (B, 4, fields, T)."""
        temb = self.time(t)
        g = torch.cat([torch.cat([temb.unsqueeze(1), temb.new_zeros(len(temb), 3, temb.shape[1])], 1), cond], 2)
        skips = []
        for blocks, resample in self.down:
            for block in blocks:
                x = block(x, g)
            skips.append(x)
            x = resample(x)
        for block in self.mid:
            x = block(x, g)
        for blocks, resample in self.up:
            x = torch.cat([x, skips.pop()], 2)
            for block in blocks:
                x = block(x, g)
            x = resample(x)
        return self.final(x)


# ----------------------------------------------------------------------------- encoders


class RadialBasis(nn.Module):
    def __init__(self, n: int, r_max: float) -> None:
        super().__init__()
        self.register_buffer("centres", torch.linspace(0, r_max, n))
        self.width = r_max / n

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return torch.exp(-(((r.unsqueeze(-1) - self.centres) / self.width) ** 2))


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden),
        nn.LayerNorm(hidden),
        nn.SiLU(),
        nn.Linear(hidden, hidden),
        nn.SiLU(),
        nn.Linear(hidden, d_out),
    )


class EquivariantPointEncoder(nn.Module):
    """An l <= 1 point encoder (the stand-in for SDP's EquiformerV2 encoder), exactly SO(3)-equivariant.

    Two rounds of scalar-weighted vector messages to the object's centroid c: with q_i = p_i - c,
    round 1 weighs q_i by an MLP of rbf(|q_i|) (an l=0 x l=1 tensor product with a radial network);
    round 2 also feeds the invariants q_i . V1_k (each point's coordinates in the learned equivariant
    frame V1). Scalars pool the per-point invariants. Output: ``channels`` fields of (l=0, l=1),
    the vectors a linear map of [V1, V2, c, EE x-axis, EE y-axis].
    """

    def __init__(self, cfg: SDPNetConfig, n_rbf: int = 16, r_max: float = 0.6) -> None:
        super().__init__()
        C, H = cfg.enc_channels, cfg.enc_hidden
        self.rbf = RadialBasis(n_rbf, r_max)
        self.round1 = mlp(n_rbf, H, 2 * C)
        self.round2 = mlp(n_rbf + C, H, 2 * C)
        self.vec_out = nn.Linear(2 * C + 3, C, bias=False)
        self.scal_out = mlp(2 * C + 3 * C + 3, H, C)
        self.C = C

    def forward(self, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        """points (B, N, 3) relative to the EE, ee_axes (B, 2, 3) -> (B, 4, C)."""
        C = self.C
        c = points.mean(1)  # (B, 3)
        q = points - c[:, None]
        feats = self.rbf(q.norm(dim=-1))  # (B, N, K)
        h1 = self.round1(feats)
        V1 = torch.einsum("bnc,bnd->bcd", h1[..., :C], q) / q.shape[1]  # (B, C, 3)
        S1 = h1[..., C:].mean(1)
        proj = torch.einsum("bnd,bcd->bnc", q, V1)  # invariant coordinates of each point
        proj = proj / (proj.pow(2).mean((1, 2), keepdim=True).sqrt() + 1e-6)
        h2 = self.round2(torch.cat([feats, proj], -1))
        V2 = torch.einsum("bnc,bnd->bcd", h2[..., :C], q) / q.shape[1]
        S2 = h2[..., C:].mean(1)
        frame = torch.cat([c[:, None], ee_axes], 1)  # (B, 3, 3): centroid, EE x, EE y
        vectors = torch.cat([V1, V2, frame], 1)  # (B, 2C + 3, 3)
        v_out = self.vec_out(vectors.transpose(1, 2))  # (B, 3, C)
        invariants = torch.cat(
            [
                S1,
                S2,
                torch.einsum("bcd,bkd->bck", V2, frame).flatten(1),
                torch.einsum("bkd,bjd->bkj", frame, frame)[:, 0],
            ],
            1,
        )
        s_out = self.scal_out(invariants)
        return torch.cat([s_out.unsqueeze(1), v_out], 1)


class PointNetEncoder(nn.Module):
    """The baseline's point embedding (DP3-style): per-point MLP on [p_i, p_i - centroid] (the second
    part makes the object's shape, hence its yaw, easy to read), max-pool, concatenated EE axes."""

    def __init__(self, cfg: DPNetConfig) -> None:
        super().__init__()
        H = cfg.enc_hidden
        self.point_mlp = nn.Sequential(
            nn.Linear(6, H),
            nn.LayerNorm(H),
            nn.ReLU(),
            nn.Linear(H, H),
            nn.LayerNorm(H),
            nn.ReLU(),
            nn.Linear(H, 2 * H),
        )
        self.head = nn.Sequential(nn.Linear(2 * H + 6, cfg.enc_channels), nn.LayerNorm(cfg.enc_channels))

    def forward(self, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        centred = points - points.mean(1, keepdim=True)
        feat = self.point_mlp(torch.cat([points, centred], -1)).max(1).values
        return self.head(torch.cat([feat, ee_axes.flatten(1)], 1))


# ----------------------------------------------------------------------------- Diffusion Policy U-net


def groups_for(channels: int, n_groups: int) -> int:
    return math.gcd(channels, n_groups)


class Conv1dBlock(nn.Module):
    """Conv1d -> GroupNorm -> Mish (Chi et al.)."""

    def __init__(self, c_in: int, c_out: int, k: int, n_groups: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv1d(c_in, c_out, k, padding=k // 2), nn.GroupNorm(groups_for(c_out, n_groups), c_out), nn.Mish()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class ConditionalResidualBlock1D(nn.Module):
    def __init__(self, c_in: int, c_out: int, c_cond: int, k: int, n_groups: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Conv1dBlock(c_in, c_out, k, n_groups), Conv1dBlock(c_out, c_out, k, n_groups)])
        self.cond_encoder = nn.Sequential(nn.Mish(), nn.Linear(c_cond, 2 * c_out))
        self.residual = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        self.c_out = c_out

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        out = self.blocks[0](x)
        scale, bias = self.cond_encoder(cond).unsqueeze(-1).chunk(2, 1)  # FiLM, cond_predict_scale=True
        return self.blocks[1](scale * out + bias) + self.residual(x)


class ConditionalUnet1D(nn.Module):
    """Diffusion Policy's denoiser on the flattened 10-D actions (B, 10, T)."""

    def __init__(self, c_cond: int, cfg: DPNetConfig, input_dim: int = 10) -> None:
        super().__init__()
        dims = (input_dim,) + tuple(cfg.down_dims)
        in_out = list(zip(dims[:-1], dims[1:]))
        k, g, cond = cfg.kernel_size, cfg.n_groups, cfg.time_dim + c_cond
        self.time = TimeEmbedding(cfg.time_dim)
        n = cfg.res_blocks

        def blocks(c_in: int, c_out: int) -> nn.ModuleList:
            return nn.ModuleList(
                [ConditionalResidualBlock1D(c_in if i == 0 else c_out, c_out, cond, k, g) for i in range(n)]
            )

        self.down = nn.ModuleList()
        for i, (d_in, d_out) in enumerate(in_out):
            last = i == len(in_out) - 1
            self.down.append(
                nn.ModuleList([blocks(d_in, d_out), nn.Conv1d(d_out, d_out, 3, 2, 1) if not last else nn.Identity()])
            )
        self.mid = blocks(dims[-1], dims[-1])
        self.up = nn.ModuleList()
        for d_in, d_out in reversed(in_out[1:]):
            self.up.append(nn.ModuleList([blocks(2 * d_out, d_in), nn.ConvTranspose1d(d_in, d_in, 4, 2, 1)]))
        self.final = nn.Sequential(Conv1dBlock(dims[1], dims[1], k, g), nn.Conv1d(dims[1], input_dim, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x (B, 10, T), t (B,), cond (B, C_cond) -> (B, 10, T)."""
        g = torch.cat([self.time(t), cond], 1)
        skips = []
        for blocks, down in self.down:
            for block in blocks:
                x = block(x, g)
            skips.append(x)
            x = down(x)
        for block in self.mid:
            x = block(x, g)
        for blocks, up in self.up:
            x = torch.cat([x, skips.pop()], 1)
            for block in blocks:
                x = block(x, g)
            x = up(x)
        return self.final(x)


# ----------------------------------------------------------------------------- policies


class SDPPolicy(nn.Module):
    """SDP-lite: equivariant encoder + irreps U-net. eps_hat = f(x_t (B, T, 10), t, cond)."""

    equivariant = True

    def __init__(self, cfg: SDPNetConfig, film: str = "sfilm") -> None:
        super().__init__()
        self.film = film
        self.encoder = EquivariantPointEncoder(cfg)
        self.unet = IrrepConditionalUnet1D(cfg.enc_channels, cfg, film)

    def encode(self, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        return self.encoder(points, ee_axes)

    def denoise(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return unpack_actions(self.unet(pack_actions(x), t, cond))

    def forward(self, x: torch.Tensor, t: torch.Tensor, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        return self.denoise(x, t, self.encode(points, ee_axes))


class DPPolicy(nn.Module):
    """The Diffusion Policy baseline: PointNet embedding + FiLM U-net on the flattened actions."""

    equivariant = False

    def __init__(self, cfg: DPNetConfig) -> None:
        super().__init__()
        self.encoder = PointNetEncoder(cfg)
        self.unet = ConditionalUnet1D(cfg.enc_channels, cfg)

    def encode(self, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        return self.encoder(points, ee_axes)

    def denoise(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.unet(x.transpose(1, 2), t, cond).transpose(1, 2)

    def forward(self, x: torch.Tensor, t: torch.Tensor, points: torch.Tensor, ee_axes: torch.Tensor) -> torch.Tensor:
        return self.denoise(x, t, self.encode(points, ee_axes))


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
