"""self_ref's base models (the paired units' pre-training draws) trained as one batch dimension equal each
model pretrained alone (issue 36 item 1): same initial weights, batch order and AdamW state per seed."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.registry import METHODS  # noqa: E402
from models.self_ref.algorithm import lm_examples  # noqa: E402
from models.self_ref.data import by_split, make_questions, make_tokenizer  # noqa: E402
from models.self_ref.training import pretrain_small_lm, pretrain_small_lms  # noqa: E402

SPEC = METHODS["self_ref"]
# The batched matmuls sum in another order than one model alone (float32), so the two agree to rounding, not
# bit for bit. Compared: each model's next-token log-probabilities on split V and its V loss after 3 epochs
# (48 AdamW steps). Not the raw weights: the key projection's bias has an exactly zero gradient (softmax is
# shift-invariant), and AdamW turns rounding-level gradients there into lr-sized steps that change no output.
LOGP_TOLERANCE = 1e-3
LOSS_TOLERANCE = 1e-4


@pytest.mark.numerics
def test_batched_pretraining_equals_one_at_a_time():
    import numpy as np

    overrides = {"data.pretrain_epochs": 3, "data.lm.n_embd": 16, "data.lm.n_layer": 1, "data.lm.n_head": 2}
    cfg = SPEC.make_config("smoke", overrides)
    tok = make_tokenizer()
    splits = by_split(make_questions(cfg.data, np.random.default_rng(cfg.seed)))
    seeds = [cfg.seed, cfg.seed + 7]
    val_ids = lm_examples(tok, splits["V"], reverse=cfg.data.reverse_answers)[0][:, :-1]
    batched, curves = pretrain_small_lms(cfg, tok, splits["A"], splits["V"], seeds)
    assert len(batched) == len(curves) == 2 and len(curves[0]) == cfg.data.pretrain_epochs
    for seed, model, curve in zip(seeds, batched, curves):
        alone, history = pretrain_small_lm(cfg.model_copy(update={"seed": seed}), tok, splits["A"], splits["V"])
        with torch.no_grad():
            gap = (torch.log_softmax(alone(val_ids), -1) - torch.log_softmax(model(val_ids), -1)).abs().max()
        assert float(gap) < LOGP_TOLERANCE, (seed, float(gap))
        val_alone = [r["val/loss"] for r in history if "val/loss" in r]
        val_batched = [r["val/loss"] for r in curve if "val/loss" in r]
        assert val_batched[-1] == pytest.approx(val_alone[-1], abs=LOSS_TOLERANCE)
        assert val_batched[-1] < val_batched[0] or len(val_batched) == 1
    # the two seeds are different draws (different initial weights and batch order)
    first, second = (m.state_dict()["wte.weight"] for m in batched)
    assert not torch.allclose(first, second, atol=1e-3)
