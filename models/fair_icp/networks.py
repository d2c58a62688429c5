"""Networks: the repo's predictors and discriminator, plus an ensemble form that trains many
independent copies (seeds x mu x sampler) in one batched pass."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear layers with ReLU between: (d, 1) is the repo's linear_model, (d, 64, out) its deep_model."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if i:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(fan_in, fan_out))
    return nn.Sequential(*layers)


class EnsembleMLP(nn.Module):
    """``members`` independent MLPs of the same shape, evaluated with batched matmuls.

    Input [M, B, in] -> output [M, B, out]. Each member is initialised like ``nn.Linear``
    (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases), and because every member's
    loss only touches its own slice and Adam is elementwise, training the stack is the same
    as training the members one by one.
    """

    def __init__(self, members: int, sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.sizes = tuple(sizes)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if i:
                x = torch.relu(x)
            x = torch.baddbmm(b, x, w)
        return x

    def member(self, m: int) -> nn.Sequential:
        """Member ``m`` as a plain ``nn.Sequential`` (same numbers)."""
        net = mlp(self.sizes)
        linears = [layer for layer in net if isinstance(layer, nn.Linear)]
        with torch.no_grad():
            for layer, w, b in zip(linears, self.weights, self.biases):
                layer.weight.copy_(w[m].T)
                layer.bias.copy_(b[m, 0])
        return net


class FairPredictor(nn.Module):
    """The registered model: raw features -> prediction (response scale, or class logits).

    Holds the training standardisation as buffers so it maps raw X straight to raw-scale Y.
    """

    def __init__(self, sizes: tuple[int, ...], regression: bool) -> None:
        super().__init__()
        self.net = mlp(sizes)
        self.regression = regression
        self.register_buffer("x_mean", torch.zeros(sizes[0]))
        self.register_buffer("x_scale", torch.ones(sizes[0]))
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_scale", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net((x - self.x_mean) / self.x_scale)
        if self.regression:
            return out[..., 0] * self.y_scale + self.y_mean
        return out
