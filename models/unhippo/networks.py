"""LSSL-style sequence classifier whose SSM layers have frozen (A_bar, B_bar): HiPPO-LegS or UnHiPPO."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from . import algorithm

LayerKind = Literal["lssl", "unlssl"]


class FixedSSMLayer(nn.Module):
    """H independent single-input SSMs c_t = A_bar c_{t-1} + B_bar x_t, read out as y = C c + D x.

    The state matrices are fixed, so the convolution kernel K_l = C A_bar^l B_bar comes from a
    Krylov matrix built once in float64 (unstable in float32) and cached as a float32 buffer.
    """

    def __init__(self, a_bar: torch.Tensor, b_bar: torch.Tensor, length: int, latent: int) -> None:
        super().__init__()
        channels, n = b_bar.shape
        self.channels, self.latent, self.n = channels, latent, n
        # Not persistent: rebuilt from the config, never learned (the paper's "fixed" models).
        self.register_buffer(
            "krylov", algorithm.krylov(length, a_bar.double(), b_bar.double()).float(), persistent=False
        )
        self.C = nn.Parameter(torch.empty(channels, latent, n))
        # Kaiming on the (n, m, c) view: the fan-in of C is what its output sums over.
        nn.init.kaiming_normal_(self.C.permute(2, 1, 0), a=math.sqrt(5))
        self.D = nn.Parameter(torch.randn(channels, latent))
        self.mix = nn.Linear(channels * latent, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, channels, time) -> (batch, channels, time)."""
        length = x.shape[-1]
        if length > self.krylov.shape[-1]:
            raise ValueError(f"sequence of length {length} is longer than the layer's kernel ({self.krylov.shape[-1]})")
        kernel = torch.einsum("hmn,hnt->hmt", self.C, self.krylov[..., :length])
        # The skip term D x is the lag-0 tap of the same causal convolution.
        kernel = torch.cat([kernel[..., :1] + self.D[..., None], kernel[..., 1:]], dim=-1)
        y = algorithm.causal_conv(kernel, x[:, :, None, :])
        y = F.gelu(y).flatten(1, 2)  # (batch, channels * latent, time)
        return self.mix(y.transpose(1, 2)).transpose(1, 2)


def ssm_matrices(
    kind: LayerKind,
    n: int,
    channels: int,
    min_t: float,
    max_t: float,
    obs_sigma2: float,
    trans_sigma2: float,
    discretisation: algorithm.UnHiPPODiscretisation = "expm",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (A_bar (H,n,n), B_bar (H,n)) of the LSSL baseline or of UnLSSL."""
    if kind == "lssl":
        return algorithm.lssl_parameters(n, algorithm.channel_steps(min_t, max_t, channels))
    if kind == "unlssl":
        return algorithm.unlssl_parameters(n, min_t, max_t, channels, obs_sigma2, trans_sigma2, discretisation)
    raise ValueError(f"unknown layer kind {kind!r}")


class SSMClassifier(nn.Module):
    """Linear(1->H) encoder, residual blocks x + Dropout(SSM(GroupNorm(x))), per-step Linear(H->classes).

    ``forward`` returns the time-mean of the per-step logits (the paper's classification head).
    """

    def __init__(
        self,
        kind: LayerKind,
        n_classes: int,
        length: int,
        *,
        layers: int,
        n: int,
        hidden: int,
        latent: int,
        dropout: float,
        min_t: float,
        max_t: float,
        obs_sigma2: float = 1.0,
        trans_sigma2: float = 1.0,
        discretisation: algorithm.UnHiPPODiscretisation = "expm",
        norm_groups: int = 8,
    ) -> None:
        super().__init__()
        a_bar, b_bar = ssm_matrices(kind, n, hidden, min_t, max_t, obs_sigma2, trans_sigma2, discretisation)
        self.kind = kind
        self.encoder = nn.Linear(1, hidden)
        self.norms = nn.ModuleList(nn.GroupNorm(min(norm_groups, hidden), hidden) for _ in range(layers))
        self.layers = nn.ModuleList(FixedSSMLayer(a_bar, b_bar, length, latent) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, n_classes)

    def step_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, time) -> per-step logits (batch, time, classes)."""
        h = self.encoder(x[..., None]).transpose(1, 2)  # (batch, hidden, time)
        for norm, layer in zip(self.norms, self.layers):
            h = h + self.dropout(layer(norm(h)))
        return self.decoder(h.transpose(1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.step_logits(x).mean(dim=1)
