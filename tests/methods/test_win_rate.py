"""Core maths of win_rate: closed forms, exact enumeration, unbiased RLOO gradients, data loaders, smoke pipeline."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import ValidationError  # noqa: E402
from models.common.tiny_lm import LMConfig, TinyLM, sequence_logprob  # noqa: E402
from models.win_rate import SPEC  # noqa: E402
from models.win_rate import algorithm as alg  # noqa: E402
from models.win_rate.config import Config, DataConfig  # noqa: E402
from models.win_rate.data import (  # noqa: E402
    all_responses,
    exact_logprobs,
    load_pairs_jsonl,
    make_tokenizer,
    oracle_reward,
    response_index,
    sample_responses,
    save_npz,
    token_ids,
)

torch.set_num_threads(1)
R8 = np.linspace(-2, 2, 8)
U8 = np.full(8, 1 / 8)


def _random_preferences(n, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, n)) * 2
    P = alg.sigmoid(logits - logits.T)  # any P with P + P^T = 1 (not necessarily BT)
    q = rng.dirichlet(np.ones(n))
    return P, q


# ----------------------------------------------------------------------------- closed forms (the brief's table)


def test_brief_table_closed_forms():
    P = alg.bt_matrix(R8)
    w = alg.win_against(P, U8)
    assert alg.win_rate(U8, w) == pytest.approx(0.5, abs=1e-12)
    assert 2 * np.sum(U8 * w**2) == pytest.approx(0.592, abs=1e-3)
    assert w.max() == pytest.approx(0.819, abs=1e-3)
    for beta, expected in [(0.1, 0.818), (0.5, 0.780), (1.0, 0.713), (2.0, 0.629)]:
        assert alg.win_rate(alg.kl_optimum(U8, R8, beta), w) == pytest.approx(expected, abs=1e-3)
    skew = np.exp(-R8) / np.exp(-R8).sum()
    w_s = alg.win_against(P, skew)
    assert 2 * np.sum(skew * w_s**2) == pytest.approx(0.551, abs=1e-3)
    assert w_s.max() == pytest.approx(0.947, abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sft_optimum_is_the_winner_distribution_of_a_random_pair(seed):
    P, q = _random_preferences(6, seed)
    w = alg.win_against(P, q)
    pi = alg.sft_optimum(q, w)
    assert pi.sum() == pytest.approx(1.0, abs=1e-12)  # because E_q[w] = 1/2 whenever P + P^T = 1
    assert alg.win_rate(pi, w) == pytest.approx(2 * np.sum(q * w * w), abs=1e-12)
    wins = alg.sample_pairs(P, q, 200_000, np.random.default_rng(seed))
    freq = wins.sum(1) / wins.sum()
    assert np.max(np.abs(freq - pi)) < 5e-3


def test_kl_optimum_maximises_the_regularised_objective():
    rng = np.random.default_rng(0)
    q, r = rng.dirichlet(np.ones(7)), rng.normal(size=7)
    for beta in (0.1, 1.0, 3.0):
        best = alg.kl_optimum(q, r, beta)
        value = alg.kl_objective(best, q, r, beta)
        assert value == pytest.approx(alg.kl_objective_max(q, r, beta), abs=1e-10)
        for _ in range(20):
            other = np.abs(best + 0.05 * rng.normal(size=7))
            assert alg.kl_objective(other / other.sum(), q, r, beta) <= value + 1e-12


def test_grouped_h_values_match_the_full_matrix_for_every_h():
    rng = np.random.default_rng(3)
    r = rng.integers(0, 4, size=(2, 30)).astype(float) * 0.7  # few distinct values, as the oracle's
    q = rng.dirichlet(np.ones(30), size=2)
    for h in alg.H_FUNCTIONS:
        grouped = alg.bt_values_grouped(r, q, h)
        full = np.stack([alg.h_values(alg.bt_matrix(r[k]), q[k], h) for k in range(2)])
        assert np.allclose(grouped, full, atol=1e-10)
    # All h agree on the best response under BT (win-rate consistency of every h-WRO).
    best = {h: alg.bt_values_grouped(r, q, h).argmax(1) for h in alg.H_FUNCTIONS}
    assert all(np.array_equal(r[np.arange(2), best[h]], r.max(1)) for h in best)


def test_bt_fit_recovers_bt_rewards_and_nontransitive_matrix_is_a_preference():
    assert np.allclose(alg.bt_fit(alg.bt_matrix(R8), U8), R8 - R8.mean(), atol=1e-8)
    Pn = alg.nontransitive_matrix(R8 * 0, 3.0)
    assert np.allclose(Pn + Pn.T, 1.0)
    assert Pn[0, 1] > 0.5 and Pn[1, 2] > 0.5 and Pn[7, 0] > 0.5  # a preference cycle


def test_tabular_training_reaches_the_closed_forms():
    P = alg.bt_matrix(R8)
    w = alg.win_against(P, U8)
    wins = alg.sample_pairs(P, U8, 50_000, np.random.default_rng(0))
    betas = np.array([0.5, 1.0])
    pi_sft, pi_dpo, pi_wro = alg.train_tabular(
        wins.sum(1)[None], np.stack([wins, wins]), np.log(np.stack([U8, U8])), betas, w[None], steps=2000, lr=0.1
    )
    assert alg.win_rate(pi_sft[0], w) == pytest.approx(2 * np.sum(U8 * w * w), abs=0.01)
    assert alg.win_rate(pi_wro[0], w) >= 0.81
    for i, beta in enumerate(betas):
        assert alg.win_rate(pi_dpo[i], w) == pytest.approx(alg.win_rate(alg.kl_optimum(U8, R8, beta), w), abs=0.02)


def test_spearman_and_fraction_of_optimum():
    assert alg.spearman([1, 2, 3, 4], [10, 20, 25, 40]) == pytest.approx(1.0)
    assert alg.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(alg.spearman([1, 1, 1], [1, 2, 3]))
    assert alg.fraction_of_optimum(0.75, 0.5, 1.0) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- the sequence task

TINY = DataConfig(n_prompts=2, n_symbols=3, response_length=3, lm={"n_embd": 8, "n_layer": 1, "n_head": 2})


def _tiny_policy(seed=0) -> tuple[TinyLM, object]:
    tok = make_tokenizer(TINY)
    torch.manual_seed(seed)
    model = TinyLM(LMConfig(vocab_size=len(tok), n_positions=4, n_embd=8, n_layer=1, n_head=2))
    with torch.no_grad():
        model.wte.weight.mul_(40)  # a non-uniform policy
    return model.eval(), tok


def test_response_enumeration_and_index_are_inverse():
    grid = all_responses(3, 4)
    assert grid.shape == (81, 4) and len({tuple(g) for g in grid}) == 81
    assert np.array_equal(response_index(grid, 3), np.arange(81))


def test_exact_logprobs_match_direct_scoring_and_normalise():
    model, tok = _tiny_policy()
    table = exact_logprobs(model, tok, TINY)
    assert table.shape == (2, 27)
    assert torch.allclose(table.exp().sum(1), torch.ones(2), atol=1e-5)
    responses = torch.as_tensor(all_responses(3, 3))
    sym = [tok.id(c) for c in "abc"]
    for k in range(2):
        ids = token_ids(tok, TINY, torch.full((27,), k), responses)
        logits = model(ids[:, :-1])[..., sym]
        direct = torch.log_softmax(logits, -1).gather(-1, responses[..., None])[..., 0].sum(1)
        assert torch.allclose(table[k], direct, atol=1e-5)
    # Unrestricted scoring differs only by the mass on non-symbol tokens (tiny here but nonzero).
    full = sequence_logprob(
        model,
        token_ids(tok, TINY, torch.zeros(27, dtype=torch.long), responses),
        torch.tensor([[0, 1, 1, 1]]).expand(27, 4),
    )
    assert torch.all(full <= table[0] + 1e-6)


def test_sampling_follows_the_exact_distribution():
    model, tok = _tiny_policy()
    n = 30_000
    y = sample_responses(model, tok, TINY, torch.zeros(n, dtype=torch.long), torch.Generator().manual_seed(0))
    freq = np.bincount(response_index(y.numpy(), 3), minlength=27) / n
    p = exact_logprobs(model, tok, TINY)[0].exp().detach().numpy()
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-4)


def test_oracle_reward_by_hand():
    cfg = DataConfig(n_prompts=1, n_symbols=4, response_length=4, liked_weight=1.5, bigram_bonus=1.0, run_penalty=0.5)
    prefs = {"liked": np.array([[0, 1]]), "bigram": np.array([[2, 3]])}
    responses = np.array([[0, 0, 2, 3], [3, 3, 3, 3], [1, 2, 3, 0]])
    r = oracle_reward(cfg, prefs, responses)[0]
    assert r[0] == pytest.approx(1.5 * math.sqrt(2) + 1.0 - 0.5 * 1)
    assert r[1] == pytest.approx(0.0 + 0.0 - 0.5 * 3)
    assert r[2] == pytest.approx(1.5 * math.sqrt(2) + 1.0)


@pytest.mark.parametrize("kind", ["wro", "rlhf"])
def test_rloo_gradient_is_unbiased_for_the_exact_objective(kind, tmp_path):
    """The RLOO surrogate's gradient, averaged over many groups, matches the exact objective's gradient."""
    from models.win_rate import pipeline as P

    model, tok = _tiny_policy(1)
    cfg = Config(data=TINY, group_size=4, batch_prompts=4000, kl_beta=0.5)
    task = P.Task.__new__(P.Task)
    task.cfg, task.d, task.tok = cfg, TINY, tok
    task.anchor = model
    with torch.no_grad():
        task.log_q = (exact_logprobs(model, tok, TINY) * 0.5).log_softmax(1).double()  # anchor != policy
    task.q = task.log_q.exp().numpy()
    task.q_cdf = task.log_q.exp().cumsum(1)
    rng = np.random.default_rng(0)
    task.reward = rng.normal(size=(2, 27))
    task.w = alg.bt_values_grouped(task.reward, task.q, "id")
    task.heldout = {
        k: torch.zeros((1, 3) if k != "prompt" else (1,), dtype=torch.long) for k in ("prompt", "chosen", "rejected")
    }
    task.sym = torch.as_tensor([tok.id(c) for c in "abc"])
    r_hat = rng.normal(size=(2, 27))
    spec = {"kind": kind, "h": "id"} if kind == "wro" else {"kind": "rlhf", "beta": 0.5}
    module = P.PreferenceLearner(model, task, spec, cfg, r_hat if kind == "rlhf" else None, seed=0)
    params = [p for p in model.parameters()]
    loss, _ = module.rollout_loss(torch.randint(0, 2, (cfg.batch_prompts,), generator=torch.Generator().manual_seed(1)))
    estimate = torch.autograd.grad(loss, params)
    pi = exact_logprobs(model, tok, TINY).double().exp()
    if kind == "wro":
        objective = (pi * torch.as_tensor(task.w)).sum(1).mean()
    else:
        rh = torch.as_tensor(r_hat)
        objective = ((pi * rh).sum(1) - 0.5 * (pi * (pi.log() - task.log_q)).sum(1)).mean()
    exact = torch.autograd.grad(-objective, params)
    g_est = torch.cat([g.flatten() for g in estimate]).double()
    g_exact = torch.cat([g.flatten() for g in exact]).double()
    cos = torch.dot(g_est, g_exact) / (g_est.norm() * g_exact.norm())
    assert cos > 0.9, cos


def test_pairs_jsonl_loader_reads_both_formats(tmp_path):
    tok = make_tokenizer(TINY)
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        json.dumps({"prompt": "<x1>", "chosen": "abc", "rejected": "cca"})
        + "\n"
        + json.dumps({"chosen": "\n\nHuman: <x0>\n\nAssistant: bba", "rejected": "\n\nHuman: <x0>\n\nAssistant: aab"})
        + "\n"
    )
    pairs = load_pairs_jsonl(path, tok, TINY)  # HH-RLHF: the last human turn is the prompt
    assert pairs["prompt"].tolist() == [1, 0]
    path.write_text(
        json.dumps({"prompt": "<x1>", "chosen": "abc", "rejected": "cca"})
        + "\n"
        + json.dumps({"chosen": "<x0> bba", "rejected": "<x0> aab"})
        + "\n"
    )
    pairs = load_pairs_jsonl(path, tok, TINY)
    assert pairs["prompt"].tolist() == [1, 0]
    assert pairs["chosen"].tolist() == [[0, 1, 2], [1, 1, 0]]
    assert pairs["rejected"].tolist() == [[2, 2, 0], [0, 0, 1]]
    path.write_text(json.dumps({"prompt": "<x0>", "chosen": "ab", "rejected": "abc"}) + "\n")
    with pytest.raises(ValueError, match="3 symbols"):
        load_pairs_jsonl(path, tok, TINY)


def test_save_npz_is_byte_deterministic(tmp_path):
    arrays = {"b": np.arange(5), "a": np.ones((2, 2))}
    save_npz(tmp_path / "one.npz", **arrays)
    save_npz(tmp_path / "two.npz", **dict(reversed(list(arrays.items()))))
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "two.npz").read_bytes()
    with np.load(tmp_path / "one.npz") as back:
        assert np.array_equal(back["b"], arrays["b"])


def test_prepare_reads_a_user_supplied_anchor_and_pairs(tmp_path, monkeypatch):
    from models.common.tiny_lm import load_pretrained, save_pretrained
    from models.win_rate import pipeline as P

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    model, tok = _tiny_policy(5)
    save_pretrained(model, tmp_path / "data" / "anchor_hf", tok)
    (tmp_path / "data" / "pairs.jsonl").write_text(
        "".join(json.dumps({"prompt": f"<x{i % 2}>", "chosen": "abc", "rejected": "cba"}) + "\n" for i in range(6))
    )
    cfg = Config.for_scale(
        "smoke",
        {
            "data.n_prompts": 2,
            "data.n_symbols": 3,
            "data.response_length": 3,
            "data.anchor_lm": "anchor_hf",
            "data.pairs_jsonl": "pairs.jsonl",
        },
    )
    out = tmp_path / "prepared"
    out.mkdir()
    ref = P.prepare(cfg, out)
    assert ref.meta["synthetic"] is False and ref.meta["train_pairs"] == 6
    ids = token_ids(tok, TINY, torch.tensor([0, 1]), torch.tensor([[0, 1, 2], [2, 2, 2]]))
    assert torch.equal(load_pretrained(out / P.ANCHOR)(ids), model(ids))


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.n_symbols": 26, "data.response_length": 6})  # too many responses
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"dpo_betas": [0.0]})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.anchor_lm": "/etc/passwd"})


# ----------------------------------------------------------------------------- the pipeline at smoke scale


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert {"anchor/config.json", "anchor/model.safetensors", "anchor/vocab.json", "pairs_train.npz"} <= set(ref.files)
    artifacts = steps.train(SPEC, cfg, tmp_path)
    for name in SPEC.module().variants(cfg):
        records = artifacts.history[name]
        assert records[0]["step"] == 0 and records[0]["val/win_rate"] == pytest.approx(0.5, abs=1e-6)
        assert sum("val/win_rate" in r for r in records) == cfg.checkpoints + 1
    metrics, claim = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert all(0.0 <= v[f"{p}/win_rate"] <= 1.0 for p in ("method", "baseline", "sft", "nlhf"))
    assert v["method/win_rate"] <= v["anchor/max_win_rate"] + 1e-9
    assert claim.sane, claim.sanity
    assert {"spearman_fraction_vs_final_wr", "spearman_expected_vs_final_wr"} <= claim.figures.keys()
    ranking = claim.criterion("fraction_beats_optimum_ranking")
    assert ranking.estimate == pytest.approx(
        v["runs/spearman_fraction_vs_final_wr"] - v["runs/spearman_expected_vs_final_wr"]
    )
    wro = [p for p in ("method", "nlhf", "wro_id", "wro_log", "wro_logit")]
    assert claim.criterion("wro_correspondence").estimate == pytest.approx(
        np.mean([v[f"{p}/spearman_objective_wr"] for p in wro])
    )
    # One seed at smoke: no interval, so no criterion can hold.
    assert all(c.n_units == 1 and c.state != "holds" for c in claim.criteria) and claim.verdict != "holds"
    policy = SPEC.module().load_model(cfg, steps.Layout(tmp_path, SPEC).model_dir)
    assert isinstance(policy, TinyLM)


def _claim_metrics(cfg, wro_rho, dpo_rho, finals=None, fractions=None):
    """Every key claim() reads, per seed: each WRO objective's rho = wro_rho[k], each DPO beta's = dpo_rho[k];
    final win rates and fractions of optimum per variant (rows) and seed (columns)."""
    from models.base import Metrics
    from models.win_rate.pipeline import metric_prefix, variants

    names = variants(cfg)
    n = len(names)
    finals = np.tile(np.linspace(0.5, 0.9, n)[:, None], (1, cfg.n_seeds)) if finals is None else finals
    fractions = finals if fractions is None else fractions  # ranks the finals perfectly
    v = {}
    for i, (name, spec) in enumerate(names.items()):
        p = metric_prefix(cfg, name)
        rho = np.asarray(dpo_rho if spec["kind"] == "dpo" else wro_rho, float)
        for k in range(cfg.n_seeds):
            v.update(
                {
                    f"{p}/seed{k}/spearman_objective_wr": rho[k],
                    f"{p}/seed{k}/win_rate": finals[i, k],
                    f"{p}/seed{k}/fraction_of_optimum": fractions[i, k],
                }
            )
        # The win rate at the optimum ranks them in reverse: a clear loser against the fraction.
        v.update(
            {
                f"{p}/spearman_objective_wr": float(rho.mean()),
                f"{p}/expected_win_rate": 1.0 - 0.05 * i,
                f"{p}/win_rate": float(finals[i].mean()),
            }
        )
    t = "tabular/uniform_"
    v.update(
        {
            "anchor/max_win_rate": 0.95,
            "anchor/win_rate": 0.5,
            "anchor/mass": 1.0,
            t + "anchor_wr": 0.5,
            t + "sft_closed_form": 0.592,
            t + "sft_trained": 0.59,
            t + "sft_optimum_mass": 1.0,
            t + "wro_optimum": 0.819,
            t + "wro_trained": 0.815,
            t + "rlhf_optimum_b1": 0.713,
            "runs/spearman_fraction_vs_final_wr": 1.0,
            "runs/spearman_expected_vs_final_wr": -1.0,
        }
    )
    return Metrics(v)


def test_claim_criteria_hold_with_consistent_seeds_and_fail_below_threshold():
    from models.win_rate.pipeline import claim

    cfg = Config.for_scale("smoke", {"n_seeds": 3})
    result = claim(cfg, _claim_metrics(cfg, [0.95, 0.96, 0.97], [0.3, -0.2, 0.4]))
    assert result.verdict == "holds", [c.describe() for c in result.criteria]
    gap = result.criterion("wro_minus_dpo_correspondence")
    assert gap.estimate == pytest.approx(0.96 - abs(np.mean([0.3, -0.2, 0.4]))) and gap.n_units == 3
    assert result.criterion("fraction_beats_optimum_ranking").estimate == pytest.approx(2.0)
    low = claim(cfg, _claim_metrics(cfg, [0.70, 0.75, 0.72], [0.3, -0.2, 0.4]))
    assert low.criterion("wro_correspondence").state == "fails" and low.verdict == "fails"


def test_wro_correspondence_is_inconclusive_when_seeds_straddle_0_9():
    from models.win_rate.pipeline import claim

    cfg = Config.for_scale("smoke", {"n_seeds": 3})
    # Mean 0.93 >= 0.9 (today's boolean: holds), but 3 seeds this far apart leave 0.9 inside the t interval.
    result = claim(cfg, _claim_metrics(cfg, [0.99, 0.84, 0.96], [0.1, 0.0, 0.1]))
    rho = result.criterion("wro_correspondence")
    assert rho.estimate == pytest.approx(0.93) and rho.low < 0.9 < rho.high and rho.state == "inconclusive"
    assert result.verdict == "inconclusive"
