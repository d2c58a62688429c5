"""Behaviour cloning of many units at once: the paired seeds and grid points of one arm as a batch dimension.

Every member (one seed at one grid point) is an independent copy of the same policy architecture. Their
trainable parameters are stacked along a leading member axis and one ``torch.func.vmap`` of
``functional_call`` runs all members' forward and backward passes together (on a CPU the per-operation
overhead of these small networks dominates, so E members cost far less than E separate fits). Nothing is
shared between members: each keeps

* its own initialisation (``torch.manual_seed(seed)`` before building it, as the one-at-a-time fit does),
* its own batch order (the same seeded ``RandomSampler`` as ``training.train_loader``),
* its own AdamW state and learning rates (head and encoder; per member, so grid points train side by side),
* its own gradient-norm clip (the norm over that member's parameters only),
* its own early stopping on its validation L1 (patience, strict improvement) and its best epoch's weights.

The loss is the sum of the members' mean L1 losses, so each member's gradient is its own fit's gradient. The
result equals ``training.BehaviourCloning`` fitted one member at a time by Lightning (AdamW, the same
parameter groups and gradient clipping) to float rounding: ``tests/methods/test_otter_batched.py``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import BatchSampler, RandomSampler

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults (what BehaviourCloning uses)
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


@dataclass
class MemberFit:
    """What one member's fit leaves: its best validation epoch's weights and how the fit ended."""

    state: dict[str, torch.Tensor]  # the full policy state_dict at the best epoch
    best: float | None = None  # best validation L1
    best_epoch: int = -1
    evaluations: int = 0  # validation epochs run while the member was live
    stopped_early: bool = False
    records: list[dict[str, float]] = field(default_factory=list)  # per epoch: train/l1, val/l1


class _Act(nn.Module):
    """``policy.act`` (the head on precomputed features) or ``policy.forward`` (raw images) as a forward."""

    def __init__(self, policy: nn.Module, on_features: bool) -> None:
        super().__init__()
        self.policy, self.on_features = policy, on_features

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.policy.act(*inputs) if self.on_features else self.policy(*inputs)


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch of ``training.train_loader``'s batches (full batches, seeded order), drawn as Lightning draws
    them: ``len(sampler)`` batches and no further ``next`` (exhausting the iterator would draw one more
    permutation from the generator, which shifts every later epoch's order)."""
    sampler = BatchSampler(RandomSampler(range(n), generator=generator), min(batch_size, n), drop_last=True)
    return list(itertools.islice(iter(sampler), len(sampler)))


