"""Training: backprop pre-training of the ideal twin (Lightning), zeroth-order training of the chips (a plain,
batched loop: ZO uses forward queries only, no autograd, so there is nothing for Lightning to drive, and the
paired seeds and learning rates of one arm run together as a batch, see ``train_zo_runs``)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from models.zo_natural.algorithm import chip_metrics, make_sampler, run_block_fisher
from models.zo_natural.networks import ChipNetwork, stack_defects

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


# ----------------------------------------------------------------------------- batched ZO training


@dataclass
class ZORun:
    """One ZO fit: where it starts, how it steps, and the random streams that are its own."""

    start: dict  # the programmed chip's state_dict (its theta and defects)
    natural: bool
    lr: float
    order_seed: int  # minibatch order
    probe_seed: int  # base noise z of the probes


@dataclass
class ZOResult:
    """What one run of ``train_zo_runs`` leaves: the kept weights, curves and the fit's evidence."""

    theta: torch.Tensor  # the best-validation parameters
    epochs: list[dict[str, float]]  # per epoch: queries, train/loss (minibatch mean), trainset/loss, val/loss, val/acc
    queries: np.ndarray  # chip queries after each minibatch (0 first: the programmed chip)
    train_loss: np.ndarray  # the (tracked) training loss at those points
    n_queries: int
    best_epoch: int  # from 0
    epochs_trained: int
    stopped_early: bool
    best_val_loss: float


