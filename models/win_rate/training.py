"""Training of the sequence task: the learned judge (a convex fit) and every policy arm (one LightningModule).

``PreferenceLearner`` trains a stack of R independent policies at once (``networks.MarkovPolicies``;
Adam acts elementwise, so summing the rows' losses trains each row exactly as if alone, and one
parameter group per learning rate gives each row its own). Arms, by ``Row.kind``:

  rlhf  RLOO on the judge's reward minus the KL term: r_hat(y) - beta (log pi(y) - log q(y))
  wro   direct h-win-rate RLOO: reward h(p_hat(y > y')) against one anchor sample y' ~ q, h in {id, log, logit}
  nlhf  RLOO self-play: reward = the mean judge preference over the other samples of the group
  dpo   DPO on the training pairs, -log sigma(beta [log pi/q (y_w) - log pi/q (y_l)])
  sft   maximum likelihood on the preferred responses

Every ``checkpoint`` steps each row is scored as a practitioner would, by Monte Carlo on fresh
samples (``mc_evaluate``): its objective (on-policy samples for the online arms, the held-out pairs
for DPO and SFT), its win rate against the anchor under its own preference model (the judge for the
arms that optimise it, the data's labeller for DPO and SFT, whose objectives are defined by the
pairs) from an independent draw, and the oracle win rate from that draw. The validation objective
drives early stopping (patience, per row) and each row ends on its best checkpoint's weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from .data import sample_chain, score, score_rows
from .networks import Judge, MarkovPolicies

ONLINE = ("rlhf", "wro", "nlhf")
JUDGED = ("rlhf", "wro", "nlhf")  # the arms whose own preference model is the learned judge
H_FUNCTIONS = {"id": lambda p: p, "log": torch.log, "logit": lambda p: torch.log(p) - torch.log1p(-p)}


@dataclass(frozen=True)
class Row:
    """One trained policy: an arm at one learning rate and seed."""

    arm: str
    kind: str
    lr: float
    seed: int
    beta: float = 1.0
    h: str = "id"


@dataclass
class Task:
    """The prepared sequence task as tensors: anchor, oracle and judge reward tables, pairs."""

    log_q: torch.Tensor  # (K, L, V, V) float64
    phi: torch.Tensor  # oracle reward table
    phi_hat: torch.Tensor  # learned judge reward table
    r_hat_max: torch.Tensor  # (K,) the judge's best reward per prompt (NLHF's best response)
    train: dict[str, torch.Tensor]
    heldout: dict[str, torch.Tensor]

    @property
    def n_prompts(self) -> int:
        return self.log_q.shape[0]

    def anchor_samples(self, prompts: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return sample_chain(self.log_q[None], torch.zeros_like(prompts), prompts, generator)


# ----------------------------------------------------------------------------- the judge


def fit_judge(
    cfg_shape: tuple[int, int, int], train: dict[str, torch.Tensor], ridge: float, iterations: int = 200
) -> Judge:
    """Ridge-penalised Bradley-Terry logistic regression, -log sigma(r(y_w) - r(y_l)) + ridge |params|^2, by L-BFGS.

    Convex with a unique optimum, so a plain deterministic fit (no Lightning loop, no lr)."""
    judge = Judge(*cfg_shape)
    optimiser = torch.optim.LBFGS(judge.parameters(), max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        loss = pair_log_loss(judge, train) + ridge * sum((p**2).sum() for p in judge.parameters())
        loss.backward()
        return loss

    optimiser.step(closure)
    return judge.eval()


def pair_log_loss(judge: Judge, pairs: dict[str, torch.Tensor]) -> torch.Tensor:
    margin = judge(pairs["prompt"], pairs["chosen"]) - judge(pairs["prompt"], pairs["rejected"])
    return F.softplus(-margin).mean()


# ----------------------------------------------------------------------------- Monte-Carlo evaluation


def row_masks(rows: list[Row]) -> dict[str, torch.Tensor]:
    masks = {kind: torch.tensor([r.kind == kind for r in rows]) for kind in ("rlhf", "wro", "nlhf", "dpo", "sft")}
    for h in H_FUNCTIONS:
        masks[f"h_{h}"] = torch.tensor([r.kind == "wro" and r.h == h for r in rows])
    return masks


def heldout_objectives(task: Task, tables: torch.Tensor, rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: minus the held-out DPO loss (at the row's beta) and the held-out log-likelihood of the
    preferred responses (SFT's objective), both exact on the fixed held-out pairs."""
    h = task.heldout
    n, R = len(h["prompt"]), len(rows)
    flat_rows = torch.arange(R).repeat_interleave(n)
    prompts = h["prompt"].repeat(R)
    lp_w = score_rows(tables, flat_rows, prompts, h["chosen"].repeat(R, 1)).view(R, n)
    lp_l = score_rows(tables, flat_rows, prompts, h["rejected"].repeat(R, 1)).view(R, n)
    lq_w, lq_l = score(task.log_q, h["prompt"], h["chosen"]), score(task.log_q, h["prompt"], h["rejected"])
    beta = torch.tensor([r.beta for r in rows], dtype=torch.float64)[:, None]
    dpo = -F.softplus(-beta * ((lp_w - lq_w) - (lp_l - lq_l))).mean(1)
    return dpo, lp_w.mean(1)


