"""The certified classifiers: multinomial logistic regression (exact oracle) or a ReLU MLP."""

from __future__ import annotations

import torch
from torch import nn

CLASSES = 10


class Classifier(nn.Module):
    """Linear (no hidden layer) or a Linear-ReLU-...-Linear stack on flattened images."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...] = (), classes: int = CLASSES) -> None:
        super().__init__()
        widths = (in_dim, *hidden)
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x.flatten(1))
