"""One weight EMA for every method: a Lightning callback whose state (the averages and the optimiser
step they have seen) travels with the epoch checkpoint, so a resumed fit ends on the same averaged
weights as an uninterrupted one (a plain list on the LightningModule was lost on resume)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback


class EMA(Callback):
    """Exponential moving average of the parameters of ``pl_module.<of>`` (a dotted attribute path).

    After optimiser step k (1, 2, ...; batches that only accumulate gradients do not count), when
    ``(k - 1) % every == 0``: a copy of the weights while ``k <= start``, then
    ``average <- decay * average + (1 - decay) * weights``. The average starts as the weights at fit
    start; with ``into`` it lives in the parameters of ``pl_module.<into>``, a copy of the network the
    module evaluates with (score_fusion's ``ema``). ``apply_at_end`` copies the average into the
    weights when training ends (the averaged weights are the model).
    """

    def __init__(
        self,
        of: str,
        decay: float,
        *,
        start: int = 0,
        every: int = 1,
        into: str | None = None,
        apply_at_end: bool = False,
    ) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"EMA decay={decay!r}: expected 0 <= decay < 1")
        if start < 0 or every < 1:
            raise ValueError(f"EMA start={start!r}, every={every!r}: expected start >= 0 and every >= 1")
        self.of, self.decay, self.start, self.every = of, decay, start, every
        self.into, self.apply_at_end = into, apply_at_end
        self.average: list[torch.Tensor] | None = None
        self.step = 0  # the last optimiser step the average has seen
        self._restored: list[torch.Tensor] | None = None

    @property
    def state_key(self) -> str:
        return f"EMA[{self.of}]"

    def _weights(self, pl_module) -> list[torch.nn.Parameter]:
        return list(functools.reduce(getattr, self.of.split("."), pl_module).parameters())

    def on_fit_start(self, trainer, pl_module) -> None:  # after the move to the training device
        weights = self._weights(pl_module)
        with torch.no_grad():
            if self.into is not None:
                self.average = list(functools.reduce(getattr, self.into.split("."), pl_module).parameters())
                for average, restored in zip(self.average, self._restored or ()):
                    average.copy_(restored)
            elif self._restored is not None:
                self.average = [r.to(p.device, copy=True) for r, p in zip(self._restored, weights)]
            else:
                self.average = [p.detach().clone() for p in weights]
        self._restored = None

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        k = trainer.global_step
        if k == self.step:  # no optimiser step in this batch (gradient accumulation)
            return
        self.step = k
        if (k - 1) % self.every:
            return
        for average, p in zip(self.average, self._weights(pl_module)):
            if k <= self.start:
                average.copy_(p)
            else:
                average.lerp_(p.detach(), 1 - self.decay)

    @torch.no_grad()
    def on_train_end(self, trainer, pl_module) -> None:
        if self.apply_at_end:
            for average, p in zip(self.average, self._weights(pl_module)):
                p.copy_(average)

    def state_dict(self) -> dict[str, Any]:
        average = None if self.average is None else [a.detach() for a in self.average]
        return {"average": average, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored, self.step = state["average"], int(state["step"])
