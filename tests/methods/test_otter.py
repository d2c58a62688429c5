"""OTTER: text-aware selection, the grounded contrastive loss, the CLIP loader, the frozen encoder, the
demonstrations and rollouts, the selection protocol and the claim on hand-built metrics."""

import math

import numpy as np
import pytest
import torch

from models.otter import SPEC
from models.otter import data as tabletop
from models.otter.networks import (
    AllTokensPolicy,
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
    from models.otter.training import BehaviourCloning

    encoder = CLIPEncoder(stem_channels=8, width=32, heads=2, embed_dim=16)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    policy = OtterPolicy(encoder, frozen=True, tau=0.07, learn_tau=True, tau_min=0.01, d_model=16, layers=1, hidden=16)
    assert not any(p.requires_grad for p in policy.encoder.parameters())
    module = BehaviourCloning(policy, lr=1e-3, encoder_lr=3e-4, weight_decay=0.01)
    opt = module.configure_optimizers()
    # OTTER's add_weight_decay: matrices decay, norms / biases / log_tau do not
    decay_of = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    trainable = [p for p in policy.parameters() if p.requires_grad]
    assert set(decay_of) == {id(p) for p in trainable}
    assert all(decay_of[id(p)] == (0.01 if p.ndim >= 2 else 0.0) for p in trainable)
    assert decay_of[id(policy.log_tau)] == 0.0
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


def test_finetuned_arm_trains_the_encoder_at_its_own_lr():
    from models.otter.training import BehaviourCloning

    encoder = CLIPEncoder(stem_channels=8, width=32, heads=2, embed_dim=16)
    policy = OtterPolicy(encoder, frozen=False, tau=0.07, learn_tau=True, tau_min=0.01, d_model=16, layers=1, hidden=16)
    opt = BehaviourCloning(policy, lr=1e-3, encoder_lr=3e-5, weight_decay=0.01).configure_optimizers()
    encoder_ids = {id(p) for p in encoder.parameters()}
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert encoder_ids <= set(lr_of) and all(lr_of[i] == 3e-5 for i in encoder_ids)
    assert all(lr == 1e-3 for i, lr in lr_of.items() if i not in encoder_ids)


def test_all_tokens_head_sees_every_patch_and_reads_out_at_the_words():
    torch.manual_seed(0)
    encoder = CLIPEncoder(stem_channels=8, width=32, heads=2, embed_dim=16)
    head = AllTokensPolicy(encoder, frozen=True, d_model=16, layers=2, hidden=16, heads=2).eval()
    patches, words, proprio = _unit(torch.randn(3, 64, 16)), _unit(torch.randn(3, 2, 16)), torch.rand(3, 2)
    out = head.act(patches, words, proprio)
    assert out.shape == (3, 2)
    changed = patches.clone()
    changed[:, 37] = _unit(torch.randn(3, 16))
    assert not torch.allclose(head.act(changed, words, proprio), out)  # every patch token reaches the head
    assert not torch.allclose(head.act(patches, words.flip(1), proprio), out)  # and the instruction does
    # a set of tokens: moving patches together with their position codes changes nothing
    order = torch.randperm(64)
    head.pos = head.pos[order]
    torch.testing.assert_close(head.act(patches[:, order], words, proprio), out)
    # the position code is in the values only: with identical patch contents the attention over the patches is
    # uniform, so any permutation of the codes alone leaves the output unchanged
    same = patches[:, :1].expand(-1, 64, -1)
    reference = head.act(same, words, proprio)
    head.pos = head.pos[torch.randperm(64)]
    torch.testing.assert_close(head.act(same, words, proprio), reference)


def test_splits_and_expert_demonstrations_end_at_the_target():
    rng = np.random.default_rng(0)
    scenes = tabletop.make_scenes(rng, 50, 32, 8, "colour", heldout=False)
    assert not tabletop.is_heldout(scenes["pairs"][:, 0], "colour").any()
    assert (scenes["pairs"][:, 1:] != scenes["pairs"][:, :1]).all()  # distractors share no attribute
    held = tabletop.make_scenes(rng, 20, 32, 8, "pairs", heldout=True)
    assert tabletop.is_heldout(held["pairs"][:, 0], "pairs").all()
    demos = tabletop.make_demos(scenes, 15, 0.1, 8)
    # one row per step until arrival: the expert needs ceil(max(|dx|, |dy|) / 0.1) steps, and never says "stay"
    target = tabletop.cell_centre(scenes["cells"][:, 0], 8)
    needed = np.ceil(np.abs(target - scenes["agent"]).max(1) / 0.1 - 1e-9).astype(int)
    assert len(demos["actions"]) == needed.sum()
    assert (np.abs(demos["actions"]).max(1) > 0).all() and (np.abs(demos["actions"]) <= 1).all()
    assert not tabletop.is_heldout(demos["target_pair"], "colour").any()
    assert demos["images"].shape == (needed.sum(), 32, 32, 3) and demos["tokens"].shape == (needed.sum(), 2)


def test_rollout_counts_reaching_the_target():
    rng = np.random.default_rng(1)
    scenes = tabletop.make_scenes(rng, 40, 32, 8, "colour", heldout=None)
    target = tabletop.cell_centre(scenes["cells"][:, 0], 8)

    def expert(images, tokens, agent, goal):
        assert len(images) == len(tokens) == len(agent)  # only the running episodes are asked
        return tabletop.expert_action(agent, goal, 0.1)

    assert tabletop.rollout(expert, scenes, 8, 15, 0.1, 0.1).all()
    standing = tabletop.rollout(lambda i, t, a, g: np.zeros_like(a), scenes, 8, 15, 0.1, 0.1)
    start_close = np.linalg.norm(scenes["agent"] - target, axis=1) <= 0.1
    np.testing.assert_array_equal(standing, start_close)  # standing still succeeds only where it started
    # too few steps to get there: the expert fails exactly the far episodes
    short = tabletop.rollout(expert, scenes, 8, 2, 0.1, 0.1)
    far = np.abs(target - scenes["agent"]).max(1) > 0.3 + 1e-9
    assert not short[far].any()


def test_selection_grids_and_score():
    from models.otter.pipeline import TIE_BREAK_L1, arm_grid

    cfg = SPEC.make_config("default")
    assert arm_grid(cfg, "method") == arm_grid(cfg, "baseline") == [{"lr": lr} for lr in cfg.bc.lr_grid]
    assert len(cfg.bc.lr_grid) >= 2
    # the fine-tuned arm: its head at the frozen head's chosen lr, its encoder lr chosen from the review's values
    finetuned = arm_grid(cfg, "finetuned", method_lr=3e-3)
    assert finetuned == [{"lr": 3e-3, "encoder_lr": e} for e in cfg.bc.encoder_lr_grid]
    assert set(cfg.bc.encoder_lr_grid) >= {3e-4, 1e-4, 3e-5}
    with pytest.raises(ValueError, match="head lr chosen"):
        arm_grid(cfg, "finetuned")
    # the L1 tie-break can never outweigh one validation episode (L1 of actions in [-1, 1] is below 2)
    assert 2 * TIE_BREAK_L1 < 1 / cfg.data.n_val


def test_smoke_pipeline(smoke_run):
    run = smoke_run("otter")
    v, claim = run.metrics.values, run.claim
    assert {"pretrain", "method", "finetuned", "baseline"} <= set(run.artifacts.history)
    assert not run.metrics.non_finite()
    assert v["expert/success_seen"] == 1.0 and v["expert/success_heldout"] == 1.0
    assert v["method/encoder_unchanged"] == 1.0 and v["baseline/encoder_unchanged"] == 1.0
    assert v["finetuned/encoder_unchanged"] == 0.0
    assert all(
        0.0 <= v[f"{a}/success_{s}"] <= 1.0 for a in ("method", "finetuned", "baseline") for s in ("seen", "heldout")
    )
    # every fit validated each epoch, early-stopping records and the selection are logged
    assert all(any("val/l1" in r for r in run.artifacts.history[a]) for a in ("method", "finetuned", "baseline"))
    assert {"select/finetuned/encoder_lr", "select/method/lr", "select/baseline/seed0/best_epoch"} <= set(v)
    assert 0.0 <= v["method/selection_target_mass_heldout"] <= 1.0
    assert claim.sanity["no_heldout_bc_targets"] and "method/heldout_over_seen" in claim.figures
    assert [c.name for c in claim.criteria] == [
        "heldout_success",
        "vs_finetuned_heldout",
        "vs_all_tokens_heldout",
        "heldout_over_seen",
    ]
    # one BC seed at smoke scale: every criterion is one unit, so at best inconclusive
    assert all(c.n_units == 1 for c in claim.criteria) and claim.verdict in ("inconclusive", "fails")
    assert claim.criterion("heldout_success").estimate == run.metrics.unit("success_heldout", "method")[0]
    assert claim.criterion("heldout_success").labels == ("seed0",)
    assert [c.of for c in claim.controls] == ["heldout_success"] and claim.separations
    names = {p.name for p in run.metrics.figures}
    assert {"success.png", "selected_patches.png", "learning_curves.png", "selection.png"} <= names
    model = SPEC.module().load_model(run.cfg, run.layout.model_dir)
    assert isinstance(model, OtterPolicy) and model.frozen


def _metrics(method_heldout, finetuned_heldout, baseline_heldout, seen=0.9, baseline_seen=0.9, control=None):
    """Hand-built evaluation numbers for ``claim``: per-seed held-out success of the three arms (and of the
    unaligned-encoder control, 0.05 unless given), sane checks."""
    from models.base import Metrics
    from models.common.units import unit_labels
    from models.otter.pipeline import CONTROL

    values = {
        "expert/success_seen": 1.0,
        "expert/success_heldout": 1.0,
        "random/success_seen": 0.05,
        "random/success_heldout": 0.05,
        "check/heldout_bc_targets": 0.0,
        "method/encoder_unchanged": 1.0,
        "baseline/encoder_unchanged": 1.0,
        "finetuned/encoder_unchanged": 0.0,
        "probe/localisation_seen": 1.0,
        "probe/localisation_heldout": 0.95,
    }
    metrics = Metrics(values)
    control = [0.05] * len(method_heldout) if control is None else control
    arms = (("method", method_heldout), ("finetuned", finetuned_heldout), ("baseline", baseline_heldout))
    for arm, held in (*arms, (CONTROL, control)):
        arm_seen = baseline_seen if arm == "baseline" else seen
        labels = unit_labels("seed", len(held))
        metrics.add_units("success_heldout", arm, held, labels)
        metrics.add_units("success_seen", arm, [arm_seen] * len(held), labels)
        metrics.add_units("heldout_over_seen", arm, np.array(held) / max(arm_seen, 1e-9), labels)
        values[f"{arm}/success_heldout"] = float(np.mean(held))
        values[f"{arm}/success_seen"] = arm_seen
        values[f"{arm}/heldout_over_seen"] = float(np.mean(held)) / max(arm_seen, 1e-9)
    return metrics


def test_claim_intervals_over_paired_seeds():
    from models.otter.pipeline import claim

    cfg = SPEC.make_config("default")
    assert cfg.n_seeds == 3
    # The session-3 audit's seeds: OTTER 0.60 / 0.43 / 0.85, fine-tuned 0.41 / 0.35 / 0.19; all-tokens 0.05.
    result = claim(cfg, _metrics([0.60, 0.43, 0.85], [0.41, 0.35, 0.19], [0.05, 0.05, 0.05]))
    assert result.sane
    held = result.criterion("heldout_success")
    assert held.estimate == pytest.approx(0.6266667) and held.n_units == 3 and held.interval == "t"
    assert held.low < 0.5 < held.high and held.state == "inconclusive"  # 0.63 on average, but seeds spread 0.43-0.85
    vs_ft = result.criterion("vs_finetuned_heldout")
    assert vs_ft.estimate == pytest.approx(0.31) and vs_ft.low < 0.2 < vs_ft.high and vs_ft.state == "inconclusive"
    vs_all = result.criterion("vs_all_tokens_heldout")
    diffs = np.array([0.55, 0.38, 0.80])
    half = 4.302653 * diffs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert (vs_all.low, vs_all.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    ratio = result.criterion("heldout_over_seen")
    assert ratio.estimate == pytest.approx(0.6266667 / 0.9) and ratio.state == "inconclusive"
    assert result.verdict == "inconclusive"
    # Consistent seeds well clear of every threshold: all four hold.
    clear = claim(cfg, _metrics([0.80, 0.82, 0.84], [0.40, 0.42, 0.41], [0.05, 0.04, 0.06]))
    assert [c.state for c in clear.criteria] == ["holds"] * 4 and clear.verdict == "holds"
    # Exactly the thresholds on every seed (zero spread, float round-off in the differences) still holds ...
    edge = claim(cfg, _metrics([0.72, 0.72, 0.72], [0.52, 0.52, 0.52], [0.42, 0.42, 0.42], seen=0.9))
    assert edge.verdict == "holds"
    # ... and the fine-tuned arm ahead on every seed fails (the claim reverses, as at encoder lr 1e-4).
    reversed_ = claim(cfg, _metrics([0.62, 0.65, 0.63], [0.81, 0.85, 0.83], [0.03, 0.02, 0.04]))
    assert reversed_.criterion("vs_finetuned_heldout").state == "fails" and reversed_.verdict == "fails"
    # The negative control (OTTER on an unaligned encoder) fails at 0.05; were it to reach the bar too, the
    # criteria could not tell the method from it and a claim that would hold is inconclusive.
    assert clear.controls[0].criterion.state == "fails" and not clear.controls[0].passes
    leaky = claim(cfg, _metrics([0.80, 0.82, 0.84], [0.40, 0.42, 0.41], [0.05, 0.04, 0.06], control=[0.7, 0.72, 0.71]))
    assert leaky.controls[0].passes and leaky.verdict == "inconclusive"


def test_all_tokens_baseline_must_learn_the_seen_task():
    from models.otter.pipeline import LEARNS_TASK_SUCCESS, claim

    cfg = SPEC.make_config("default")
    good = claim(cfg, _metrics([0.8] * 3, [0.4] * 3, [0.3] * 3, baseline_seen=LEARNS_TASK_SUCCESS))
    assert good.sane and good.sanity[f"baseline_learns_task_>={LEARNS_TASK_SUCCESS:g}"]
    # the prototype's all-tokens head (0.03 seen): the comparison is vacuous, the run fails its must-pass check
    vacuous = claim(cfg, _metrics([0.8] * 3, [0.4] * 3, [0.03] * 3, baseline_seen=0.03))
    assert not vacuous.sane and not vacuous.sanity[f"baseline_learns_task_>={LEARNS_TASK_SUCCESS:g}"]
    # smoke scale does not ask a few steps to learn the task
    assert claim(SPEC.make_config("smoke"), _metrics([0.0], [0.0], [0.0], seen=0.0, baseline_seen=0.0)).sane


def test_config_rejects_bad_values():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="multiple of data.encoder.patch"):
        SPEC.make_config("default", {"data.image_size": 30})
    with pytest.raises(ValidationError, match="baseline.d_model"):
        SPEC.make_config("default", {"baseline.heads": 5})
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"bc.encoder_lr_grid": ()})
