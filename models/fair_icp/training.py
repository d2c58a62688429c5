"""The LightningModule of FairICP: an ensemble of independent (predictor, discriminator) pairs
trained by the repo's alternating min-max, with per-member early stopping on validation.

Every member is one arm x mu x split x learning rate. Each epoch runs one discriminator pass and
one predictor pass over the member's own training rows (the repo's dis_steps = loss_steps = 1).
After each epoch every member is scored on its split's validation rows by the same criterion,
``(1 - mu) * prediction loss + mu * KPC(Y_hat, A | Y)`` (the validation analogue of its training
objective, with the paper's dependence measure against the real A, so identical for every
arm). Under the official fixed schedule (``stop_early=False``, the default) every member trains
``max_epochs`` and keeps its last weights; the best validation epoch is still tracked (the fit
record's "best"). With early stopping each member keeps its best-scoring weights and stops counting
after ``patience`` epochs without improvement (it trains on with the others, but its selection is
final); the fit stops when every member has stopped.
"""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import torch
from torch import nn

from models.fair_icp import algorithm as alg
from models.fair_icp.networks import EnsembleMLP

DIS_PHASE, PRED_PHASE, EVAL_PHASE = 0, 1, -1


class EnsembleBatches:
    """One epoch = a discriminator pass, then a predictor pass, each over a fresh shuffle of every
    member's training rows; yields [members, batch, ...] tensors.

    ``x``, ``y``, ``a`` are [splits, N, .] tables standardised per split; ``train_rows`` [splits, n]
    the rows of each split's training part; ``copies`` [groups, epochs, n, dA] the per-epoch A_tilde
    of each (sampler, split), aligned with ``train_rows``.
    """

    def __init__(self, x, y, a, train_rows, copies, member_split, member_copy, batch_size: int, seed: int) -> None:
        self.x, self.y, self.a, self.train_rows = x, y, a, train_rows
        self.copies, self.member_split, self.member_copy = copies, member_split, member_copy
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0

    def __len__(self) -> int:
        return 2 * math.ceil(self.train_rows.shape[1] / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Called by ``fit`` at every epoch start: a resumed fit continues with the next epoch's copies and
        shuffles instead of replaying epoch 0's."""
        self.epoch = epoch

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        a_tilde = self.copies[self.member_copy, epoch % self.copies.shape[1]]  # [M, n, dA]
        members, n = a_tilde.shape[:2]
        split = self.member_split[:, None]
        for phase in (DIS_PHASE, PRED_PHASE):
            order = torch.argsort(torch.rand(members, n, generator=gen), dim=1)
            for idx in order.split(self.batch_size, dim=1):
                rows = self.train_rows[split, idx]
                yield {
                    "x": self.x[split, rows], "y": self.y[split, rows], "a": self.a[split, rows], "phase": phase,
                    "a_tilde": torch.gather(a_tilde, 1, idx[..., None].expand(-1, -1, a_tilde.shape[-1])),
                }  # fmt: skip


class OneBatch:
    """A loader that yields one prepared batch (every member's validation rows)."""

    def __init__(self, batch: dict) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        yield self.batch


class ValidationGraphs:
    """The fixed 1-NN graphs of each split's validation (Y, A) and Y, for the per-epoch KPC."""

    def __init__(self, y: np.ndarray, a: np.ndarray, seed: int) -> None:
        """``y`` [splits, n_val], ``a`` [splits, n_val, dA] on the raw scale (as the repo's test)."""
        rng = np.random.default_rng([seed, 7])
        self.nn_y = np.stack([alg.nearest_neighbours(ys, rng) for ys in y])
        self.nn_ya = np.stack([alg.nearest_neighbours(np.column_stack([ys, as_]), rng) for ys, as_ in zip(y, a)])

    def kpc(self, y_hat: np.ndarray, member_split: np.ndarray) -> np.ndarray:
        """KPC(Y_hat_m, A | Y) for every member on its split's validation rows: [M, n, dy] -> [M]."""
        sigma = alg.gaussian_kernel_sigma(y_hat)
        finite = np.where(np.isfinite(sigma), sigma, 0.0)
        rows = np.arange(len(y_hat))[:, None]

        def mean_kernel(nn_index: np.ndarray) -> np.ndarray:
            diff = y_hat - y_hat[rows, nn_index[member_split]]
            return np.exp(-finite[:, None] * (diff**2).sum(-1)).mean(-1)

        t_y, t_ya = mean_kernel(self.nn_y), mean_kernel(self.nn_ya)
        denom = 1.0 - t_y
        out = np.where(denom > 1e-12, (t_ya - t_y) / np.where(denom > 1e-12, denom, 1.0), 0.0)
        return np.where(np.isfinite(sigma), out, 0.0)


class FairICPModule(L.LightningModule):
    """Adversarial min-max over an ensemble of predictors and discriminators (manual optimisation)."""

    def __init__(self, predictors: EnsembleMLP, discriminators: EnsembleMLP, mu: torch.Tensor, lr: torch.Tensor,
                 member_split: np.ndarray, graphs: ValidationGraphs, regression: bool, lr_dis: float,
                 patience: int, stop_early: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.automatic_optimization = False
        self.predictors, self.discriminators = predictors, discriminators
        self.best_predictors = EnsembleMLP(len(mu), predictors.sizes)  # the best validation epoch's weights
        self.best_predictors.load_state_dict(predictors.state_dict())
        self.best_predictors.requires_grad_(False)
        self.register_buffer("mu", mu)
        self.register_buffer("lr", lr)
        self.register_buffer("best_score", torch.full((len(mu),), math.inf, dtype=torch.float64))
        self.register_buffer("best_epoch", torch.full((len(mu),), -1, dtype=torch.long))
        self.register_buffer("waited", torch.zeros(len(mu), dtype=torch.long))
        self.register_buffer("last_score", torch.full((len(mu),), math.inf, dtype=torch.float64))
        self.stop_early = stop_early
        self.member_split, self.graphs = np.asarray(member_split), graphs
        self.regression, self.lr_dis, self.patience = regression, lr_dis, patience
        self._sums: dict[str, tuple[torch.Tensor, int]] = {}
        self.validations = 0  # validation epochs run (the members' evaluations)

    def prediction_loss(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-member MSE (standardised Y) or cross-entropy: [M]."""
        if self.regression:
            return ((y_hat - y) ** 2).mean(dim=(1, 2))
        logp = torch.log_softmax(y_hat, dim=-1)
        return -logp.gather(-1, y.long()).mean(dim=(1, 2))

    def shared_step(self, batch: dict, detach_prediction: bool) -> dict[str, torch.Tensor]:
        """Losses per member. Label 1 = (Y_hat, A_tilde, Y), label 0 = (Y_hat, A, Y), as the repo."""
        y_hat = self.predictors(batch["x"])
        pred_loss = self.prediction_loss(y_hat, batch["y"])
        seen = y_hat.detach() if detach_prediction else y_hat
        tilde = torch.cat([seen, batch["a_tilde"], batch["y"]], dim=-1)
        real = torch.cat([seen, batch["a"], batch["y"]], dim=-1)
        logit_tilde, logit_real = self.discriminators(torch.cat([tilde, real], dim=1)).chunk(2, dim=1)

        def bce(logits: torch.Tensor, label: float) -> torch.Tensor:  # per member, mean over rows
            target = torch.full_like(logits, label)
            return nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(dim=(1, 2))

        return {
            "pred_loss": pred_loss,
            "dis_loss": 0.5 * (bce(logit_tilde, 1.0) + bce(logit_real, 0.0)),  # the discriminator's
            "adv_loss": 0.5 * (bce(logit_tilde, 0.0) + bce(logit_real, 1.0)),  # the predictor's (flipped)
        }

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        opt_pred, opt_dis = self.optimizers()
        if batch["phase"] == DIS_PHASE:
            out = self.shared_step(batch, detach_prediction=True)
            loss = (self.mu * out["dis_loss"]).sum()  # the repo weights D's loss by mu too
            opt_dis.zero_grad()
            self.manual_backward(loss)
            opt_dis.step()
            self._accumulate("train/dis_loss", out["dis_loss"])
        else:
            out = self.shared_step(batch, detach_prediction=False)
            loss = ((1 - self.mu) * out["pred_loss"] + self.mu * out["adv_loss"]).sum()
            opt_pred.zero_grad()
            self.manual_backward(loss)
            opt_pred.step()
            self._accumulate("train/pred_loss", out["pred_loss"])
        return loss.detach()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        with torch.no_grad():
            y_hat = self.predictors(batch["x"])
            loss = self.prediction_loss(y_hat, batch["y"]).double().cpu()
            scores = torch.softmax(y_hat, dim=-1)[..., 1:] if not self.regression else y_hat
        kpc = torch.from_numpy(self.graphs.kpc(scores.double().cpu().numpy(), self.member_split))
        mu = self.mu.double().cpu()
        score = (1 - mu) * loss + mu * kpc
        self.validations += 1
        self._select(score.to(self.best_score.device))
        logged = {f"member{m}|val/pred_loss": float(loss[m]) for m in range(len(loss))}
        logged.update({f"member{m}|val/kpc": float(kpc[m]) for m in range(len(kpc))})
        logged.update({f"member{m}|val/score": float(score[m]) for m in range(len(score))})
        self.log_dict(logged, batch_size=1)
        self.log("val/active_members", float((self.waited < self.patience).sum()), batch_size=1)

    def _select(self, score: torch.Tensor) -> None:
        """Per-member early stopping with best weights (``models.common.selection.Patience``, vectorised);
        under the fixed schedule the best epoch is tracked but the kept weights are the last ones."""
        self.last_score = score.to(self.last_score.dtype)
        if not self.stop_early:
            improved = torch.isfinite(score) & (score < self.best_score)
            self.best_score = torch.where(improved, score, self.best_score)
            self.best_epoch = torch.where(
                improved, torch.full_like(self.best_epoch, self.current_epoch), self.best_epoch
            )
            with torch.no_grad():
                for best, current in zip(self.best_predictors.parameters(), self.predictors.parameters()):
                    best.copy_(current)
            return
        active = self.waited < self.patience
        improved = active & torch.isfinite(score) & (score < self.best_score)
        self.best_score = torch.where(improved, score, self.best_score)
        self.best_epoch = torch.where(improved, torch.full_like(self.best_epoch, self.current_epoch), self.best_epoch)
        self.waited = torch.where(improved, torch.zeros_like(self.waited), self.waited + active.long())
        with torch.no_grad():
            for best, current in zip(self.best_predictors.parameters(), self.predictors.parameters()):
                mask = improved.view(-1, *([1] * (current.dim() - 1)))
                best.copy_(torch.where(mask, current, best))
        if not bool((self.waited < self.patience).any()):
            self.trainer.should_stop = True

    def on_train_epoch_end(self) -> None:
        logged = {}
        for key, (total, count) in self._sums.items():
            means = total / count
            logged.update({f"member{m}|{key}": float(means[m]) for m in range(len(means))})
        self._sums = {}
        if logged:
            self.log_dict(logged, batch_size=1)

    def _accumulate(self, key: str, per_member: torch.Tensor) -> None:
        total, count = self._sums.get(key, (torch.zeros(len(per_member)), 0))
        self._sums[key] = (total + per_member.detach().float().cpu(), count + 1)

    def transfer_batch_to_device(self, batch: dict, device: torch.device, dataloader_idx: int) -> dict:
        # The batches are flat dicts: skip Lightning's generic (and, per tiny step, costly) collection walk.
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    def configure_optimizers(self):
        return [PerMemberAdam(self.predictors.parameters(), self.lr),
                torch.optim.Adam(self.discriminators.parameters(), lr=self.lr_dis)]  # fmt: skip


class PerMemberAdam(torch.optim.Adam):
    """Adam whose learning rate differs per ensemble member (dimension 0 of every parameter).

    Adam is elementwise, so scaling member m's update by lr_m equals a separate Adam at lr_m: the
    base optimiser runs at lr 1 and each step's displacement is rescaled per member."""

    def __init__(self, params, lr_per_member: torch.Tensor) -> None:
        super().__init__(params, lr=1.0)
        self.lr_per_member = lr_per_member

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        before = [p.detach().clone() for p in params]
        loss = super().step(closure)
        for p, old in zip(params, before):
            scale = self.lr_per_member.to(p.dtype).view(-1, *([1] * (p.dim() - 1)))
            p.copy_(old + scale * (p - old))
        return loss
