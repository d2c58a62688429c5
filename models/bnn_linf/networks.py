"""Binary residual CNN (1-D for ECG, 2-D for digits), its norms, penalties and noise bounds.

A binary layer computes ``conv(sign(x), alpha * sign(W)) + b``: latent real weights ``W``
binarised by sign, one scaling factor ``alpha_i`` per output channel, and a shift ``b``. BatchNorm
is folded into ``alpha`` and ``b`` (no BN after binary convs) so that ``alpha * B`` *is* the
layer's linear map and its norm bounds the layer's noise gain. Sign is trained with the clipped
straight-through estimator (gradient 1 where |x| <= 1).

Unrolled as a matrix (out x in*k*k), row i of ``alpha * B`` has l1 norm ``fan_in * |alpha_i|``,
so ``||alpha * B||_{1,inf} = max_i fan_in * |alpha_i|`` (the l_inf -> l_inf operator norm).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import NetConfig


class SignSTE(torch.autograd.Function):
    """sign(x) in {-1, +1} forward (sign(0) = +1); clipped identity gradient backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


def binarize(x: torch.Tensor) -> torch.Tensor:
    return SignSTE.apply(x)


class BinaryConv(nn.Module):
    """Binary activations times binary weights, scaled per output channel: conv(sign(x), alpha*B) + b."""

    def __init__(self, dims: int, channels: int, kernel: int) -> None:
        super().__init__()
        self.dims, self.padding = dims, kernel // 2
        shape = (channels, channels) + (kernel,) * dims
        fan_in = channels * kernel**dims
        self.weight = nn.Parameter(torch.empty(shape).uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in)))
        # XNOR-Net initialisation of the scaling factor: the mean |latent weight| of each filter.
        self.alpha = nn.Parameter(self.weight.detach().abs().flatten(1).mean(1).clone())
        self.bias = nn.Parameter(torch.zeros(channels))

    @property
    def fan_in(self) -> int:
        return self.weight[0].numel()

    def binary_weight(self) -> torch.Tensor:
        """alpha_i * sign(W_i): exactly two values, +-alpha_i, in each output channel."""
        return self.alpha.view(-1, *[1] * (self.dims + 1)) * binarize(self.weight)

    def forward(self, x: torch.Tensor, relaxed: bool = False) -> torch.Tensor:
        # relaxed=True swaps sign for hardtanh (1-Lipschitz): the network the noise bound is proved for.
        a = F.hardtanh(x) if relaxed else binarize(x)
        conv = F.conv1d if self.dims == 1 else F.conv2d
        return conv(a, self.binary_weight(), self.bias, padding=self.padding)


class BinaryResNet(nn.Module):
    """Full-precision stem and head around residual binary layers (Bi-Real / IR-Net style).

    The stem's BatchNorm has no affine parameters: it fixes the scale of the residual stream.
    With an affine stem, scaling the stem, every alpha and b by c and the head by 1/c leaves the
    function unchanged (sign is scale-invariant) and would let any norm penalty on alpha go to
    zero without changing the network at all.
    """

    def __init__(self, dims: int, n_classes: int, net: NetConfig, stem_pool: int = 1) -> None:
        super().__init__()
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        norm = nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d
        self.dims = dims
        self.stem = conv(
            1, net.channels, net.stem_kernel, stride=net.stem_stride, padding=net.stem_kernel // 2, bias=False
        )
        self.stem_norm = norm(net.channels, affine=False)
        pool = nn.MaxPool1d if dims == 1 else nn.MaxPool2d
        self.stem_pool = pool(stem_pool) if stem_pool > 1 else nn.Identity()
        self.blocks = nn.ModuleList(BinaryConv(dims, net.channels, net.kernel) for _ in range(net.blocks))
        self.head = nn.Linear(net.channels, n_classes)
        self.relaxed = False

    def _downsample(self, h: torch.Tensor) -> torch.Tensor:
        if min(h.shape[2:]) < 2:
            return h
        pool = F.avg_pool1d if self.dims == 1 else F.avg_pool2d
        return pool(h, 2, ceil_mode=True)

    def stream(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream after the stem and after every binary layer (feature maps)."""
        h = self.stem_pool(self.stem_norm(self.stem(x)))
        states = [h]
        for block in self.blocks:
            h = h + block(h, self.relaxed)
            states.append(h)
            h = self._downsample(h)
        return states

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stream(x)[-1]
        return self.head(h.flatten(2).mean(-1))


# ----------------------------------------------------------------------------- norms and penalties


def row_l1_norms(layer: BinaryConv, through_sign: bool = False) -> torch.Tensor:
    """Row l1 norms of the unrolled alpha * B: sum_j |alpha_i B_ij| (= fan_in |alpha_i|).

    |B_ij| = 1 does not depend on the latent weights; letting the STE differentiate |sign(W)|
    (``through_sign=True``) invents a gradient that shrinks W without changing the norm.
    """
    signs = binarize(layer.weight)
    if not through_sign:
        signs = signs.detach()
    return (layer.alpha.view(-1, 1) * signs.flatten(1)).abs().sum(1)


def smooth_max(values: torch.Tensor, tau: float) -> torch.Tensor:
    """tau * logsumexp(v / tau): >= max(v), <= max(v) + tau log n; every row gets a gradient."""
    return tau * torch.logsumexp(values / tau, dim=-1)


def linf_penalty(net: BinaryResNet, tau: float, through_sign: bool = False) -> torch.Tensor:
    """The method: sum over binary layers of a smooth ||alpha_l * B_l||_{1,inf}."""
    return sum(smooth_max(row_l1_norms(b, through_sign), tau) for b in net.blocks)


def spectral_norm(layer: BinaryConv) -> torch.Tensor:
    """Largest singular value of the reshaped alpha * B (out x in*k*k): the l2 Lipschitz proxy."""
    return torch.linalg.matrix_norm(layer.binary_weight().flatten(1), ord=2)


def spectral_penalty(net: BinaryResNet) -> torch.Tensor:
    """The SOTA-style comparator: sum over binary layers of ||alpha_l * B_l||_2 (via the STE)."""
    return sum(spectral_norm(b) for b in net.blocks)


@torch.no_grad()
def binary_linf_bound(net: BinaryResNet) -> float:
    """prod_l ||alpha_l * B_l||_{1,inf}: the brief's bound on the binary layers' noise amplification."""
    return math.prod(float(row_l1_norms(b).max()) for b in net.blocks)


@torch.no_grad()
def binary_spectral_bound(net: BinaryResNet) -> float:
    """prod_l ||alpha_l * B_l||_2 of the reshaped kernels (the l2 counterpart)."""
    return math.prod(float(spectral_norm(b)) for b in net.blocks)


@torch.no_grad()
def network_linf_bound(net: BinaryResNet) -> float:
    """l_inf Lipschitz bound of the whole relaxed network (hardtanh for sign, BN in eval mode).

    stem conv + BN:   max_i sum|W_i| / sqrt(var_i + eps);  max/avg pooling and the mean: 1;
    residual layer:   1 + ||alpha * B||_{1,inf} (hardtanh is 1-Lipschitz);  head: max row l1.
    """
    bn = net.stem_norm
    stem = (net.stem.weight.abs().flatten(1).sum(1) / torch.sqrt(bn.running_var + bn.eps)).max()
    blocks = math.prod(1 + float(row_l1_norms(b).max()) for b in net.blocks)
    head = net.head.weight.abs().sum(1).max()
    return float(stem) * blocks * float(head)
