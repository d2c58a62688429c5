"""SDCIB networks: stochastic encoders with a Gaussian head after every block, and critics.

Every view has its own encoder (no weight sharing), but all views run as *one* batched operation:
a ``GroupedLinear`` holds one weight matrix per view and applies them with a single ``torch.baddbmm``
over a (views, batch, features) tensor, and a ``GroupedBatchNorm`` is one BatchNorm over the views'
channels side by side. With 6 views this replaces 6 small per-view kernels (and their autograd
nodes) by one, which is what a CPU step costs at these widths. The views' input widths differ: each
view is zero-padded to the widest one, and the padded rows of the first weight are zero and get zero
gradient (their inputs are 0), so they stay zero under Adam. View v of the batched network computes
exactly what a per-view ``Linear -> BatchNorm1d -> ReLU`` encoder with view v's weights computes
(``tests/methods/test_sdcib.py`` checks outputs, losses and gradients against such per-view modules).

``GroupedCritic`` is the JSD mutual-information critic T([h; c]) of one layer for every view at once;
critics are training-only and live in the LightningModule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .algorithm import fuse_views

SIGMA_FLOOR = 1e-7  # official: sigma = softplus(s) + 1e-7


class GroupedLinear(nn.Module):
    """``groups`` independent ``nn.Linear(n_in, n_out)`` layers applied to (groups, batch, n_in) at once.

    ``fan_in[g]`` (default ``n_in``) is group g's true input width: its weight rows beyond it are zero
    (zero-padded inputs), and its initialisation is ``nn.Linear``'s for that width, U(+-1/sqrt(fan_in)).
    """

    def __init__(self, groups: int, n_in: int, n_out: int, fan_in: tuple[int, ...] | None = None) -> None:
        super().__init__()
        fan_in = tuple(fan_in or (n_in,) * groups)
        self.weight = nn.Parameter(torch.zeros(groups, n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(groups, n_out))
        with torch.no_grad():
            for g, width in enumerate(fan_in):
                bound = 1 / math.sqrt(width)
                self.weight[g, :width].uniform_(-bound, bound)
                self.bias[g].uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class GroupedBatchNorm(nn.Module):
    """``groups`` independent ``BatchNorm1d(width)`` as one BatchNorm over groups * width channels."""

    def __init__(self, groups: int, width: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(groups * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups, batch, width = x.shape
        flat = x.transpose(0, 1).reshape(batch, groups * width)  # channel g * width + j = group g, channel j
        # Back to (groups, batch, width) in memory too: random draws and kernels on the strided view are slow.
        return self.bn(flat).view(batch, groups, width).transpose(0, 1).contiguous()


class GroupedBlock(nn.Module):
    """Linear -> BatchNorm -> ReLU, one per group."""

    def __init__(self, groups: int, n_in: int, n_out: int, fan_in: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.linear = GroupedLinear(groups, n_in, n_out, fan_in)
        self.norm = GroupedBatchNorm(groups, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(self.linear(x)))


class GaussianHead(nn.Module):
    """fc_k = Linear(w -> 2w) -> BN -> ReLU, split into (mu, s); sigma = softplus(s) + 1e-7.

    As in the official code the ReLU comes before the split, so mu >= 0.
    """

    def __init__(self, groups: int, width: int) -> None:
        super().__init__()
        self.fc = GroupedBlock(groups, width, 2 * width)

    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, s = self.fc(a).chunk(2, dim=-1)
        return mu, F.softplus(s) + SIGMA_FLOOR


@dataclass
class ViewsOutput:
    """All views' forward pass, each tensor stacked over views (view first)."""

    mus: list[torch.Tensor]  # per layer k: (views, batch, w_k)
    sigmas: list[torch.Tensor]
    codes: list[torch.Tensor]  # h_k: a reparameterised sample when sampling, else mu_k
    probs: torch.Tensor  # c = softmax(Linear(h_last)), (views, batch, K)


