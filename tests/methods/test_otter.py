"""OTTER: text-aware selection, the grounded contrastive loss, the CLIP loader and the frozen encoder."""

import math

import numpy as np
import pytest
import torch

from models.otter import SPEC
from models.otter import data as tabletop
from models.otter.networks import (
    CLIPEncoder,
    OtterPolicy,
    grounded_contrastive_loss,
    load_clip_weights,
    sincos_2d,
    text_aware_selection,
)


def _unit(x):
    return torch.nn.functional.normalize(x, dim=-1)


def test_selection_is_softmax_of_cosine_over_tau_with_pe_in_values_only():
    g = torch.Generator().manual_seed(0)
    words, patches = _unit(torch.randn(3, 2, 8, generator=g)), _unit(torch.randn(3, 16, 8, generator=g))
    pos = torch.randn(16, 8, generator=g)
    tau = 0.07
    tokens, weights = text_aware_selection(words, patches, pos, tau)
    assert tokens.shape == (3, 2, 8) and weights.shape == (3, 2, 16)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2))
    # reference: explicit loops over the batch, words and patches
    b, t = 1, 1
    cos = torch.tensor([float(words[b, t] @ patches[b, n]) for n in range(16)])
    ref_w = torch.exp(cos / tau) / torch.exp(cos / tau).sum()
    torch.testing.assert_close(weights[b, t], ref_w)
    torch.testing.assert_close(tokens[b, t], sum(ref_w[n] * (patches[b, n] + pos[n]) for n in range(16)))
    # the position code enters the values only: another PE leaves the weights unchanged
    _, weights_other_pe = text_aware_selection(words, patches, torch.randn(16, 8, generator=g), tau)
    torch.testing.assert_close(weights, weights_other_pe)
    # lower temperature -> sharper (max weight grows)
    _, sharp = text_aware_selection(words, patches, pos, 0.01)
    assert (sharp.max(-1).values >= weights.max(-1).values - 1e-6).all()


def test_selection_is_equivariant_to_word_order_and_invariant_to_patch_order():
    g = torch.Generator().manual_seed(1)
    words, patches, pos = (
        _unit(torch.randn(2, 4, 6, generator=g)),
        _unit(torch.randn(2, 9, 6, generator=g)),
        torch.randn(9, 6, generator=g),
    )
    tokens, _ = text_aware_selection(words, patches, pos, 0.1)
    order = torch.tensor([2, 0, 3, 1])
    permuted, _ = text_aware_selection(words[:, order], patches, pos, 0.1)
    torch.testing.assert_close(permuted, tokens[:, order])  # one token per word, independent of the others
    torch.testing.assert_close(permuted.sum(1), tokens.sum(1))  # an order-free pooling is invariant
    shuffle = torch.randperm(9, generator=g)  # patches and their position codes moved together
    torch.testing.assert_close(text_aware_selection(words, patches[:, shuffle], pos[shuffle], 0.1)[0], tokens)


def test_sincos_2d_codes_rows_and_columns_separately():
    table = sincos_2d(8, 32).reshape(8, 8, 32)
    assert torch.equal(table[:, 0, :16], table[:, 5, :16])  # first half: the row only
    assert torch.equal(table[0, :, 16:], table[5, :, 16:])  # second half: the column only
    assert torch.unique(table.reshape(64, 32), dim=0).shape[0] == 64


def test_grounded_contrastive_loss_matches_hand_computation():
    # 2 colours x 1 shape -> captions 0 = (colour 0, shape 0), 1 = (colour 1, shape 0); 3 patches, D = 2.
    patches = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])
    caption_words = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]])
    object_patch = torch.tensor([[0, 1]])
    object_pair = torch.tensor([[[0, 0], [1, 0]]])
    tau = 0.5
    loss, region, word = grounded_contrastive_loss(patches, caption_words, object_patch, object_pair, tau, n_shapes=1)
    # (a) object 0 at patch (1,0): caption logits mean cos / tau = [(1+0)/2, (0+0)/2] / 0.5 = [1, 0], target 0;
    #     object 1 at patch (0,1): [(0+1)/2, (1+1)/2] / 0.5 = [1, 2], target 1.
    a = 0.5 * ((math.log(math.e + 1) - 1) + (math.log(math.e + math.e**2) - 2))

    # (b) word logits over patches = cos / 0.5:
    #   obj 0 colour word (1,0): [2, 0, -2], positive {patch 0}; shape word (0,1): [0, 2, 0], positives {0, 1} (both shape 0)
    #   obj 1 colour word (0,1): [0, 2, 0], positive {1};        shape word (0,1): [0, 2, 0], positives {0, 1}
    def nll(logits, pos):
        z = sum(math.exp(v) for v in logits)
        return -math.log(sum(math.exp(logits[i]) for i in pos) / z)

    b = (nll([2, 0, -2], [0]) + nll([0, 2, 0], [0, 1]) + nll([0, 2, 0], [1]) + nll([0, 2, 0], [0, 1])) / 4
    assert region.item() == pytest.approx(a, rel=1e-5)
    assert word.item() == pytest.approx(b, rel=1e-5)
    assert loss.item() == pytest.approx(a + b, rel=1e-5)


