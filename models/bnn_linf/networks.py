"""Binary residual 1-D CNN, the effective weights of its layers, their norms, penalties and bounds.

A binary layer computes ``conv(sign(x), alpha * B) + b`` with binary weights ``B = sign(W)`` of
latent real weights ``W`` and one scaling factor per output channel,
``alpha_i = gamma_i * mean_j |W_ij|``: XNOR-Net / Bi-Real's analytic scale times a learnable gain
``gamma`` (the BatchNorm gain folded in, so ``alpha * B`` *is* the layer's linear map). Sign is
trained with the clipped straight-through estimator (gradient 1 where |x| <= 1).

Effective weights ``M_l`` (the linear map of each layer, as it enters the noise bound):

* stem (full precision, BatchNorm without affine parameters folded in): ``W_i / sqrt(var_i + eps)``;
* binary layer: ``alpha * B``. Unrolled as a matrix (out x in*k), row i has l1 norm
  ``fan_in * |alpha_i| = |gamma_i| * ||W_i||_1``, so ``||alpha * B||_{1,inf} = max_i |gamma_i| ||W_i||_1``:
  with the analytic scale the constraint reaches the latent binary weights and the gain alike;
* head (full precision linear): its weight matrix.

``||M||_{1,inf} = max_i sum_j |M_ij|`` is the l_inf -> l_inf operator norm.
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
        return (x >= 0).to(x.dtype) * 2 - 1

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


def binarize(x: torch.Tensor) -> torch.Tensor:
    return SignSTE.apply(x)


class BinaryConv(nn.Module):
    """Binary activations times binary weights, scaled per output channel: conv(sign(x), alpha*B) + b."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.padding = kernel // 2
        bound = 1 / math.sqrt(channels * kernel)
        self.weight = nn.Parameter(torch.empty(channels, channels, kernel).uniform_(-bound, bound))
        self.gain = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    @property
    def fan_in(self) -> int:
        return self.weight[0].numel()

    def alpha(self, latent_grad: bool = True) -> torch.Tensor:
        """Scaling factors gamma_i * mean_j |W_ij|; ``latent_grad=False`` keeps gradients off ``W``."""
        magnitude = self.weight.abs().flatten(1).mean(1)
        return self.gain * (magnitude if latent_grad else magnitude.detach())

    def binary_weight(self) -> torch.Tensor:
        """alpha_i * sign(W_i): exactly two values, +-alpha_i, in each output channel."""
        return self.alpha().view(-1, 1, 1) * binarize(self.weight)

    def forward(self, x: torch.Tensor, relaxed: bool = False) -> torch.Tensor:
        # relaxed=True swaps sign for hardtanh (1-Lipschitz): the network the noise bound is proved for.
        activation = F.hardtanh(x) if relaxed else binarize(x)
        return F.conv1d(activation, self.binary_weight(), self.bias, padding=self.padding)


class BinaryResNet(nn.Module):
    """Full-precision stem and head around residual binary layers (Bi-Real / IR-Net style).

    The stem's BatchNorm has no affine parameters: it fixes the scale of the residual stream.
    With an affine stem, scaling the stem, every alpha and b by c and the head by 1/c leaves the
    function unchanged (sign is scale-invariant) and would let any norm penalty go to zero
    without changing the network at all.
    """

    def __init__(self, n_classes: int, net: NetConfig) -> None:
        super().__init__()
        self.stem = nn.Conv1d(
            1, net.channels, net.stem_kernel, stride=net.stem_stride, padding=net.stem_kernel // 2, bias=False
        )
        self.stem_norm = nn.BatchNorm1d(net.channels, affine=False)
        self.blocks = nn.ModuleList(BinaryConv(net.channels, net.kernel) for _ in range(net.blocks))
        self.head = nn.Linear(net.channels, n_classes)
        self.relaxed = False

    def stream(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream after the stem and after every binary layer (feature maps)."""
        h = self.stem_norm(self.stem(x))
        states = [h]
        for block in self.blocks:
            h = h + block(h, self.relaxed)
            states.append(h)
            if h.shape[-1] >= 2:
                h = F.avg_pool1d(h, 2, ceil_mode=True)
        return states

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stream(x)[-1].mean(-1))


# ----------------------------------------------------------------------------- effective weights


def stem_effective_weight(net: BinaryResNet, x: torch.Tensor | None = None) -> torch.Tensor:
    """The stem's map with BatchNorm folded in, (channels, kernel): ``W_i / sqrt(var_i + eps)``.

    With a batch ``x`` the variance is the batch's (differentiable, as BatchNorm normalises in
    training); without, the running variance (as in evaluation). The map is invariant to the
    scale of ``W``: penalising it changes the filters' shape, favouring those whose response to
    the signal is large relative to their l1 norm (their gain on worst-case noise)."""
    bn = net.stem_norm
    if x is None:
        var = bn.running_var
    else:
        var = net.stem(x).var(dim=(0, 2), unbiased=False)
    return net.stem.weight.flatten(1) / torch.sqrt(var + bn.eps).unsqueeze(1)


def effective_weights(net: BinaryResNet, x: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Every layer's linear map as a matrix (out x in*k): stem, binary layers (alpha * B), head."""
    binary = [block.binary_weight().flatten(1) for block in net.blocks]
    return [stem_effective_weight(net, x), *binary, net.head.weight]


