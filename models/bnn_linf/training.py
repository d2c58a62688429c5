"""The LightningModule every arm trains with: cross-entropy plus the arm's norm penalty.

Validation scores the clean beats and every noisy copy of them; ``val/acc_noisy`` (the mean
accuracy over the noise cells, the claim's own metric on beats the test never sees) drives early
stopping and the grid selection of every arm alike.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from .networks import BinaryResNet, alpha_only_penalty, linf_penalty, spectral_penalty

PENALTIES = ("none", "linf", "alpha_only", "spectral")
SELECTION_METRIC = "val/acc_noisy"


class NoiseRobustBNN(L.LightningModule):
    """Cross-entropy plus ``weight`` x the arm's penalty; Adam with a cosine schedule."""

    def __init__(self, net: BinaryResNet, penalty: str, weight: float, lr: float, max_epochs: int, tau: float) -> None:
        super().__init__()
        if penalty not in PENALTIES:
            raise ValueError(f"penalty {penalty!r}: expected one of {PENALTIES}")
        self.net, self.penalty, self.penalty_weight, self.lr = net, penalty, weight, lr
        self.max_epochs, self.tau = max_epochs, tau
        self._hits = torch.zeros(2)  # correct validation predictions: clean, noisy
        self._counts = torch.zeros(2)

    def regulariser(self, x: torch.Tensor) -> torch.Tensor:
        if self.penalty == "linf":
            return self.penalty_weight * linf_penalty(self.net, self.tau, x)
        if self.penalty == "alpha_only":
            return self.penalty_weight * alpha_only_penalty(self.net, self.tau)
        if self.penalty == "spectral":
            return self.penalty_weight * spectral_penalty(self.net, x)
        return torch.zeros((), device=self.device)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        ce = F.cross_entropy(logits, y)
        penalty = self.regulariser(x)
        self.log_dict(  # epoch means: one record per epoch in the learning curve
            {"train/ce": ce, "train/penalty": penalty, "train/acc": (logits.argmax(1) == y).float().mean()},
            on_step=False,
            on_epoch=True,
            batch_size=len(y),
        )
        return ce + penalty

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # BinaryConnect: keep latent weights where the clipped STE still passes gradient.
        with torch.no_grad():
            for block in self.net.blocks:
                block.weight.clamp_(-1.0, 1.0)

    def on_validation_epoch_start(self) -> None:
        self._hits.zero_()
        self._counts.zero_()

    def validation_step(self, batch, batch_idx):
        x, y, noisy = batch  # noisy: 0 for a clean beat, 1 for a beat of a noise cell
        hit = (self.net(x).argmax(1) == y).float()
        self._hits += torch.stack([(hit * (1 - noisy)).sum(), (hit * noisy).sum()]).cpu()
        self._counts += torch.stack([(1 - noisy).sum(), noisy.sum()]).cpu()

    def on_validation_epoch_end(self) -> None:
        # Every noise cell holds the same beats, so pooling the noisy copies is the mean over cells.
        acc = self._hits / self._counts.clamp(min=1)
        self.log_dict({"val/acc_clean": acc[0], SELECTION_METRIC: acc[1]})

    def configure_optimizers(self):
        optimiser = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=self.max_epochs)
        return [optimiser], [schedule]


def as_input(X: np.ndarray) -> torch.Tensor:
    """(n, length) windows -> (n, 1, length) float tensor."""
    return torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)).unsqueeze(1)


def _batched(dataset: TensorDataset, sampler, batch_size: int) -> DataLoader:
    """Batches gathered by one fancy index per batch (a tensor dataset needs no per-item collation)."""
    return DataLoader(dataset, sampler=BatchSampler(sampler, batch_size, drop_last=False), batch_size=None)


def train_loader(X: np.ndarray, y: np.ndarray, batch_size: int, seed: int) -> DataLoader:
    """Shuffled training batches whose order depends on ``seed`` only."""
    dataset = TensorDataset(as_input(X), torch.from_numpy(y))
    return _batched(dataset, RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)), batch_size)


def validation_loader(X: np.ndarray, X_noisy: np.ndarray, y: np.ndarray) -> DataLoader:
    """Clean validation beats followed by every noisy copy, each flagged clean (0) or noisy (1)."""
    cells = len(X_noisy)
    X_all = np.concatenate([X[None], X_noisy]).reshape(-1, X.shape[-1])
    flags = torch.cat([torch.zeros(len(y)), torch.ones(cells * len(y))])
    dataset = TensorDataset(as_input(X_all), torch.from_numpy(np.tile(y, cells + 1)), flags)
    return _batched(dataset, SequentialSampler(dataset), 4096)