def _tiny_encoder(stem=0):
    torch.manual_seed(0)
    return CLIPEncoder(
        image_size=16,
        patch=4,
        width=32,
        layers=2,
        heads=2,
        embed_dim=8,
        stem_channels=stem,
        vocab=12,
        context=3,
        clearclip=True,
    )


def test_clip_state_dict_loader_round_trip(tmp_path):
    encoder = _tiny_encoder().eval()
    state = dict(
        encoder.state_dict(),
        input_resolution=torch.tensor(16),
        context_length=torch.tensor(3),
        vocab_size=torch.tensor(12),
    )
    torch.save(state, tmp_path / "tiny_clip.pt")
    loaded = load_clip_weights(tmp_path / "tiny_clip.pt", head_width=16, word_ids=tuple(range(4, 12))).eval()
    assert loaded.visual.grid == 4 and len(loaded.visual.transformer.resblocks) == 2 and loaded.clearclip
    images = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    torch.testing.assert_close(loaded.encode_patches(images), encoder.encode_patches(images))
    words = loaded.encode_words(torch.tensor([[0, 5]]))  # our ids 0, 5 -> model ids 4, 9
    torch.testing.assert_close(words, encoder.encode_words(torch.tensor([[4, 9]])))
    assert words.shape == (1, 2, 8) and torch.allclose(words.norm(dim=-1), torch.ones(1, 2))
    # 32 px scenes are resized to the model's resolution
    assert loaded.encode_patches(torch.zeros(1, 32, 32, 3, dtype=torch.uint8)).shape == (1, 16, 8)


def test_clearclip_features_are_last_block_attention_output():
    encoder = _tiny_encoder().eval()
    images = torch.randint(0, 256, (1, 16, 16, 3), dtype=torch.uint8)
    clear = encoder.encode_patches(images)
    encoder.clearclip = False
    assert not torch.allclose(clear, encoder.encode_patches(images))


def test_encoder_frozen_during_behaviour_cloning():
    from models.otter.pipeline import BehaviourCloning

    cfg = SPEC.make_config("smoke")
    encoder = CLIPEncoder(stem_channels=8, width=32, heads=2, embed_dim=16)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    policy = OtterPolicy(encoder, frozen=True, tau=0.07, learn_tau=True, tau_min=0.01, d_model=16, layers=1, hidden=16)
    assert not any(p.requires_grad for p in policy.encoder.parameters())
    module = BehaviourCloning(policy, cfg)
    opt = module.configure_optimizers()
    # OTTER's add_weight_decay: matrices decay, norms / biases / log_tau do not
    decay_of = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    trainable = [p for p in policy.parameters() if p.requires_grad]
    assert set(decay_of) == {id(p) for p in trainable}
    assert all(decay_of[id(p)] == (cfg.bc.weight_decay if p.ndim >= 2 else 0.0) for p in trainable)
    assert decay_of[id(policy.log_tau)] == 0.0 and cfg.bc.weight_decay > 0
    batch = (
        torch.randint(0, 256, (4, 32, 32, 3), dtype=torch.uint8),
        torch.tensor([[0, 4]] * 4),
        torch.rand(4, 2),
        torch.rand(4, 2),
    )
    policy.train()
    assert not policy.encoder.training
    tau0 = policy.log_tau.item()
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.l1_loss(policy(*batch[:3]), batch[3]).backward()
        assert all(p.grad is None for p in policy.encoder.parameters())
        opt.step()
    assert all(torch.equal(before[k], v) for k, v in policy.encoder.state_dict().items())
    assert policy.log_tau.item() != tau0  # the temperature is learnt


