"""SDCIB networks: per-view stochastic encoders with a Gaussian head after every block, and critics.

``SDCIB`` (the registered model) holds one ``ViewEncoder`` per modality (no weight sharing).
``Critic`` is the JSD mutual-information critic T([h; c]); critics are training-only and live in
the LightningModule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .algorithm import fuse_views

SIGMA_FLOOR = 1e-7  # official: sigma = softplus(s) + 1e-7


def linear_bn_relu(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, n_out), nn.BatchNorm1d(n_out), nn.ReLU())


class GaussianHead(nn.Module):
    """fc_k = Linear(w -> 2w) -> BN -> ReLU, split into (mu, s); sigma = softplus(s) + 1e-7.

    As in the official code the ReLU comes before the split, so mu >= 0.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = linear_bn_relu(width, 2 * width)

    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, s = self.fc(a).chunk(2, dim=1)
        return mu, F.softplus(s) + SIGMA_FLOOR


@dataclass
class ViewOutput:
    """One view's forward pass: per-layer Gaussian parameters and codes, and cluster probabilities."""

    mus: list[torch.Tensor]
    sigmas: list[torch.Tensor]
    codes: list[torch.Tensor]  # h_k: a reparameterised sample when sampling, else mu_k
    probs: torch.Tensor  # c = softmax(Linear(h_last)), (batch, K)


class ViewEncoder(nn.Module):
    """Blocks Linear-BN-ReLU of the given widths; a Gaussian head branches off after each block."""

    def __init__(self, in_dim: int, widths: tuple[int, ...], n_clusters: int) -> None:
        super().__init__()
        dims = (in_dim, *widths)
        self.blocks = nn.ModuleList(linear_bn_relu(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.heads = nn.ModuleList(GaussianHead(w) for w in widths)
        self.cluster = nn.Linear(widths[-1], n_clusters)

    def forward(self, x: torch.Tensor, sample: bool) -> ViewOutput:
        mus, sigmas, codes = [], [], []
        a = x
        for block, head in zip(self.blocks, self.heads):
            a = block(a)  # the deterministic backbone feeds the next block
            mu, sigma = head(a)
            mus.append(mu)
            sigmas.append(sigma)
            codes.append(mu + sigma * torch.randn_like(mu) if sample else mu)
        # Official: the cluster head reads the *sample* h_last during training.
        probs = F.softmax(self.cluster(codes[-1]), dim=1)
        return ViewOutput(mus, sigmas, codes, probs)


class SDCIB(nn.Module):
    """The full multi-modal model: one stochastic encoder + cluster head per view.

    It takes the raw views of the official ``.npz`` layout. Each view is log1p-transformed where
    ``log1p`` says so (nonnegative count/feature views), then standardised feature by feature with
    the ``shift_<v>`` / ``scale_<v>`` buffers (set by ``fit_input_scaling`` from the unlabelled
    features; identity until then), so the registered model needs no separate preprocessing.
    """

    def __init__(
        self, view_dims: tuple[int, ...], widths: tuple[int, ...], n_clusters: int, log1p: tuple[bool, ...]
    ) -> None:
        super().__init__()
        self.view_dims, self.widths, self.n_clusters = tuple(view_dims), tuple(widths), n_clusters
        self.log1p = tuple(log1p)
        self.encoders = nn.ModuleList(ViewEncoder(d, widths, n_clusters) for d in view_dims)
        for v, d in enumerate(view_dims):
            self.register_buffer(f"shift_{v}", torch.zeros(d))
            self.register_buffer(f"scale_{v}", torch.ones(d))

    def transformed(self, v: int, x: torch.Tensor, scaled: bool = True) -> torch.Tensor:
        """View ``v`` as the encoder reads it: log1p where flagged, then (if ``scaled``) standardised."""
        x = torch.log1p(x) if self.log1p[v] else x
        return (x - getattr(self, f"shift_{v}")) / getattr(self, f"scale_{v}") if scaled else x

    @torch.no_grad()
    def fit_input_scaling(self, views: list[torch.Tensor]) -> None:
        """Per-feature mean and std of every (log1p'd) view; a constant feature keeps scale 1."""
        for v, x in enumerate(views):
            t = self.transformed(v, x, scaled=False)
            std = t.std(dim=0)
            getattr(self, f"shift_{v}").copy_(t.mean(dim=0))
            getattr(self, f"scale_{v}").copy_(torch.where(std > 1e-8, std, torch.ones_like(std)))

    def forward(self, views: list[torch.Tensor], sample: bool = False) -> list[ViewOutput]:
        return [encoder(self.transformed(v, x), sample) for v, (encoder, x) in enumerate(zip(self.encoders, views))]

    @torch.no_grad()
    def predict(self, views: list[torch.Tensor]) -> torch.Tensor:
        """Fused cluster labels (inference protocol: eval-mode BN and the means mu, no sampling)."""
        was_training = self.training
        self.eval()
        probs = [out.probs.numpy() for out in self(views, sample=False)]
        self.train(was_training)
        return torch.from_numpy(fuse_views(probs))


class Critic(nn.Module):
    """T([h; c]) -> scalar: MLP of widths (w/2, w/2, 1) with BN + ReLU, one per (view, layer)."""

    def __init__(self, code_dim: int, n_clusters: int) -> None:
        super().__init__()
        hidden = max(code_dim // 2, 2)
        self.net = nn.Sequential(
            linear_bn_relu(code_dim + n_clusters, hidden), linear_bn_relu(hidden, hidden), nn.Linear(hidden, 1)
        )

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([h, c], dim=1)).squeeze(1)