def train_zo_runs(
    runs: list[ZORun],
    chip_template: ChipNetwork,
    zo_cfg,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    track: torch.Tensor | None = None,
    progress: str = "",
) -> list[ZOResult]:
    """ZO training of several chips at once, each a run of its own: the chips' Q + 1 queries per minibatch and the
    per-minibatch tracking of the training-set loss are batched over runs (``ChipNetwork.run_logits``), while every
    run keeps its own minibatch order, probe stream, covariance, Adam state and early stopping. A run that stops
    is frozen and leaves the batch. Equal, to float tolerance, to running each alone (tested).

    Per minibatch: (Q + 1) queries, g_hat = lambda_S / (N Q) sum_q (L_q - L_0) / mu' delta_q into Adam (or SGD
    with momentum); every ``fisher_every`` minibatches a natural run refreshes its covariance from the twin's
    block Fisher at its current parameters. After every minibatch the whole training set's loss is recorded
    (monitoring, not charged as queries), or that of the training images ``track`` indexes (a fixed subset, the
    same for every run); after every epoch the validation loss drives a patience of ``zo_cfg.patience`` epochs and
    the best-validation parameters are kept."""
    from models.common.selection import Patience

    x_train, y_train = train
    x_val, y_val = val
    x_track, y_track = (x_train, y_train) if track is None else (x_train[track], y_train[track])
    n_runs, n_train, q = len(runs), len(y_train), zo_cfg.n_probes
    chips = []
    for run in runs:
        chip = copy.deepcopy(chip_template)
        chip.load_state_dict(run.start)
        chips.append(chip)
    defects = stack_defects(chips)
    twin = chip_template.nominal()  # defect-free: the same for every chip of this architecture
    theta = torch.stack([chip.theta.detach().clone() for chip in chips])  # (R, N)
    n_params = theta.shape[1]
    mu_prime = zo_cfg.mu / math.sqrt(n_params)
    samplers = [make_sampler(zo_cfg, chip, run.natural) for chip, run in zip(chips, runs)]
    orders = [torch.Generator().manual_seed(run.order_seed) for run in runs]
    probes = [torch.Generator().manual_seed(run.probe_seed) for run in runs]
    lr = torch.tensor([run.lr for run in runs], dtype=theta.dtype)[:, None]
    optimiser = _BatchedOptimiser(zo_cfg, theta.shape, theta.dtype)
    patience = [Patience(zo_cfg.patience, higher_is_better=False) for _ in runs]
    best = theta.clone()
    active = list(range(n_runs))
    steps = 0  # minibatches every active run has taken (all start together)

    def losses(rows: list[int], thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple:
        """Mean cross-entropy and accuracy (R', P) of runs ``rows`` at settings (R', P, N) on x ((R', B, d) or (B, d))."""
        sub = {k: v[rows] for k, v in defects.items()}
        logits = chip_template.run_logits(sub, thetas, x)  # (R', P, B, C)
        target = y.expand(*logits.shape[:3]) if y.dim() == 1 else y[:, None].expand(*logits.shape[:3])
        ce = F.cross_entropy(logits.permute(0, 3, 1, 2), target, reduction="none").mean(-1)
        return ce, (logits.argmax(-1) == target).double().mean(-1)

    with torch.no_grad():
        start_loss = losses(list(range(n_runs)), theta[:, None], x_track, y_track)[0][:, 0]
    curves_q = [[0] for _ in runs]
    curves_l = [[float(start_loss[r])] for r in range(n_runs)]
    epochs: list[list[dict[str, float]]] = [[] for _ in runs]
    n_batches = math.ceil(n_train / zo_cfg.batch_size)
    for epoch in range(zo_cfg.epochs):
        if not active:
            break
        perms = {r: torch.randperm(n_train, generator=orders[r]) for r in active}
        sums = {r: 0.0 for r in active}
        for b in range(n_batches):
            rows = active
            index = torch.stack([perms[r][b * zo_cfg.batch_size : (b + 1) * zo_cfg.batch_size] for r in rows])
            x, y = x_train[index], y_train[index]  # (R', B, d), (R', B)
            refresh = [
                i
                for i, r in enumerate(rows)
                if samplers[r].natural and (samplers[r].cholesky is None or steps % zo_cfg.fisher_every == 0)
            ]
            if refresh:  # the twin's block Fisher at each refreshing run's parameters, on its own minibatch
                fishers = run_block_fisher(twin, theta[[rows[i] for i in refresh]], x[refresh])
                for i, blocks in zip(refresh, fishers):
                    samplers[rows[i]].update(blocks)
            with torch.no_grad():
                deltas = torch.stack([samplers[r].sample(q, probes[r]).to(theta) for r in rows])  # (R', Q, N)
                current = theta[rows]
                settings = torch.cat([current[:, None], current[:, None] + mu_prime * deltas], dim=1)
                query_losses = losses(rows, settings, x, y)[0]  # (R', Q + 1)
                slopes = (query_losses[:, 1:] - query_losses[:, :1]) / mu_prime
                grad = zo_cfg.lambda_s / (n_params * q) * torch.einsum("rq,rqn->rn", slopes, deltas)
                theta[rows] = optimiser.step(rows, current, grad, lr[rows])
                tracked = losses(rows, theta[rows][:, None], x_track, y_track)[0][:, 0]
            steps += 1
            for i, r in enumerate(rows):
                sums[r] += float(query_losses[i, 0]) * len(index[i])
                curves_q[r].append(curves_q[r][-1] + q + 1)
                curves_l[r].append(float(tracked[i]))
        with torch.no_grad():
            val_loss, val_acc = losses(active, theta[active][:, None], x_val, y_val)
        still = []
        for i, r in enumerate(active):
            record = {
                "step": epoch + 1,
                "queries": float(curves_q[r][-1]),
                "train/loss": sums[r] / n_train,
                "tracked/loss": curves_l[r][-1],
                "val/loss": float(val_loss[i, 0]),
                "val/acc": float(val_acc[i, 0]),
            }
            epochs[r].append(record)
            if patience[r].update(record["val/loss"]):
                best[r] = theta[r]
            if not patience[r].stop:
                still.append(r)
        active = still
        if progress:
            print(f"  {progress}: epoch {epoch + 1}, {len(active)} of {n_runs} runs still training", flush=True)
    return [
        ZOResult(
            best[r].clone(),
            epochs[r],
            np.asarray(curves_q[r], dtype=np.int64),
            np.asarray(curves_l[r]),
            int(curves_q[r][-1]),
            patience[r].best_step,
            patience[r].step + 1,
            patience[r].stop,
            float(patience[r].best),
        )
        for r in range(n_runs)
    ]


class _BatchedOptimiser:
    """Adam (or SGD with momentum) on a (runs, N) parameter block, run r with its own state: the same arithmetic as
    ``torch.optim.Adam`` / ``SGD`` on each run's vector (elementwise updates), stepping only the rows given."""

    def __init__(self, zo_cfg, shape, dtype) -> None:
        self.kind, self.momentum = zo_cfg.optimizer, zo_cfg.momentum
        self.m = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.t = torch.zeros(shape[0], dtype=torch.long)
        self.betas, self.eps = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults

    def step(self, rows: list[int], theta: torch.Tensor, grad: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        self.t[rows] += 1
        if self.kind == "sgd":
            first = self.t[rows] == 1
            buf = torch.where(first[:, None], grad, self.momentum * self.m[rows] + grad)
            self.m[rows] = buf
            return theta - lr * buf
        b1, b2 = self.betas
        m = self.m[rows].lerp(grad, 1 - b1)
        v = self.v[rows] * b2 + (1 - b2) * grad * grad
        self.m[rows], self.v[rows] = m, v
        t = self.t[rows].to(theta.dtype)[:, None]
        bias1, bias2 = 1 - b1**t, 1 - b2**t
        denom = v.sqrt() / bias2.sqrt() + self.eps
        return theta - (lr / bias1) * m / denom