@torch.no_grad()
def mc_evaluate(
    task: Task, tables: torch.Tensor, rows: list[Row], n_samples: int, generator: torch.Generator, objective: bool
) -> dict[str, torch.Tensor]:
    """Monte-Carlo estimates per row from ``n_samples`` fresh responses per prompt (float64 (R,) tensors).

    ``wr_own``/``wr_oracle``/``wr_judge``: the win rate against the anchor, E p(y > y'), y ~ pi, y' ~ q, under the
    row's own preference model / the oracle / the judge. With ``objective``, an independent draw also gives
    the row's objective value (its own validation signal)."""
    tables = tables.double()
    R, K = len(rows), task.n_prompts
    masks = row_masks(rows)
    prompts_one = torch.arange(K).repeat_interleave(n_samples)
    flat_rows = torch.arange(R).repeat_interleave(len(prompts_one))
    flat_prompts = prompts_one.repeat(R)

    def draw():
        y = sample_chain(tables, flat_rows, flat_prompts, generator)
        y_anchor = task.anchor_samples(prompts_one, generator).repeat(R, 1)
        return y, y_anchor

    y, y_anchor = draw()
    r = (score(task.phi, flat_prompts, y) - score(task.phi, flat_prompts, y_anchor)).view(R, -1)
    r_hat = (score(task.phi_hat, flat_prompts, y) - score(task.phi_hat, flat_prompts, y_anchor)).view(R, -1)
    out = {"wr_oracle": torch.sigmoid(r).mean(1), "wr_judge": torch.sigmoid(r_hat).mean(1)}
    judged = masks["rlhf"] | masks["wro"] | masks["nlhf"]
    out["wr_own"] = torch.where(judged, out["wr_judge"], out["wr_oracle"])
    if not objective:
        return out
    y, y_anchor = draw()  # independent of the win-rate draw: the objective is not the same numbers again
    reward = score(task.phi_hat, flat_prompts, y).view(R, -1)
    p_hat = torch.sigmoid(reward - score(task.phi_hat, flat_prompts, y_anchor).view(R, -1)).clamp(1e-9, 1 - 1e-9)
    log_ratio = (score_rows(tables, flat_rows, flat_prompts, y) - score(task.log_q, flat_prompts, y)).view(R, -1)
    beta = torch.tensor([r.beta for r in rows], dtype=torch.float64)
    values = torch.zeros(R, dtype=torch.float64)
    values = torch.where(masks["rlhf"], (reward - beta[:, None] * log_ratio).mean(1), values)
    for h, fn in H_FUNCTIONS.items():
        values = torch.where(masks[f"h_{h}"], fn(p_hat).mean(1), values)
    best = task.r_hat_max[flat_prompts].view(R, -1)
    values = torch.where(masks["nlhf"], torch.sigmoid(reward - best).mean(1), values)
    dpo, sft = heldout_objectives(task, tables, rows)
    values = torch.where(masks["dpo"], dpo, torch.where(masks["sft"], sft, values))
    out["objective"] = values
    return out


# ----------------------------------------------------------------------------- the arms' LightningModule