class SDCIB(nn.Module):
    """The full multi-modal model: one stochastic encoder + cluster head per view, run batched.

    Encoder of each view: blocks Linear-BN-ReLU of the given widths, a Gaussian head branching off
    after each block (the deterministic backbone feeds the next block), and a linear cluster head
    on the last code. It takes the raw views of the official ``.npz`` layout. Each view is
    log1p-transformed where ``log1p`` says so (nonnegative count/feature views), then standardised
    feature by feature with the ``shift`` / ``scale`` buffers (row v: view v, zero-padded; set by
    ``fit_input_scaling`` from the unlabelled features; identity until then), so the registered
    model needs no separate preprocessing.
    """

    def __init__(
        self, view_dims: tuple[int, ...], widths: tuple[int, ...], n_clusters: int, log1p: tuple[bool, ...]
    ) -> None:
        super().__init__()
        self.view_dims, self.widths, self.n_clusters = tuple(view_dims), tuple(widths), n_clusters
        self.log1p = tuple(log1p)
        n_views, dims = len(view_dims), (max(view_dims), *widths)
        fan_in = [self.view_dims] + [None] * (len(widths) - 1)
        self.blocks = nn.ModuleList(
            GroupedBlock(n_views, a, b, f) for a, b, f in zip(dims[:-1], dims[1:], fan_in, strict=True)
        )
        self.heads = nn.ModuleList(GaussianHead(n_views, w) for w in widths)
        self.cluster = GroupedLinear(n_views, widths[-1], n_clusters)
        self.register_buffer("shift", torch.zeros(n_views, max(view_dims)))
        self.register_buffer("scale", torch.ones(n_views, max(view_dims)))
        self.register_buffer("log1p_mask", torch.tensor(self.log1p).view(n_views, 1, 1))

    def transformed(self, v: int, x: torch.Tensor, scaled: bool = True) -> torch.Tensor:
        """View ``v`` as its encoder reads it: log1p where flagged, then (if ``scaled``) standardised."""
        x = torch.log1p(x) if self.log1p[v] else x
        d = self.view_dims[v]
        return (x - self.shift[v, :d]) / self.scale[v, :d] if scaled else x

    def stacked_input(self, views: list[torch.Tensor]) -> torch.Tensor:
        """(views, batch, max dim): every view transformed as ``transformed`` does, zero-padded."""
        x = views[0].new_zeros(len(views), len(views[0]), self.shift.shape[1])
        for v, view in enumerate(views):
            x[v, :, : view.shape[1]] = view
        # log1p(0) = 0 and padded shift 0 / scale 1 keep the padding at exactly zero; an unflagged
        # view's log1p (NaN below -1) is computed but never selected.
        x = torch.where(self.log1p_mask, torch.log1p(x), x)
        return (x - self.shift.unsqueeze(1)) / self.scale.unsqueeze(1)

    @torch.no_grad()
    def fit_input_scaling(self, views: list[torch.Tensor]) -> None:
        """Per-feature mean and std of every (log1p'd) view; a constant feature keeps scale 1."""
        for v, x in enumerate(views):
            t = self.transformed(v, x, scaled=False)
            std = t.std(dim=0)
            self.shift[v, : x.shape[1]] = t.mean(dim=0)
            self.scale[v, : x.shape[1]] = torch.where(std > 1e-8, std, torch.ones_like(std))

    def forward(self, views: list[torch.Tensor], sample: bool = False) -> ViewsOutput:
        mus, sigmas, codes = [], [], []
        a = self.stacked_input(views)
        for block, head in zip(self.blocks, self.heads):
            a = block(a)
            mu, sigma = head(a)
            mus.append(mu)
            sigmas.append(sigma)
            codes.append(mu + sigma * torch.randn_like(mu) if sample else mu)
        # Official: the cluster head reads the *sample* h_last during training.
        probs = F.softmax(self.cluster(codes[-1]), dim=-1)
        return ViewsOutput(mus, sigmas, codes, probs)

    @torch.no_grad()
    def predict(self, views: list[torch.Tensor]) -> torch.Tensor:
        """Fused cluster labels (inference protocol: eval-mode BN and the means mu, no sampling)."""
        was_training = self.training
        self.eval()
        probs = list(self(views, sample=False).probs.numpy())
        self.train(was_training)
        return torch.from_numpy(fuse_views(probs))


class GroupedCritic(nn.Module):
    """T([h; c]) -> scalar for ``groups`` independent critics (one per view of a layer) at once.

    Each is an MLP of widths (w/2, w/2, 1) with BN + ReLU, reading (groups, batch, w) codes and
    (groups, batch, K) assignments and returning (groups, batch) scores.
    """

    def __init__(self, groups: int, code_dim: int, n_clusters: int) -> None:
        super().__init__()
        hidden = max(code_dim // 2, 2)
        self.net = nn.Sequential(
            GroupedBlock(groups, code_dim + n_clusters, hidden),
            GroupedBlock(groups, hidden, hidden),
            GroupedLinear(groups, hidden, 1),
        )

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([h, c], dim=-1)).squeeze(-1)
