"""Test-time fit of the IS proposal r(z): a LightningModule over ``GaussianProposal`` (or its full-rank form).

Proxy (A) maximises the ELBO E_r[log q + log p(D*|z) - log r] = log p(D*|D) - KL(r || r*); proxy (B)
minimises the batch estimate log mean(w^2) - 2 log mean(w) of the IS estimator's log second-moment
ratio. Both use reparameterised draws and Adam (the likelihood precision can be in the hundreds, where
plain SGD diverges).

Selection, the same for every fit: one copy of the proposal per learning rate of ``proposal.lr_grid``,
trained side by side on the same noise batches (one Adam parameter group per rate; the losses add, their
parameters are disjoint, so each copy follows exactly its own fit). Each copy is early-stopped on its
validation loss (a fixed batch of fresh draws, never the final estimate's; ``patience`` checks) and
ends on its best check's weights; the copy with the best validation loss is kept.
"""

from __future__ import annotations

import copy
import math

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from models.common import evidence
from models.common.lightning import fit
from models.common.selection import Patience, Selection
from models.ppd_snr.networks import FullRankGaussianProposal, GaussianProposal


class ProposalObjective(L.LightningModule):
    """Fits, for every target, copies of r(z) (one per learning rate) to r*(z) proportional to q(z) p(D*|z) by
    proxy (A) or (B). The targets of one part share the fit; their parameters are disjoint and Adam works per
    parameter, so each copy follows exactly the trajectory it would follow alone.

    A target gives ``log_joint(z)`` = log q + log p(D*|z) - offset (a data constant keeping the weights O(1)),
    ``log_ppd`` (only for the logged KL estimate, never the loss) and exact ``diagnostics(**params)``.
    Batch i of the loader holds one standard-normal noise tensor (S, d_t) per target."""

    def __init__(self, proposals: list, targets: list, proxy: str, lrs: tuple[float, ...], patience: int) -> None:
        super().__init__()
        self.copies = nn.ModuleList([nn.ModuleList([copy.deepcopy(proposal) for _ in lrs]) for proposal in proposals])
        self.targets, self.proxy, self.lrs = targets, proxy, tuple(lrs)
        self.patience = [[Patience(patience) for _ in lrs] for _ in targets]
        self.best_state: list[list[dict | None]] = [[None] * len(lrs) for _ in targets]
        self.best_step = [[0] * len(lrs) for _ in targets]

    def _active(self):
        for t, target in enumerate(self.targets):
            for j, proposal in enumerate(self.copies[t]):
                if not self.patience[t][j].stop:  # a stopped copy keeps its best weights and gets no gradient
                    yield t, j, target, proposal

    def _loss(self, target, proposal, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, ELBO, log second-moment ratio) of one copy on one noise batch."""
        z = proposal.reparameterise(eps)
        log_w = target.log_joint(z) - proposal.log_prob(z)
        elbo = log_w.mean()
        log_ratio = torch.logsumexp(2 * log_w, 0) - 2 * torch.logsumexp(log_w, 0) + math.log(len(log_w))
        return (-elbo if self.proxy == "elbo" else log_ratio), elbo, log_ratio

    def training_step(self, batch, batch_idx):
        total = sum(self._loss(target, proposal, batch[t])[0] for t, _, target, proposal in self._active())
        self.log("train/loss", total, on_step=True, on_epoch=False)
        return total

    def validation_step(self, batch, batch_idx):
        logged = {}
        for t, j, target, proposal in list(self._active()):
            loss, elbo, log_ratio = self._loss(target, proposal, batch[t])
            logged |= {
                f"val/loss/{t}/{j}": loss,
                f"val/kl_estimate/{t}/{j}": target.log_ppd - target.offset - elbo,
                f"val/log_w_ratio/{t}/{j}": log_ratio,
            } | {f"{k}/{t}/{j}": v for k, v in exact_diagnostics(proposal, target).items()}
            if self.patience[t][j].update(float(loss)):
                self.best_state[t][j] = copy.deepcopy(proposal.state_dict())
                self.best_step[t][j] = self.global_step
        self.log_dict(logged, on_step=False, on_epoch=True)
        if not any(True for _ in self._active()):
            self.trainer.should_stop = True

    def configure_optimizers(self):
        groups = [
            {"params": proposal.parameters(), "lr": lr}
            for copies in self.copies
            for proposal, lr in zip(copies, self.lrs)
        ]
        return torch.optim.Adam(groups)


def exact_diagnostics(proposal, target) -> dict[str, float]:
    """The target's exact KL(r || r*), Delta_r (left out when infinite) and smallest std(r) / std(r*)."""
    return target.diagnostics(**proposal.numpy_params())


