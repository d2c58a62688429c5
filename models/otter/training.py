"""The LightningModules: the encoder's grounded contrastive pretraining and behaviour cloning (every arm).

Behaviour cloning validates once per epoch on the seen-target validation demonstrations; ``val/l1``
(the training loss on demonstrations no fit trains on) drives early stopping of every arm alike.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from .networks import CLIPEncoder, OtterPolicy, all_captions, grounded_contrastive_loss

EARLY_STOPPING_METRIC = "val/l1"


class ContrastivePretraining(L.LightningModule):
    """The grounded region-word contrastive loss on captioned scenes; Adam."""

    def __init__(self, encoder: CLIPEncoder, lr: float, tau: float) -> None:
        super().__init__()
        self.encoder, self.lr, self.tau = encoder, lr, tau
        self.register_buffer("captions", all_captions(), persistent=False)

    def training_step(self, batch, batch_idx):
        images, patch, pairs = batch
        patches = self.encoder.encode_patches(images)
        words = self.encoder.encode_words(self.captions)
        loss, region, word = grounded_contrastive_loss(patches, words, patch, pairs, self.tau)
        self.log_dict(
            {"train/loss": loss, "train/region_loss": region, "train/word_loss": word},
            on_step=True,
            on_epoch=False,
            batch_size=len(images),
        )
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.encoder.parameters(), lr=self.lr)


class BehaviourCloning(L.LightningModule):
    """L1 between predicted and expert actions (the official loss); AdamW with the head at ``lr`` and, when the
    encoder is fine-tuned, the encoder at ``encoder_lr``; no weight decay on norms, biases and scalars
    (OTTER's ``add_weight_decay``)."""

    def __init__(self, policy: torch.nn.Module, lr: float, encoder_lr: float, weight_decay: float) -> None:
        super().__init__()
        self.policy, self.lr, self.encoder_lr, self.weight_decay = policy, lr, encoder_lr, weight_decay

    def predict_actions(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        if self.policy.frozen:  # batches of precomputed (patch, word) features: the same maths, faster
            patches, words, proprio, actions = batch
            return self.policy.act(patches, words, proprio), actions
        images, tokens, proprio, actions = batch
        return self.policy(images, tokens, proprio), actions

    def training_step(self, batch, batch_idx):
        predicted, actions = self.predict_actions(batch)
        loss = F.l1_loss(predicted, actions)
        self.log("train/l1", loss, on_step=False, on_epoch=True, batch_size=len(actions))
        if isinstance(self.policy, OtterPolicy):
            self.log("train/tau", self.policy.tau.detach(), on_step=False, on_epoch=True, batch_size=len(actions))
        return loss

    def validation_step(self, batch, batch_idx):
        predicted, actions = self.predict_actions(batch)
        self.log(EARLY_STOPPING_METRIC, F.l1_loss(predicted, actions), on_epoch=True, batch_size=len(actions))

    def configure_optimizers(self):
        encoder_ids = {id(p) for p in self.policy.encoder.parameters()}
        encoder = [p for p in self.policy.encoder.parameters() if p.requires_grad]
        head = [p for p in self.policy.parameters() if p.requires_grad and id(p) not in encoder_ids]
        groups = []
        for params, lr in ((head, self.lr), (encoder, self.encoder_lr)):
            decay, no_decay = [p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]
            groups += [
                {"params": ps, "lr": lr, "weight_decay": wd}
                for ps, wd in ((decay, self.weight_decay), (no_decay, 0.0))
                if ps
            ]
        return torch.optim.AdamW(groups, foreach=True)


def train_loader(tensors: tuple[torch.Tensor, ...], batch_size: int, seed: int) -> DataLoader:
    """Shuffled full batches whose order depends on ``seed`` only (one fancy index per batch, no collation)."""
    dataset = TensorDataset(*tensors)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DataLoader(
        dataset, sampler=BatchSampler(sampler, min(batch_size, len(dataset)), drop_last=True), batch_size=None
    )


def validation_loader(tensors: tuple[torch.Tensor, ...], batch_size: int = 512) -> DataLoader:
    dataset = TensorDataset(*tensors)
    return DataLoader(dataset, sampler=BatchSampler(SequentialSampler(dataset), batch_size, False), batch_size=None)