def row_l1_norms(layer: BinaryConv, latent_grad: bool = True) -> torch.Tensor:
    """Row l1 norms of the unrolled alpha * B: sum_j |alpha_i B_ij| = fan_in |alpha_i| = |gamma_i| ||W_i||_1.

    Written with |B_ij| = 1, so the gradient is exact (no straight-through estimator): it reaches
    the gain and, through alpha's mean |W|, the latent binary weights."""
    return layer.fan_in * layer.alpha(latent_grad).abs()


def smooth_max(values: torch.Tensor, tau: float) -> torch.Tensor:
    """tau * logsumexp(v / tau): >= max(v), <= max(v) + tau log n; every row gets a gradient."""
    return tau * torch.logsumexp(values / tau, dim=-1)


# ----------------------------------------------------------------------------- penalties


def linf_penalty(net: BinaryResNet, tau: float, x: torch.Tensor) -> torch.Tensor:
    """The method: sum over every layer (stem, binary layers, head) of a smooth ||M_l||_{1,inf}."""
    rows = [stem_effective_weight(net, x).abs().sum(1)]
    rows += [row_l1_norms(block) for block in net.blocks]
    rows.append(net.head.weight.abs().sum(1))
    return sum(smooth_max(r, tau) for r in rows)


def alpha_only_penalty(net: BinaryResNet, tau: float) -> torch.Tensor:
    """The ablation (this project's first reconstruction): smooth max of fan_in |alpha_i| over the
    binary layers only, its gradient reaching the scaling factors only; stem and head free."""
    return sum(smooth_max(row_l1_norms(block, latent_grad=False), tau) for block in net.blocks)


def spectral_penalty(net: BinaryResNet, x: torch.Tensor) -> torch.Tensor:
    """The comparator: sum over the same layers of ||M_l||_2 (largest singular value; the l2
    Lipschitz proxy of LCR-style regularisers). Through the straight-through estimator for B."""
    return sum(torch.linalg.matrix_norm(m, ord=2) for m in effective_weights(net, x))


# ----------------------------------------------------------------------------- bounds


@torch.no_grad()
def layer_linf_norms(net: BinaryResNet) -> list[float]:
    """||M_l||_{1,inf} of every layer (stem with running statistics, binary layers, head)."""
    return [float(m.abs().sum(1).max()) for m in effective_weights(net)]


@torch.no_grad()
def binary_linf_bound(net: BinaryResNet) -> float:
    """prod over the binary layers of ||alpha_l * B_l||_{1,inf} (the bound of a plain binary chain)."""
    return math.prod(float(row_l1_norms(block).max()) for block in net.blocks)


@torch.no_grad()
def network_linf_bound(net: BinaryResNet) -> float:
    """l_inf Lipschitz bound of the whole relaxed network (hardtanh for sign, BatchNorm in eval mode).

    stem + BN: ||W / sqrt(var + eps)||_{1,inf};  avg pooling and the mean over positions: 1;
    residual layer: 1 + ||alpha * B||_{1,inf} (hardtanh is 1-Lipschitz);  head: ||W_head||_{1,inf}.
    """
    stem, *binary, head = layer_linf_norms(net)
    return stem * math.prod(1 + b for b in binary) * head


@torch.no_grad()
def network_spectral_bound(net: BinaryResNet) -> float:
    """prod_l ||M_l||_2 over every layer (the l2 counterpart, on the reshaped kernels)."""
    return math.prod(float(torch.linalg.matrix_norm(m, ord=2)) for m in effective_weights(net))
