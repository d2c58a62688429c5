"""Test-time fit of the IS proposal r(z): a LightningModule over ``GaussianProposal``.

Proxy (A) maximises the ELBO E_r[log q + log p(D*|z) - log r] = log p(D*|D) - KL(r || r*); proxy (B)
minimises the batch estimate log mean(w^2) - 2 log mean(w) of the IS estimator's log second-moment
ratio. Both use reparameterised draws and Adam (the likelihood precision a = m / sigma^2 is in the
hundreds, where plain SGD diverges).
"""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from models.common.lightning import fit
from models.ppd_snr import algorithm as alg
from models.ppd_snr.networks import GaussianProposal


class ProposalObjective(L.LightningModule):
    """Fits r(z) to r*(z) proportional to q(z) p(D*|z) by proxy (A) or (B); one step function for train/val.

    Each batch is standard-normal noise eps (S, d); z = mean + std * eps. log C is subtracted from the
    log-weights (a constant known from the data) to keep them O(1); the true log p(D*|D) only enters the
    logged diagnostics, never the loss.
    """

    def __init__(self, proposal: GaussianProposal, problem: alg.Problem, proxy: str, lr: float) -> None:
        super().__init__()
        self.proposal, self.problem, self.proxy, self.lr = proposal, problem, proxy, lr
        self.register_buffer("post_mean", torch.as_tensor(problem.post_mean, dtype=torch.float64))
        self.register_buffer("test_mean", torch.as_tensor(problem.test_mean, dtype=torch.float64))
        self.post_std = math.sqrt(problem.post_var)
        self.log_z_shifted = alg.log_ppd(problem) - problem.log_c
        self.optimal = alg.optimal_proposal(problem)

    def log_weights(self, eps: torch.Tensor) -> torch.Tensor:
        """log q(z) + log p(D*|z) - log C - log r(z) at z = mean + std * eps."""
        z = self.proposal.reparameterise(eps)
        log_q = alg.diag_normal_logpdf(z, self.post_mean, torch.full_like(self.post_mean, self.post_std))
        log_lik = -0.5 * self.problem.a * ((z - self.test_mean) ** 2).sum(-1)
        return log_q + log_lik - self.proposal.log_prob(z)

    def _step(self, batch, stage: str) -> torch.Tensor:
        (eps,) = batch
        log_w = self.log_weights(eps)
        elbo = log_w.mean()
        log_ratio = torch.logsumexp(2 * log_w, 0) - 2 * torch.logsumexp(log_w, 0) + math.log(len(log_w))
        loss = -elbo if self.proxy == "elbo" else log_ratio
        on_step = stage == "train"
        self.log_dict(
            {
                f"{stage}/loss": loss,
                f"{stage}/kl_estimate": self.log_z_shifted - elbo,
                f"{stage}/log_w_ratio": log_ratio,
            },
            on_step=on_step,
            on_epoch=not on_step,
        )
        if stage == "val":
            self.log_dict(exact_diagnostics(self.proposal, self.optimal), on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        return self._step(batch, "val")

    def configure_optimizers(self):
        return torch.optim.Adam(self.proposal.parameters(), lr=self.lr)


def exact_diagnostics(proposal: GaussianProposal, optimal: tuple[np.ndarray, float]) -> dict[str, float]:
    """Closed-form KL(r || r*) (the ELBO's gap), Delta_r (IS's log second-moment ratio) and the smallest
    std(r) / std(r*). Delta_r is infinite, and left out, once a coordinate's ratio is <= 1/sqrt(2)."""
    mean, std = proposal.mean.detach().cpu().numpy(), proposal.std.detach().cpu().numpy()
    out = {
        "val/kl_exact": alg.gaussian_kl(mean, std, *optimal),
        "val/min_std_ratio": float(std.min() / math.sqrt(optimal[1])),
    }
    delta_r = alg.gaussian_log_chi2(mean, std, *optimal)
    if math.isfinite(delta_r):
        out["val/delta_r_exact"] = delta_r
    return out


def _noise(count: int, batch: int, d: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(count, batch, d, generator=generator, dtype=torch.float64)


def fit_proposal(
    cfg, problem: alg.Problem, proxy: str, generator: torch.Generator, seed: int
) -> tuple[GaussianProposal, list[dict]]:
    """Adam on the proxy from r = q, validated every ``val_every`` steps on one fixed noise batch.

    The noise of every step is drawn up front from ``generator`` (the "dataset" of this fit).
    """
    pc = cfg.proposal
    initial_std = torch.full((problem.d,), math.sqrt(problem.post_var), dtype=torch.float64)
    proposal = GaussianProposal(torch.as_tensor(problem.post_mean), initial_std)  # r = q
    module = ProposalObjective(proposal, problem, proxy, pc.lr)
    train_loader = DataLoader(TensorDataset(_noise(pc.steps, pc.batch, problem.d, generator)), batch_size=None)
    val_loader = DataLoader(TensorDataset(_noise(1, pc.val_batch, problem.d, generator)), batch_size=None)
    start = {"step": 0, **exact_diagnostics(proposal, module.optimal)}
    records = fit(
        module,
        train_loader,
        val_loader,
        max_epochs=1,
        seed=seed,
        variant=f"proposal {proxy}",
        val_check_interval=min(pc.val_every, pc.steps),
    )
    return proposal, [start] + records
