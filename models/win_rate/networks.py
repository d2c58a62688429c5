"""The policies and the learned judge of the sequence task.

``MarkovPolicies`` is a stack of R independent policies (one per arm x learning rate x seed), each
``pi(y_t | x, y_{t-1}, t) = softmax(log q(y_t | x, y_{t-1}) + theta[x, t, y_{t-1}, y_t])``: a
position-dependent bigram policy started exactly at the anchor (theta = 0). Every objective's
population optimum that is a KL-tilt of q by an additive reward (RLHF, DPO) and every
deterministic optimum (h-WRO, NLHF) lies in (or at the boundary of) this class, so what separates
a trained policy from its objective's optimum is optimisation, not capacity.

``Judge`` is a Bradley-Terry reward model with the oracle's feature structure (unigram and bigram
terms per prompt), fitted by ridge-penalised logistic regression on the training pairs.
"""

from __future__ import annotations

import torch
from torch import nn

from .data import score, score_rows


class MarkovPolicies(nn.Module):
    """R policies over (K, L, V, V) tables; ``theta`` splits into one parameter per learning-rate group."""

    def __init__(self, log_q: torch.Tensor, group_sizes: list[int]) -> None:
        super().__init__()
        self.register_buffer("log_q", log_q.float())  # (K, L, V, V)
        self.groups = nn.ParameterList(
            nn.Parameter(torch.zeros((n, *log_q.shape), dtype=torch.float32)) for n in group_sizes
        )

    @property
    def theta(self) -> torch.Tensor:
        return torch.cat(list(self.groups), 0)

    def log_tables(self) -> torch.Tensor:
        """log pi(y_t | x, y_{t-1}) for every row: (R, K, L, V, V)."""
        return torch.log_softmax(self.log_q + self.theta, -1)

    def log_prob(self, tables: torch.Tensor, rows: torch.Tensor, prompts: torch.Tensor, y: torch.Tensor):
        return score_rows(tables, rows, prompts, y)

    @torch.no_grad()
    def assign(self, theta: torch.Tensor) -> None:
        """Set every row's theta from an (R, K, L, V, V) tensor (restoring best weights, freezing stopped rows)."""
        start = 0
        for group in self.groups:
            group.copy_(theta[start : start + len(group)])
            start += len(group)


class Judge(nn.Module):
    """r_hat(x, y) = sum_t U[x, y_t] + sum_{t >= 1} B[x, y_{t-1}, y_t]: a BT reward with the oracle's structure."""

    def __init__(self, n_prompts: int, length: int, n_symbols: int) -> None:
        super().__init__()
        self.length = length
        self.unigram = nn.Parameter(torch.zeros(n_prompts, n_symbols, dtype=torch.float64))
        self.bigram = nn.Parameter(torch.zeros(n_prompts, n_symbols, n_symbols, dtype=torch.float64))

    def table(self) -> torch.Tensor:
        """The reward as a (K, L, V, V) per-step table (the layout of ``data.reward_table``)."""
        K, V = self.unigram.shape
        steps = self.unigram[:, None, None, :] + self.bigram[:, None].expand(K, self.length, V, V)
        return torch.cat([self.unigram[:, None, None, :].expand(K, 1, V, V), steps[:, 1:]], 1)

    def forward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        return score(self.table(), prompts, responses)