def _noise(count: int, batch: int, d: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(count, batch, d, generator=generator, dtype=torch.float64)


def initial_proposal(target, full_rank: bool) -> GaussianProposal | FullRankGaussianProposal:
    """r = q: the posterior (or its approximation) the estimate starts from."""
    q = target.q
    if full_rank:
        tril = q.tril if q.tril is not None else torch.diag(q.std)
        return FullRankGaussianProposal(q.mean.cpu(), tril.cpu())
    std = q.std if q.std is not None else torch.sqrt(torch.diagonal(q.tril @ q.tril.T))
    return GaussianProposal(q.mean.cpu(), std.cpu())


def fit_proposals(
    cfg,
    targets: list,
    proxy: str,
    generator: torch.Generator,
    seed: int,
    full_rank: bool = False,
    arm: str = "",
    units: list[str] | None = None,
):
    """Adam on the proxy from r = q at every learning rate of the grid, for every target (module docstring).

    The noise of every step and the validation batch are drawn up front from ``generator``, target by target
    (the "dataset" of the fit). Returns per target: the chosen proposal, its learning curve (with the r = q
    start) and the selection summary (chosen lr, its best step, validation checks run, best validation loss
    and the validation loss of every grid point). With ``arm`` every target's learning-rate search and its
    chosen fit are recorded for the verdict diagnostics (unit: the target's name in ``units``)."""
    pc = cfg.proposal
    train_noise, val_noise = [], []
    for target in targets:
        train_noise.append(_noise(pc.steps, pc.batch, target.d, generator))
        val_noise.append(_noise(1, pc.val_batch, target.d, generator))
    starts = [initial_proposal(target, full_rank) for target in targets]
    module = ProposalObjective(starts, targets, proxy, pc.lr_grid, pc.patience)
    records = fit(
        module,
        DataLoader(TensorDataset(*train_noise), batch_size=None),
        DataLoader(TensorDataset(*val_noise), batch_size=None),
        max_epochs=1,
        seed=seed,
        variant=f"proposals {proxy}",
        val_check_interval=min(pc.val_every, pc.steps),
    )
    out = []
    for t, target in enumerate(targets):
        scores = [p.best if p.best is not None else math.inf for p in module.patience[t]]
        chosen = min(range(len(scores)), key=lambda j: (not math.isfinite(scores[j]), scores[j]))
        proposal = module.copies[t][chosen]
        if module.best_state[t][chosen] is not None:
            proposal.load_state_dict(module.best_state[t][chosen])
        suffix = f"/{t}/{chosen}"
        curve = [
            {"step": r["step"], **{k.removesuffix(suffix): v for k, v in r.items() if k.endswith(suffix)}}
            for r in records
            if any(k.endswith(suffix) for k in r)
        ]
        summary = {
            "lr": float(pc.lr_grid[chosen]),
            "best_step": float(module.best_step[t][chosen]),
            "val_checks": float(module.patience[t][chosen].step + 1),
            "val_loss": float(scores[chosen]),
        }
        summary |= {f"val_loss_lr{lr:g}": float(x) for lr, x in zip(pc.lr_grid, scores)}
        start = {"step": 0, **exact_diagnostics(starts[t], target)}
        out.append((copy.deepcopy(proposal), [start] + curve, summary))
        if arm:
            unit = units[t] if units else f"target{t}"
            table = [{"lr": float(lr), "val_loss": float(x)} for lr, x in zip(pc.lr_grid, scores)]
            eligible = any(math.isfinite(x) for x in scores)
            chosen_point = {"lr": float(pc.lr_grid[chosen])}
            evidence.record_selection(
                Selection(arm, chosen_point, float(scores[chosen]), "loss", False, table, unit, eligible).record()
            )
            module.patience[t][chosen].record(arm, unit)
    return out


def fit_proposal(cfg, target, proxy: str, generator: torch.Generator, seed: int, full_rank: bool = False):
    """``fit_proposals`` for a single target (not recorded for the diagnostics)."""
    return fit_proposals(cfg, [target], proxy, generator, seed, full_rank)[0]
