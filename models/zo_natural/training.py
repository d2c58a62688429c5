"""The LightningModules: backprop pre-training of the ideal twin, zeroth-order training of the chip."""

from __future__ import annotations

import math
import time

import lightning as L
import torch

from models.zo_natural.algorithm import PerturbationSampler, block_fisher, chip_metrics, zo_gradient
from models.zo_natural.networks import ChipNetwork

# Names of the ZO module's per-epoch evaluation loaders, in order: the whole training set (the
# claim's training loss) and the validation split (early stopping, lr selection). The test split
# is scored once, on the kept weights (each pass over 10k test images costs ~6 ZO steps).
EVAL_STAGES = ("trainset", "val")


class PretrainModule(L.LightningModule):
    """Backprop on the ideal twin (the precursor's rough software pre-training)."""

    def __init__(self, twin: ChipNetwork, lr: float) -> None:
        super().__init__()
        self.twin, self.lr = twin, lr

    def _shared_step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        losses, accuracy = chip_metrics(self.twin, self.twin.theta[None], x, y)
        self.log_dict(
            {f"{stage}/loss": losses[0], f"{stage}/acc": accuracy[0]}, on_step=False, on_epoch=True, batch_size=len(y)
        )
        return losses[0]

    def training_step(self, batch, batch_idx):
        return self._shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._shared_step(batch, "val")  # the twin on the validation split (early stopping)

    def configure_optimizers(self):
        return torch.optim.Adam(self.twin.parameters(), lr=self.lr)


class ZOModule(L.LightningModule):
    """Zeroth-order training of the chip: Q + 1 forward queries per minibatch, no backprop through it.

    Manual optimisation: the estimate g_hat is written into ``theta.grad`` and Adam (or SGD)
    steps on it. Natural probes take their covariance from the twin's block Fisher at the
    chip's current parameters, refreshed every ``fisher_every`` minibatches.
    """

    def __init__(
        self, chip: ChipNetwork, twin: ChipNetwork, sampler: PerturbationSampler, zo_cfg, lr: float, probe_seed: int
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.chip, self.twin, self.sampler, self.cfg, self.lr = chip, twin, sampler, zo_cfg, lr
        self.probes = torch.Generator().manual_seed(probe_seed)
        self.queries = 0  # parameter settings evaluated on a training minibatch
        self.mu_prime = zo_cfg.mu / math.sqrt(chip.n_params)

    def _shared_step(self, batch, stage: str, deltas: torch.Tensor | None = None) -> torch.Tensor:
        """Query the chip at theta (and theta + mu' delta_q); record loss/acc at theta; return all losses.

        Training minibatches are summed and logged once per epoch (``train/loss``, ``train/acc``):
        Lightning's per-call logging costs more than a chip query at this size.
        """
        x, y = batch
        theta = self.chip.theta.detach()
        thetas = theta[None] if deltas is None else torch.cat([theta[None], theta + self.mu_prime * deltas])
        with torch.no_grad():
            losses, accuracy = chip_metrics(self.chip, thetas, x, y)
        if stage == "train":
            self._train_sums = [
                self._train_sums[0] + float(losses[0]) * len(y),
                self._train_sums[1] + float(accuracy[0]) * len(y),
                self._train_sums[2] + len(y),
            ]
        else:
            self.log_dict(
                {f"{stage}/loss": losses[0], f"{stage}/acc": accuracy[0]},
                on_step=False,
                on_epoch=True,
                batch_size=len(y),
                add_dataloader_idx=False,
            )
        return losses

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # What a resumed run needs beyond weights, Adam and the probe generator (the spine saves every
        # torch.Generator of the module): the curvature EMA and the query count.
        checkpoint["zo_state"] = {"queries": self.queries, "curvature": self.sampler.curvature}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint["zo_state"]
        self.queries = int(state["queries"])
        if state["curvature"] is not None:
            self.sampler.set_curvature(list(state["curvature"]))

    def on_train_start(self) -> None:
        self._started = time.perf_counter()

    def on_train_epoch_start(self) -> None:
        self._train_sums = [0.0, 0.0, 0]  # loss and accuracy sums, samples

    def training_step(self, batch, batch_idx):
        x, _ = batch
        if self.sampler.natural and (self.sampler.cholesky is None or self.global_step % self.cfg.fisher_every == 0):
            self.twin.theta.data.copy_(self.chip.theta.detach())
            self.sampler.update(block_fisher(self.twin, self.chip.theta, x))
        deltas = self.sampler.sample(self.cfg.n_probes, self.probes).to(self.chip.theta)
        losses = self._shared_step(batch, "train", deltas)
        self.queries += len(losses)
        optimiser = self.optimizers()
        optimiser.zero_grad()
        self.chip.theta.grad = zo_gradient(losses, deltas, self.mu_prime, self.cfg.lambda_s)
        optimiser.step()
        return losses[0]

    def on_train_epoch_end(self) -> None:
        loss_sum, acc_sum, count = self._train_sums
        self.log_dict(
            {
                "train/loss": loss_sum / count,
                "train/acc": acc_sum / count,
                "queries": float(self.queries),
                "seconds": time.perf_counter() - self._started,
            }
        )  # wall clock, evaluation included

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        self._shared_step(batch, EVAL_STAGES[dataloader_idx])

    def configure_optimizers(self):
        if self.cfg.optimizer == "adam":
            return torch.optim.Adam([self.chip.theta], lr=self.lr)
        return torch.optim.SGD([self.chip.theta], lr=self.lr, momentum=self.cfg.momentum)
