"""The algorithm: block Fisher, the natural perturbation sampler, the ZO estimate, the Lightning loops.

Natural perturbation (the ICML paper, as reconstructed in the brief): probes delta ~ N(0, Sigma)
maximise the entropy (1/2) log det Sigma at a bounded expected change of the network's predictive
distribution, E KL(p(y|x, theta) || p(y|x, theta + delta)) ~ (1/2) tr(F Sigma); hence
Sigma ∝ (F + rho I)^-1 with F the (block-diagonal, trace-normalised, damped) Fisher. With the
precursor's estimate g_hat = lambda_S / (N Q) sum_q (L_q - L_0) / mu' delta_q, E g_hat ∝ Sigma grad L:
a natural-gradient direction from forward queries only.
"""

from __future__ import annotations

import math
import time

import lightning as L
import torch
import torch.nn.functional as F

from models.zo_natural.networks import ChipNetwork

# ----------------------------------------------------------------------------- Fisher


def block_fisher(twin: ChipNetwork, theta: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """Per-block categorical Fisher E_x E_{y ~ p(y|x)} [grad log p(y|x) grad log p(y|x)^T] of the twin.

    The expectation over y is exact: with J the logit Jacobian and p the softmax,
    F = E_x J^T (diag p - p p^T) J = E_x G^T G with G = diag(sqrt p) (J - 1 p^T J).
    """
    theta = theta.detach()
    jac = twin.logit_jacobian(theta, x)  # (B, C, N)
    with torch.no_grad():
        p = torch.softmax(twin.batched_logits(theta[None], x)[0], dim=-1)  # (B, C)
        centred = jac - torch.einsum("bc,bcn->bn", p, jac)[:, None, :]
        rows = (p.sqrt()[..., None] * centred).reshape(-1, jac.shape[-1])  # (B C, N)
        return [rows[:, a:b].T @ rows[:, a:b] / x.shape[0] for a, b in twin.blocks]


# ----------------------------------------------------------------------------- sampler


class PerturbationSampler:
    """Probes for ZO: isotropic N(0, I) (ZO-I) or natural N(0, Sigma), Sigma_m = (1+rho)(C_m + rho I)^-1.

    C_m is an EMA of the trace-normalised block Fisher F_m / (tr F_m / n_m), so rho is relative
    to the Fisher's mean eigenvalue. Sampling: delta_m = sqrt(1+rho) L_m^-T z, L_m L_m^T = C_m + rho I.
    ``sample`` then rescales (precursor's conventions): each natural block to unit RMS when
    ``normalize_blocks``, and every probe to norm sqrt(N).
    """

    def __init__(
        self,
        blocks: list[tuple[int, int]],
        *,
        natural: bool,
        rho: float,
        ema: float = 1.0,
        normalize_blocks: bool = True,
    ) -> None:
        self.blocks, self.natural, self.rho, self.ema = blocks, natural, rho, ema
        self.normalize_blocks = normalize_blocks
        self.n_params = blocks[-1][1]
        self.curvature: list[torch.Tensor] | None = None  # C_m
        self.cholesky: list[torch.Tensor] | None = None

    def update(self, fishers: list[torch.Tensor]) -> None:
        """Fold a new block-Fisher estimate into C_m (the first estimate initialises it)."""
        normalised = [f * (f.shape[0] / torch.trace(f).clamp_min(1e-300)) for f in fishers]
        if self.curvature is None:
            self.curvature = normalised
        else:
            self.curvature = [(1 - self.ema) * c + self.ema * f for c, f in zip(self.curvature, normalised)]
        self.set_curvature(self.curvature)

    def set_curvature(self, curvature: list[torch.Tensor]) -> None:
        """Install C_m as it is (a checkpoint's) and factorise C_m + rho I."""
        self.curvature = curvature
        self.cholesky = [
            torch.linalg.cholesky(c + self.rho * torch.eye(len(c), dtype=c.dtype, device=c.device)) for c in curvature
        ]

    def covariance_blocks(self) -> list[torch.Tensor]:
        """Closed form of the raw probes' covariance per block: (1 + rho)(C_m + rho I)^-1 (or I)."""
        if not self.natural:
            return [torch.eye(b - a, dtype=torch.float64) for a, b in self.blocks]
        return [(1 + self.rho) * torch.cholesky_inverse(chol) for chol in self.cholesky]

    def precondition(self, vector: torch.Tensor) -> torch.Tensor:
        """Sigma v with the closed-form block covariance (the direction E g_hat points to)."""
        out = vector.clone()
        for (a, b), cov in zip(self.blocks, self.covariance_blocks()):
            out[a:b] = cov.to(vector) @ vector[a:b]
        return out

    def sample_raw(self, n_probes: int, generator: torch.Generator) -> torch.Tensor:
        """(Q, N) Gaussian probes with the closed-form covariance, before any rescaling."""
        z = torch.randn(n_probes, self.n_params, generator=generator, dtype=torch.float64)
        if not self.natural:
            return z
        if self.cholesky is None:
            raise RuntimeError("natural sampler used before its first Fisher update")
        device = self.cholesky[0].device
        z = z.to(device)
        parts = [
            math.sqrt(1 + self.rho) * torch.linalg.solve_triangular(chol.mT, z[:, a:b].T, upper=True).T
            for (a, b), chol in zip(self.blocks, self.cholesky)
        ]
        return torch.cat(parts, dim=1)

    def sample(self, n_probes: int, generator: torch.Generator) -> torch.Tensor:
        """(Q, N) probes, each of norm exactly sqrt(N)."""
        delta = self.sample_raw(n_probes, generator)
        if self.natural and self.normalize_blocks:
            delta = torch.cat(
                [delta[:, a:b] * math.sqrt(b - a) / delta[:, a:b].norm(dim=1, keepdim=True) for a, b in self.blocks],
                dim=1,
            )
        return delta * math.sqrt(self.n_params) / delta.norm(dim=1, keepdim=True)


def zo_gradient(losses: torch.Tensor, deltas: torch.Tensor, mu_prime: float, lambda_s: float) -> torch.Tensor:
    """g_hat = lambda_S / (N Q) sum_q (L_q - L_0) / mu' delta_q, with losses = [L_0, L_1, ..., L_Q]."""
    n_probes, n_params = deltas.shape
    slopes = (losses[1:] - losses[0]) / mu_prime
    return lambda_s / (n_params * n_probes) * slopes @ deltas


# ----------------------------------------------------------------------------- Lightning


def chip_metrics(
    net: ChipNetwork, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-setting mean cross-entropy (float64) and accuracy of the network at each of thetas."""
    logits = net.batched_logits(thetas, x)  # (P, B, C)
    losses = F.cross_entropy(logits.transpose(1, 2), y.expand(len(thetas), -1), reduction="none").mean(1)
    accuracy = (logits.argmax(-1) == y).double().mean(1)
    return losses, accuracy


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
        self._shared_step(batch, "test")  # the twin on the test split

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
        self._shared_step(batch, ("trainset", "test")[dataloader_idx])

    def configure_optimizers(self):
        if self.cfg.optimizer == "adam":
            return torch.optim.Adam([self.chip.theta], lr=self.lr)
        return torch.optim.SGD([self.chip.theta], lr=self.lr, momentum=self.cfg.momentum)