def fit_members(
    policies: list[nn.Module],
    seeds: list[int],
    lrs: list[float],
    encoder_lrs: list[float],
    train: tuple[torch.Tensor, ...],
    val: tuple[torch.Tensor, ...],
    *,
    on_features: bool,
    max_epochs: int,
    patience: int,
    batch_size: int,
    weight_decay: float,
    grad_clip: float,
    max_steps: int | None = None,
) -> list[MemberFit]:
    """Fit every policy (member e: ``seeds[e]``'s batch order, head lr ``lrs[e]``, encoder lr ``encoder_lrs[e]``)
    by behaviour cloning with L1, early stopping on the validation L1; ``train``/``val`` are (inputs..., actions)
    with inputs the precomputed features (``on_features``) or raw images and tokens. ``max_steps`` caps the
    optimiser steps of each epoch (a paper-scale dry run)."""
    E = len(policies)
    template = _Act(policies[0], on_features)
    encoder_ids = {id(p) for p in policies[0].encoder.parameters()}
    names = [n for n, p in template.named_parameters() if p.requires_grad]
    is_encoder = {n: id(dict(template.named_parameters())[n]) in encoder_ids for n in names}
    params = {
        n: torch.stack([dict(_Act(p, on_features).named_parameters())[n].detach() for p in policies]).clone()
        for n in names
    }
    for p in params.values():
        p.requires_grad_(True)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in params.items()}
    head_lr, enc_lr = torch.tensor(lrs, dtype=torch.float32), torch.tensor(encoder_lrs, dtype=torch.float32)
    member_lr = {n: enc_lr if is_encoder[n] else head_lr for n in names}
    # OTTER's add_weight_decay: no decay on norms, biases and scalars (a member's parameter with ndim < 2)
    decays = {n: weight_decay if params[n].dim() - 1 >= 2 else 0.0 for n in names}
    template.train()

    def loss_of(member_params, *batch):
        *inputs, actions = batch
        # The math attention kernel is a composition of batched ops; the fused CPU kernel has no vmap batching
        # rule (vmap would loop over the members there).
        with sdpa_kernel([SDPBackend.MATH]):
            return F.l1_loss(functional_call(template, member_params, tuple(inputs)), actions)

    batched_loss = vmap(loss_of)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    n = len(train[0])
    fits = [MemberFit({}) for _ in range(E)]
    live = [True] * E
    waited = [0] * E
    t = 0
    for epoch in range(max_epochs):
        order = torch.tensor([epoch_batches(n, batch_size, g) for g in generators])  # [E, steps, B]
        steps = order.shape[1] if max_steps is None else min(order.shape[1], max_steps)
        train_sum = torch.zeros(E)
        for step in range(steps):
            idx = order[:, step]  # [E, B]
            losses = batched_loss(params, *(x[idx] for x in train))
            for p in params.values():
                p.grad = None
            losses.sum().backward()
            t += 1
            with torch.no_grad():
                _clip_per_member(params, grad_clip)
                _adamw_step(params, state, member_lr, decays, t)
            train_sum += losses.detach()
        with torch.no_grad():
            val_l1 = vmap(loss_of, in_dims=(0, *([None] * len(val))))(params, *val)
        for e in range(E):
            if not live[e]:
                continue
            value = float(val_l1[e])
            fit = fits[e]
            fit.records.append(
                {"step": t - 1, "epoch": float(epoch), "train/l1": float(train_sum[e] / steps), "val/l1": value}
            )
            fit.evaluations += 1
            if not math.isfinite(value):  # Lightning's check_finite: stop at once
                live[e], fit.stopped_early = False, True
                continue
            if fit.best is None or value < fit.best:
                fit.best, fit.best_epoch, waited[e] = value, epoch, 0
                fit.state = {k: v.detach()[e].clone() for k, v in params.items()}
            else:
                waited[e] += 1
                if waited[e] >= patience:
                    live[e], fit.stopped_early = False, True
        if not any(live):
            break
    out = []
    for e, policy in enumerate(policies):
        best = fits[e].state or {k: v.detach()[e].clone() for k, v in params.items()}
        module = _Act(policy, on_features)
        with torch.no_grad():
            for name, value in best.items():
                module.get_parameter(name).copy_(value)
        fits[e].state = {k: v.clone() for k, v in policy.state_dict().items()}
        out.append(fits[e])
    return out


def _clip_per_member(params: dict[str, torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` per member: the 2-norm over all of that member's gradients."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    squares = torch.stack([g.reshape(len(g), -1).pow(2).sum(1) for g in grads]).sum(0)  # [E]
    coef = (max_norm / (squares.sqrt() + CLIP_EPS)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view((-1,) + (1,) * (g.dim() - 1)))


def _adamw_step(params, state, member_lr, decays, t: int) -> None:
    """torch.optim.AdamW's update with a learning rate per member (all members share the step count)."""
    b1, b2 = BETAS
    bc1, bc2 = 1 - b1**t, 1 - b2**t
    for name, p in params.items():
        if p.grad is None:  # unused by behaviour cloning (the encoder's logit scale): AdamW skips it too
            continue
        m, v = state[name]
        lr = member_lr[name].view((-1,) + (1,) * (p.dim() - 1))
        if decays[name]:
            p.mul_(1 - lr * decays[name])
        m.lerp_(p.grad, 1 - b1)
        v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        denom = v.sqrt() / math.sqrt(bc2) + EPS
        p.sub_(lr / bc1 * m / denom)