def test_splits_and_expert():
    rng = np.random.default_rng(0)
    scenes = tabletop.make_scenes(rng, 50, 32, 8, "colour", heldout=False)
    assert not tabletop.is_heldout(scenes["pairs"][:, 0], "colour").any()
    # distractors share no attribute with the target
    assert (scenes["pairs"][:, 1:] != scenes["pairs"][:, :1]).all()
    held = tabletop.make_scenes(rng, 20, 32, 8, "pairs", heldout=True)
    assert tabletop.is_heldout(held["pairs"][:, 0], "pairs").all()
    demos = tabletop.make_demos(scenes, 15, 0.1, 8)
    final = demos["proprio"].reshape(50, 15, 2)[:, -1]
    assert np.abs(final - tabletop.cell_centre(scenes["cells"][:, 0], 8)).max() < 0.11


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    steps.prepare(SPEC, cfg, tmp_path)
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert {"pretrain", "method", "finetuned", "baseline"} <= set(artifacts.history)
    metrics, claim = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    assert v["expert/success_seen"] == 1.0 and v["expert/success_heldout"] == 1.0
    assert v["method/encoder_unchanged"] == 1.0 and v["baseline/encoder_unchanged"] == 1.0
    assert v["finetuned/encoder_unchanged"] == 0.0
    assert all(
        0.0 <= v[f"{a}/success_{s}"] <= 1.0 for a in ("method", "finetuned", "baseline") for s in ("seen", "heldout")
    )
    assert claim.sanity["no_heldout_bc_targets"] and "method/success_heldout" in claim.figures
    assert [c.name for c in claim.criteria] == ["heldout_success", "vs_finetuned_heldout", "vs_all_tokens_heldout"]
    # one BC seed at smoke scale: every criterion is one unit, so at best inconclusive
    assert all(c.n_units == 1 for c in claim.criteria) and claim.verdict in ("inconclusive", "fails")
    assert (
        claim.criterion("heldout_success").estimate == v["method/seed0/success_heldout"] == v["method/success_heldout"]
    )
    model = SPEC.module().load_model(cfg, tmp_path / "outputs" / "otter" / "model")
    assert isinstance(model, OtterPolicy) and model.frozen


def _metrics(method_heldout, finetuned_heldout, baseline_heldout):
    """Hand-built evaluation numbers for ``claim``: per-seed held-out success of the three arms, sane checks."""
    from models.base import Metrics

    values = {
        "expert/success_seen": 1.0,
        "expert/success_heldout": 1.0,
        "check/heldout_bc_targets": 0.0,
        "method/encoder_unchanged": 1.0,
        "baseline/encoder_unchanged": 1.0,
        "finetuned/encoder_unchanged": 0.0,
        "probe/localisation_seen": 1.0,
        "probe/localisation_heldout": 0.95,
        "method/tau": 0.05,
    }
    for arm, held in (("method", method_heldout), ("finetuned", finetuned_heldout), ("baseline", baseline_heldout)):
        for k, rate in enumerate(held):
            values[f"{arm}/seed{k}/success_heldout"] = rate
        values[f"{arm}/success_heldout"] = float(np.mean(held))
        values[f"{arm}/success_seen"] = 0.9
    return Metrics(values)


def test_claim_intervals_over_paired_seeds():
    from models.otter.pipeline import claim

    cfg = SPEC.make_config("default")
    assert cfg.n_seeds == 3
    # The session-3 audit's seeds: OTTER 0.60 / 0.43 / 0.85, fine-tuned 0.41 / 0.35 / 0.19; all-tokens near zero.
    result = claim(cfg, _metrics([0.60, 0.43, 0.85], [0.41, 0.35, 0.19], [0.03, 0.02, 0.04]))
    assert result.sane
    held = result.criterion("heldout_success")
    assert held.estimate == pytest.approx(0.6266667) and held.n_units == 3 and held.interval == "t"
    assert held.low < 0.5 < held.high and held.state == "inconclusive"  # 0.63 on average, but seeds spread 0.43-0.85
    vs_ft = result.criterion("vs_finetuned_heldout")
    assert vs_ft.estimate == pytest.approx(0.31) and vs_ft.low < 0.2 < vs_ft.high and vs_ft.state == "inconclusive"
    vs_all = result.criterion("vs_all_tokens_heldout")
    diffs = np.array([0.57, 0.41, 0.81])
    half = 4.302653 * diffs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert (vs_all.low, vs_all.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    assert vs_all.state == "inconclusive" and result.verdict == "inconclusive"
    # Consistent seeds well clear of every threshold: all three hold.
    clear = claim(cfg, _metrics([0.80, 0.82, 0.84], [0.40, 0.42, 0.41], [0.05, 0.04, 0.06]))
    assert [c.state for c in clear.criteria] == ["holds"] * 3 and clear.verdict == "holds"
    # Exactly the thresholds on every seed (zero spread, float round-off in the differences) still holds ...
    edge = claim(cfg, _metrics([0.6, 0.6, 0.6], [0.4, 0.4, 0.4], [0.3, 0.3, 0.3]))
    assert edge.verdict == "holds"
    # ... and the fine-tuned arm ahead on every seed fails (the claim reverses, as at encoder lr 1e-4).
    reversed_ = claim(cfg, _metrics([0.62, 0.65, 0.63], [0.81, 0.85, 0.83], [0.03, 0.02, 0.04]))
    assert reversed_.criterion("vs_finetuned_heldout").state == "fails" and reversed_.verdict == "fails"
