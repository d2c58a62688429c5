"""The LightningModule of SDCIB: the loss of ``algorithm.sdcib_loss`` over a plain ``SDCIB`` network.

Critics and their optimiser live here (they are training-only). Validation clusters the whole
dataset with the current encoders (eval-mode BN, the means mu) and scores the fused labels on
the validation samples (``val/*``: what early stopping and the learning-rate choice read) and on
the test samples (``test/acc``: kept in the curve only for the labelled, official-style
best-over-epochs figure; never used to choose anything).
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch import nn

from .algorithm import clustering_scores, fuse_views, gaussian_sample, jsd_mi, sdcib_loss
from .networks import SDCIB, GroupedCritic


class SDCIBModule(L.LightningModule):
    """Manual optimisation, as in the official code: encoders and critics take one Adam step each
    on the same total loss; on each epoch's first batch the critics first take ``critic_steps``
    steps alone on detached codes."""

    def __init__(
        self,
        net: SDCIB,
        layers: tuple[int, ...],
        *,
        lr: float,
        alpha: float,
        beta: float,
        tau_instance: float,
        tau_cluster: float,
        mi_sign: str,
        critic_steps: int,
    ) -> None:
        super().__init__()
        self.net, self.layers, self.lr, self.alpha, self.beta = net, layers, lr, alpha, beta
        self.tau_instance, self.tau_cluster, self.critic_steps = tau_instance, tau_cluster, critic_steps
        self.mi_sign = -1.0 if mi_sign == "ib" else 1.0  # "ib": maximise the bound (the fix)
        n_views = len(net.view_dims)
        self.critics = nn.ModuleDict(  # per layer, one batched critic for all views
            {f"k{k}": GroupedCritic(n_views, net.widths[k], net.n_clusters) for k in layers} if alpha > 0 else {}
        )
        self.automatic_optimization = False
        self._val_probs: list[list[np.ndarray]] = []
        self._val_labels: list[np.ndarray] = []
        self._val_masks: list[np.ndarray] = []

    def optimisers(self) -> list:
        opts = self.optimizers()
        return opts if isinstance(opts, list) else [opts]

    def train_critics(self, views: list[torch.Tensor]) -> None:
        """Critic-only steps on detached codes: maximise (ib) or minimise (official) sum I_JSD."""
        critic_opt = self.optimisers()[-1]
        with torch.no_grad():
            outputs = self.net(views, sample=True)
        for _ in range(self.critic_steps):
            mi = sum(
                jsd_mi(self.critics[f"k{k}"], gaussian_sample(outputs.mus[k], outputs.sigmas[k]), outputs.probs)
                for k in self.layers
            )
            critic_opt.zero_grad()
            self.manual_backward(self.mi_sign * mi)
            critic_opt.step()

    def training_step(self, batch, batch_idx):
        views = list(batch[:-2])  # (views..., labels, validation mask): labels never enter the loss
        if batch_idx == 0 and self.critic_steps and len(self.critics):
            self.train_critics(views)
        parts = sdcib_loss(
            self.net(views, sample=True),
            self.critics,
            self.layers,
            alpha=self.alpha,
            beta=self.beta,
            tau_instance=self.tau_instance,
            tau_cluster=self.tau_cluster,
            mi_sign=self.mi_sign,
            sample=True,
        )
        loss = parts["loss"]
        opts = self.optimisers()
        for opt in opts:
            opt.zero_grad()
        self.manual_backward(loss)
        for opt in opts:
            opt.step()
        self.log_dict(  # epoch means: one record per epoch in the learning curve
            {f"train/{name}": value.detach() for name, value in parts.items()},
            on_step=False,
            on_epoch=True,
            batch_size=len(batch[-1]),
        )
        # Largest |L| of any step this epoch (kept in the history, so it survives a resumed fit).
        self.log("train/max_abs_loss", loss.detach().abs(), on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def validation_step(self, batch, batch_idx):
        *views, labels, is_val = batch
        self._val_probs.append(list(self.net(views, sample=False).probs.numpy()))
        self._val_labels.append(labels.numpy())
        self._val_masks.append(is_val.numpy())

    def on_validation_epoch_end(self) -> None:
        pred = fuse_views([np.concatenate(p) for p in zip(*self._val_probs)])
        labels, is_val = np.concatenate(self._val_labels), np.concatenate(self._val_masks)
        self._val_probs, self._val_labels, self._val_masks = [], [], []
        k = self.net.n_clusters
        scores = clustering_scores(labels[is_val], pred[is_val], k)
        self.log_dict({f"val/{name}": value for name, value in scores.items()})
        self.log("test/acc", clustering_scores(labels[~is_val], pred[~is_val], k)["acc"])

    def configure_optimizers(self):
        # fused: one kernel for all parameters (the many small tensors make per-tensor Adam slow on CPU)
        encoder_opt = torch.optim.Adam(self.net.parameters(), lr=self.lr, fused=True)
        if not len(self.critics):
            return encoder_opt
        return [encoder_opt, torch.optim.Adam(self.critics.parameters(), lr=self.lr, fused=True)]
