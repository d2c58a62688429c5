"""OTTER's batched behaviour cloning (seeds and grid points as a batch dimension) equals the one-at-a-time
Lightning fits it replaces: every member's best weights, best epoch and stopping, to a stated float tolerance.

Tolerance: the batched and the sequential fits run the same float32 arithmetic in another order (batched
matmuls, a hand-written AdamW, a per-member clip); after ~20-40 AdamW steps the weights agree to ~1e-6 here. We
assert 2e-4 absolute on every weight (AdamW steps are ~lr = 1e-3 each, so a wrong batch order, a shared clip
or a shared optimiser state is off by ~1e-3 or more) and equal best epochs."""

import copy

import pytest
import torch

from models.common.lightning import fit
from models.common.selection import early_stopping_callbacks
from models.otter.batched import fit_members
from models.otter.networks import AllTokensPolicy, CLIPEncoder, OtterPolicy
from models.otter.training import EARLY_STOPPING_METRIC, BehaviourCloning, train_loader, validation_loader

WEIGHT_ATOL = 2e-4
pytestmark = pytest.mark.numerics


def _encoder():
    torch.manual_seed(123)
    return CLIPEncoder(image_size=16, patch=4, width=16, layers=1, heads=1, embed_dim=8, stem_channels=4).eval()


def _data(encoder, n, seed):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 16, 16, 3), generator=g, dtype=torch.uint8)
    tokens = torch.stack([torch.randint(0, 4, (n,), generator=g), torch.randint(4, 8, (n,), generator=g)], 1)
    proprio = torch.rand(n, 2, generator=g)
    actions = torch.rand(n, 2, generator=g) * 2 - 1
    with torch.no_grad():
        patches, words = encoder.encode_patches(images), encoder.encode_words(tokens)
    return (images, tokens, proprio, actions), (patches, words, proprio, actions)


def _policy(kind, encoder, seed):
    torch.manual_seed(seed)
    encoder = copy.deepcopy(encoder)
    if kind == "baseline":
        return AllTokensPolicy(encoder, frozen=True, d_model=8, layers=1, hidden=16, heads=2)
    return OtterPolicy(
        encoder, frozen=kind == "method", tau=0.07, learn_tau=True, tau_min=0.01, d_model=8, layers=1, hidden=16
    )


def _sequential(policy, lr, encoder_lr, seed, train, val, epochs, patience):
    callbacks = early_stopping_callbacks(EARLY_STOPPING_METRIC, patience, mode="min")
    fit(
        BehaviourCloning(policy, lr, encoder_lr, 0.01),
        train_loader(train, 16, seed),
        validation_loader(val),
        max_epochs=epochs,
        seed=seed,
        variant="reference",
        gradient_clip_val=0.05,  # small: the clip binds on most steps, so a shared (pooled) norm would show
        callbacks=callbacks,
    )
    return policy, callbacks[-1]


@pytest.mark.parametrize("kind", ["method", "baseline", "finetuned"])
def test_batched_members_equal_one_at_a_time_fits(kind):
    encoder = _encoder()
    raw, features = _data(encoder, 64, 0)
    val_raw, val_features = _data(encoder, 24, 1)
    on_features = kind != "finetuned"
    train, val = (features, val_features) if on_features else (raw, val_raw)
    # three members: two seeds at one lr, and the first seed at another (a grid point beside a paired seed)
    seeds, lrs = [0, 1, 0], [3e-3, 3e-3, 1e-2]
    encoder_lrs = [1e-3, 1e-3, 3e-4] if kind == "finetuned" else [0.0] * 3
    epochs, patience = 6, 2
    batched = fit_members(
        [_policy(kind, encoder, s) for s in seeds],
        seeds,
        lrs,
        encoder_lrs,
        train,
        val,
        on_features=on_features,
        max_epochs=epochs,
        patience=patience,
        batch_size=16,
        weight_decay=0.01,
        grad_clip=0.05,
    )
    for e, (seed, lr, encoder_lr) in enumerate(zip(seeds, lrs, encoder_lrs)):
        policy, best = _sequential(_policy(kind, encoder, seed), lr, encoder_lr, seed, train, val, epochs, patience)
        member = batched[e]
        assert member.best_epoch == best.best_epoch and member.evaluations == best.evaluations
        assert member.stopped_early == (best.evaluations < epochs)
        assert member.best == pytest.approx(best.best, abs=1e-5)
        reference = policy.state_dict()
        assert set(member.state) == set(reference)
        for name, value in reference.items():
            got = member.state[name]
            if name.endswith("in_proj_bias"):  # the key bias has no true gradient (softmax is shift-invariant):
                width = len(value) // 3  # Adam turns its rounding-noise gradient into lr-sized steps, so skip it
                got, value = torch.cat([got[:width], got[2 * width :]]), torch.cat([value[:width], value[2 * width :]])
            torch.testing.assert_close(got, value, atol=WEIGHT_ATOL, rtol=0, msg=name)
    # the members did not share anything: the two grid points of seed 0 ended on different weights
    assert not torch.allclose(batched[0].state["head.0.weight"], batched[2].state["head.0.weight"], atol=1e-3)