class PreferenceLearner(L.LightningModule):
    """Every row trained together for ``steps``; per-row early stopping on the validation objective."""

    def __init__(self, task: Task, rows: list[Row], cfg, n_seeds: int, seed: int) -> None:
        super().__init__()
        self.task, self.rows, self.cfg = task, rows, cfg
        self.lrs = sorted({r.lr for r in rows})
        if [r.lr for r in rows] != sorted(r.lr for r in rows):
            raise ValueError("rows must be ordered by learning rate (one parameter group per rate)")
        self.policies = MarkovPolicies(task.log_q, [sum(r.lr == lr for r in rows) for lr in self.lrs])
        self.masks = row_masks(rows)
        self.online = torch.tensor([i for i, r in enumerate(rows) if r.kind in ONLINE], dtype=torch.long)
        self.offline = torch.tensor([i for i, r in enumerate(rows) if r.kind not in ONLINE], dtype=torch.long)
        self.row_seed = torch.tensor([r.seed for r in rows], dtype=torch.long)
        self.beta = torch.tensor([r.beta for r in rows], dtype=torch.float32)
        self.n_seeds = n_seeds
        self.train_generator = torch.Generator().manual_seed(seed)
        self.eval_generator = torch.Generator().manual_seed(seed + 1)
        R = len(rows)
        self.best_theta = torch.zeros((R, *task.log_q.shape))
        self.best_score = torch.full((R,), -float("inf"), dtype=torch.float64)
        self.best_step = torch.zeros(R, dtype=torch.long)
        self.waited = torch.zeros(R, dtype=torch.long)
        self.active = torch.ones(R, dtype=torch.bool)
        self.curves: list[dict] = []  # one entry per checkpoint: step and per-row estimates (lists)

    # -- losses

    def online_loss(self, tables: torch.Tensor) -> torch.Tensor:
        t, G, B = self.task, self.cfg.group_size, self.cfg.batch_prompts
        per_seed = torch.randint(0, t.n_prompts, (self.n_seeds, B), generator=self.train_generator)
        rows = self.online.repeat_interleave(B * G)
        prompts = per_seed[self.row_seed[self.online]].repeat_interleave(G, dim=1).reshape(-1)
        y = sample_chain(tables.detach(), rows, prompts, self.train_generator)
        logp = score_rows(tables, rows, prompts, y)
        r_hat = score(t.phi_hat, prompts, y)
        opponent = t.anchor_samples(prompts, self.train_generator)
        p = torch.sigmoid(r_hat - score(t.phi_hat, prompts, opponent)).clamp(1e-6, 1 - 1e-6)
        groups = r_hat.view(-1, G)
        self_play = ((torch.sigmoid(groups[:, :, None] - groups[:, None, :]).sum(2) - 0.5) / (G - 1)).reshape(-1)
        kl = logp.detach().double() - score(t.log_q, prompts, y)
        kind = {k: self.masks[k][rows] for k in ("rlhf", "nlhf")}
        reward = torch.zeros_like(r_hat)
        for h, fn in H_FUNCTIONS.items():
            reward = torch.where(self.masks[f"h_{h}"][rows], fn(p), reward)
        reward = torch.where(kind["rlhf"], r_hat - self.beta[rows].double() * kl, reward)
        reward = torch.where(kind["nlhf"], self_play, reward).float().view(-1, G)
        advantage = (reward - reward.mean(1, keepdim=True)) * G / (G - 1)  # RLOO: leave-one-out baseline
        per_row = -(advantage.reshape(-1) * logp).view(len(self.online), -1).mean(1)
        return per_row.sum()

    def offline_loss(self, tables: torch.Tensor) -> torch.Tensor:
        t, P = self.task, self.cfg.batch_pairs
        per_seed = torch.randint(0, len(t.train["prompt"]), (self.n_seeds, P), generator=self.train_generator)
        idx = per_seed[self.row_seed[self.offline]].reshape(-1)
        rows = self.offline.repeat_interleave(P)
        prompts, chosen, rejected = t.train["prompt"][idx], t.train["chosen"][idx], t.train["rejected"][idx]
        lp_w, lp_l = score_rows(tables, rows, prompts, chosen), score_rows(tables, rows, prompts, rejected)
        lq_w, lq_l = score(t.log_q, prompts, chosen).float(), score(t.log_q, prompts, rejected).float()
        dpo = F.softplus(-self.beta[rows] * ((lp_w - lq_w) - (lp_l - lq_l)))
        loss = torch.where(self.masks["sft"][rows], -lp_w, dpo)
        return loss.view(len(self.offline), -1).mean(1).sum()

    def training_step(self, batch, batch_idx):
        tables = self.policies.log_tables()
        loss = torch.zeros(())
        if len(self.online):
            loss = loss + self.online_loss(tables)
        if len(self.offline):
            loss = loss + self.offline_loss(tables)
        self.log("train/loss_sum", loss, on_step=True, on_epoch=False, batch_size=1)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if not bool(self.active.all()):  # stopped rows stay at their best checkpoint's weights
            with torch.no_grad():
                theta = self.policies.theta
                self.policies.assign(torch.where(self.active[:, None, None, None, None], theta, self.best_theta))

    # -- checkpoints

    def on_train_start(self) -> None:
        if not self.curves:  # the start (every row is the anchor), unless resumed
            self.checkpoint(0, log=False)

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self) -> None:
        self.checkpoint(int(self.global_step))

    @torch.no_grad()
    def checkpoint(self, step: int, log: bool = True) -> None:
        tables = self.policies.log_tables()
        est = mc_evaluate(self.task, tables, self.rows, self.cfg.eval_samples, self.eval_generator, objective=True)
        score_now = est["objective"]
        improved = self.active & (score_now > self.best_score)
        theta = self.policies.theta.detach()
        self.best_theta[improved] = theta[improved]
        self.best_score = torch.where(improved, score_now, self.best_score)
        self.best_step = torch.where(improved, torch.full_like(self.best_step, step), self.best_step)
        self.waited = torch.where(improved, torch.zeros_like(self.waited), self.waited + self.active.long())
        was_active = self.active.clone()
        self.active = self.active & (self.waited < self.cfg.patience)
        self.curves.append({"step": step, "active": was_active.tolist(), **{k: v.tolist() for k, v in est.items()}})
        if log:
            self.log_dict(
                {"val/mean_wr_oracle": est["wr_oracle"].mean().item(), "val/active_rows": float(was_active.sum())},
                on_epoch=True,
            )

    def on_fit_end(self) -> None:
        self.policies.assign(self.best_theta)

    def configure_optimizers(self):
        return torch.optim.Adam([{"params": [g], "lr": lr} for g, lr in zip(self.policies.groups, self.lrs)])


def as_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
