"""Core maths of win_rate: closed forms, chain dynamic programming against brute force, unbiased RLOO
gradients, the judge, the data loaders, claim() on hand-built metrics, the shared smoke run."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import (
    Metrics,  # noqa: E402
    ValidationError,  # noqa: E402
)
from models.common.units import unit_labels  # noqa: E402
from models.win_rate import algorithm as alg  # noqa: E402
from models.win_rate import pipeline as P  # noqa: E402
from models.win_rate.config import Config, DataConfig  # noqa: E402
from models.win_rate.data import (  # noqa: E402
    anchor_table,
    load_pairs_jsonl,
    reward_table,
    sample_chain,
    sample_pairs,
    save_npz,
    score,
    score_rows,
)
from models.win_rate.training import Row, Task, fit_judge, mc_evaluate  # noqa: E402

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

SMALL = dict(n_prompts=2, n_symbols=3, response_length=11)  # 3^11 > the enumeration bound: a valid config


def _all_responses(V, L):
    return torch.as_tensor(np.indices((V,) * L).reshape(L, -1).T.copy())


def _tiny_world(V=3, L=4, K=2, seed=0):
    """A random chain and additive reward small enough to enumerate (for brute-force references)."""
    rng = np.random.default_rng(seed)
    log_q = np.log(rng.dirichlet(np.ones(V), size=(K, L, V)))
    phi = rng.normal(size=(K, L, V, V))
    return log_q, phi, _all_responses(V, L)


def _brute(table, k, ys):
    return score(torch.as_tensor(table), torch.full((len(ys),), k), ys).numpy()


def test_reward_table_by_hand():
    cfg = DataConfig(**SMALL, liked_weight=1.5, bigram_bonus=1.0, run_penalty=0.5)
    prefs = {"liked": np.array([[0, 1], [1, 2]]), "bigram": np.array([[2, 1], [0, 1]])}
    phi = torch.as_tensor(reward_table(cfg, prefs))
    y = torch.tensor([[0, 0, 2, 1, 1, 2, 2, 2, 0, 1, 0]])
    liked = 1.5 * 7  # symbols 0/1 at 7 positions
    expected = liked + 1.0 * 1 - 0.5 * 4  # one (2, 1) bigram; runs 00, 11, 22, 22
    assert score(phi, torch.tensor([0]), y).item() == pytest.approx(expected)


def test_chain_sampling_follows_the_chain_and_pairs_follow_bradley_terry():
    log_q, phi, ys = _tiny_world(V=3, L=3, K=1)
    n = 40_000
    y = sample_chain(
        torch.as_tensor(log_q)[None],
        torch.zeros(n, dtype=torch.long),
        torch.zeros(n, dtype=torch.long),
        torch.Generator().manual_seed(0),
    )
    index = (y * torch.tensor([9, 3, 1])).sum(1).numpy()
    freq = np.bincount(index, minlength=27) / n
    p = np.exp(_brute(log_q, 0, ys))
    assert p.sum() == pytest.approx(1.0)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-4)  # 27 cells: a 5-sd band
    pairs = sample_pairs(log_q, phi, 20_000, np.random.default_rng(1))
    r = torch.as_tensor(phi)
    margin = score(r, torch.as_tensor(pairs["prompt"]), torch.as_tensor(pairs["chosen"])) - score(
        r, torch.as_tensor(pairs["prompt"]), torch.as_tensor(pairs["rejected"])
    )
    # E[label = chosen first | pair] = sigma(margin): the chosen response wins at rate E sigma(|m|) on average.
    assert float((margin > 0).double().mean()) > 0.5


def test_tilted_chain_is_the_kl_optimum_by_brute_force():
    log_q, phi, ys = _tiny_world()
    for beta in (0.3, 1.0, 3.0):
        table, log_z = alg.tilted_chain(log_q, phi, beta)
        for k in range(2):
            logits = _brute(log_q, k, ys) + _brute(phi, k, ys) / beta
            assert log_z[k] == pytest.approx(np.logaddexp.reduce(logits), abs=1e-10)
            assert np.allclose(_brute(table, k, ys), logits - np.logaddexp.reduce(logits), atol=1e-10)
            pi = np.exp(logits - np.logaddexp.reduce(logits))
            q = np.exp(_brute(log_q, k, ys))
            value = pi @ _brute(phi, k, ys) - beta * np.sum(pi * (np.log(pi) - np.log(q)))
            assert value == pytest.approx(alg.kl_optimum_value(log_q, phi, beta)[k], abs=1e-9)


def test_best_response_and_chain_expectation_by_brute_force():
    log_q, phi, ys = _tiny_world(seed=4)
    y_best, r_best = alg.best_response(phi)
    expectation = alg.chain_expectation(log_q, phi)
    for k in range(2):
        rewards = _brute(phi, k, ys)
        assert r_best[k] == pytest.approx(rewards.max())
        assert _brute(phi, k, torch.as_tensor(y_best[k : k + 1]))[0] == pytest.approx(rewards.max())
        assert expectation[k] == pytest.approx(np.exp(_brute(log_q, k, ys)) @ rewards, abs=1e-10)


def _task(log_q, phi, phi_hat, n_pairs=8):
    rng = np.random.default_rng(0)
    pairs = {k: torch.as_tensor(v) for k, v in sample_pairs(log_q, phi, n_pairs, rng).items()}
    _, r_hat_max = alg.best_response(phi_hat)
    return Task(
        torch.as_tensor(log_q), torch.as_tensor(phi), torch.as_tensor(phi_hat), torch.as_tensor(r_hat_max), pairs, pairs
    )


def test_mc_win_rates_match_the_enumerated_values():
    log_q, phi, ys = _tiny_world(seed=2)
    task = _task(log_q, phi, phi * 0.5)
    tilted, _ = alg.tilted_chain(log_q, phi, 0.5)
    tables = torch.as_tensor(np.stack([log_q, tilted]))
    rows = [Row("dpo_b0.5", "dpo", 0.1, 0, 0.5), Row("rlhf_b0.5", "rlhf", 0.1, 0, 0.5)]
    est = mc_evaluate(task, tables, rows, 20_000, torch.Generator().manual_seed(0), objective=True)
    for i, table in enumerate((log_q, tilted)):
        for key, reward in (("wr_oracle", phi), ("wr_judge", phi * 0.5)):
            exact = np.mean(
                [
                    np.exp(_brute(table, k, ys))
                    @ alg.sigmoid(_brute(reward, k, ys)[:, None] - _brute(reward, k, ys)[None])
                    @ np.exp(_brute(log_q, k, ys))
                    for k in range(2)
                ]
            )
            assert float(est[key][i]) == pytest.approx(exact, abs=0.01), (i, key)
    assert float(est["wr_own"][0]) == float(est["wr_oracle"][0])  # DPO: its pairs' labeller
    assert float(est["wr_own"][1]) == float(est["wr_judge"][1])  # RLHF: the judge it optimises
    rlhf_value = alg.kl_optimum_value(log_q, phi * 0.5, 0.5).mean()  # the tilted chain of phi/2 at beta 0.5 ...
    tilted_half, _ = alg.tilted_chain(log_q, phi * 0.5, 0.5)
    est2 = mc_evaluate(
        task, torch.as_tensor(tilted_half)[None], rows[1:], 20_000, torch.Generator().manual_seed(1), True
    )
    assert float(est2["objective"][0]) == pytest.approx(rlhf_value, abs=0.03)  # ... attains RLHF's optimum


@pytest.mark.parametrize("kind", ["wro", "rlhf"])
def test_rloo_gradient_is_unbiased_for_the_exact_objective(kind):
    """The RLOO surrogate's gradient, over many groups, points along the exact objective's gradient."""
    from models.win_rate.training import PreferenceLearner

    log_q, phi, ys = _tiny_world(V=3, L=3, seed=3)
    phi_hat = np.random.default_rng(5).normal(size=phi.shape)
    task = _task(log_q, phi, phi_hat)
    cfg = Config.for_scale(
        "smoke", {"data.n_symbols": 3, "data.response_length": 11, "group_size": 4, "batch_prompts": 4000}
    )
    row = Row("x", kind, 0.1, 0, 0.5, "id")
    module = PreferenceLearner(task, [row], cfg, 1, 0)
    with torch.no_grad():
        module.policies.groups[0].normal_(generator=torch.Generator().manual_seed(2))
    loss = module.online_loss(module.policies.log_tables())
    (estimate,) = torch.autograd.grad(loss, list(module.policies.groups))
    tables = module.policies.log_tables().double()
    value = 0
    for k in range(2):
        logp = score_rows(tables, torch.zeros(len(ys), dtype=torch.long), torch.full((len(ys),), k), ys)
        pi, q = logp.exp(), torch.as_tensor(np.exp(_brute(log_q, k, ys)))
        r_hat = torch.as_tensor(_brute(phi_hat, k, ys))
        if kind == "wro":
            value = value + pi @ torch.sigmoid(r_hat[:, None] - r_hat[None]) @ q
        else:
            value = value + pi @ r_hat - 0.5 * (pi * (logp - q.log())).sum()
    (exact,) = torch.autograd.grad(-value / 2, list(module.policies.groups))
    g_est, g_exact = estimate.flatten().double(), exact.flatten().double()
    assert torch.dot(g_est, g_exact) / (g_est.norm() * g_exact.norm()) > 0.9


def test_judge_recovers_the_oracle_from_many_pairs():
    cfg = DataConfig(**SMALL)
    rng = np.random.default_rng(0)
    log_q = anchor_table(cfg, rng)
    phi = reward_table(cfg, {"liked": np.array([[0, 1], [1, 2]]), "bigram": np.array([[2, 1], [0, 1]])})
    pairs = {k: torch.as_tensor(v) for k, v in sample_pairs(log_q, phi, 20_000, rng).items()}
    judge = fit_judge((2, 11, 3), pairs, 1e-5)
    ys = sample_chain(
        torch.as_tensor(log_q)[None],
        torch.zeros(2000, dtype=torch.long),
        torch.zeros(2000, dtype=torch.long),
        torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        r_hat = judge(torch.zeros(2000, dtype=torch.long), ys).numpy()
    r = score(torch.as_tensor(phi), torch.zeros(2000, dtype=torch.long), ys).numpy()
    assert alg.spearman(r_hat, r) > 0.95


def test_pairs_jsonl_loader_reads_both_formats(tmp_path):
    cfg = DataConfig(**SMALL)
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        json.dumps({"prompt": "<x1>", "chosen": "abcabcabcab", "rejected": "c c a a b b c c a a b"})
        + "\n"
        + json.dumps(
            {
                "chosen": "\n\nHuman: <x0>\n\nAssistant: bbaabbaabba",
                "rejected": "\n\nHuman: <x0>\n\nAssistant: aabbaabbaab",
            }
        )
        + "\n"
    )
    pairs = load_pairs_jsonl(path, cfg)  # HH-RLHF: the last human turn is the prompt
    assert pairs["prompt"].tolist() == [1, 0]
    assert pairs["chosen"][0].tolist() == [0, 1, 2] * 3 + [0, 1]
    assert pairs["rejected"][1].tolist()[:4] == [0, 0, 1, 1]
    path.write_text(json.dumps({"prompt": "<x0>", "chosen": "ab", "rejected": "abcabcabcab"}) + "\n")
    with pytest.raises(ValueError, match="11 symbols"):
        load_pairs_jsonl(path, cfg)
    path.write_text(json.dumps({"prompt": "<x7>", "chosen": "a" * 11, "rejected": "b" * 11}) + "\n")
    with pytest.raises(ValueError, match="not one of"):
        load_pairs_jsonl(path, cfg)


def test_save_npz_is_byte_deterministic(tmp_path):
    arrays = {"b": np.arange(5), "a": np.ones((2, 2))}
    save_npz(tmp_path / "one.npz", **arrays)
    save_npz(tmp_path / "two.npz", **dict(reversed(list(arrays.items()))))
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "two.npz").read_bytes()


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError, match="too large to enumerate"):
        Config.for_scale("default", {"data.n_symbols": 4, "data.response_length": 4})  # enumerable
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"betas": [0.0]})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"lr_grid": []})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.pairs_jsonl": "/etc/passwd"})


# ----------------------------------------------------------------------------- the pipeline at smoke scale


def test_smoke_pipeline(smoke_run):
    run = smoke_run("win_rate")
    cfg, v, claim = run.cfg, run.metrics.values, run.claim
    assert run.dataset.source == "synthetic" and run.dataset.meta["log10_responses_per_prompt"] > 4.7
    for arm in P.arms(cfg):
        records = run.artifacts.history[f"{arm}_seed0"]
        assert records[0]["step"] == 0 and len(records) == cfg.checkpoints + 1
        p = P.metric_prefix(cfg, arm)
        assert 0.0 <= v[f"{p}/win_rate"] <= 1.0 and "seed0" in run.metrics.unit("spearman_objective_wr", p).labels
    # Every row starts as the anchor: its MC win rate vs the anchor is 1/2 up to sampling noise.
    start = run.artifacts.history[f"rlhf_b{cfg.betas[0]:g}_seed0"][0]
    assert abs(start["val/win_rate_oracle"] - 0.5) < 4 * 0.5 / math.sqrt(cfg.eval_samples * cfg.data.n_prompts)
    assert claim.sane, claim.sanity
    assert {c.name for c in claim.criteria} == {
        "wro_correspondence",
        "wro_minus_dpo_correspondence",
        "success_ranks_rlhf_family",
        "success_ranks_dpo_family",
    }
    wro = [P.metric_prefix(cfg, a) for a in P.correspondence_arms(cfg)]
    assert "wro_id" not in wro and claim.criterion("wro_correspondence").estimate == pytest.approx(
        np.mean([run.metrics.unit("spearman_objective_wr", p)[0] for p in wro])
    )
    assert all(c.n_units == 1 and c.state != "holds" for c in claim.criteria) and claim.verdict != "holds"
    assert isinstance(P.load_model(cfg, run.layout.model_dir), torch.nn.Module)


def _claim_metrics(cfg, wro_rho, dpo_rho, success, solution):
    """Every number claim() reads: per seed, each judged WRO objective's rho = wro_rho[k], each DPO beta's =
    dpo_rho[k], and per family the two ranking correlations; the controls' shuffled versions at 0."""
    metrics = Metrics({}, [])
    v = metrics.values
    labels = unit_labels("seed", cfg.n_seeds)
    for arm, spec in P.arms(cfg).items():
        p = P.metric_prefix(cfg, arm)
        rho = dpo_rho if spec["kind"] == "dpo" else wro_rho
        metrics.add_units("spearman_objective_wr", p, rho, labels)
        metrics.add_units("spearman_objective_shuffled_wr", p, [0.0] * cfg.n_seeds, labels)
        v.update(
            {
                f"{p}/{key}": 0.6
                for key in (
                    "spearman_objective_wr",
                    "spearman_objective_oracle_wr",
                    "win_rate",
                    "expected_win_rate",
                    "fraction_of_optimum",
                )
            }
        )
    for family in P.families(cfg):
        metrics.add_units("spearman_success_vs_wr", f"family_{family}", success, labels)
        metrics.add_units("spearman_solution_vs_wr", f"family_{family}", solution, labels)
        metrics.add_units("spearman_shuffled_vs_wr", f"family_{family}", [0.0] * cfg.n_seeds, labels)
    t = "tabular/uniform_"
    v.update(
        {
            t + "anchor_wr": 0.5,
            t + "sft_closed_form": 0.592,
            t + "sft_optimum_mass": 1.0,
            t + "wro_optimum": 0.819,
            t + "rlhf_optimum_b1": 0.713,
            t + "sft_trained": 0.59,
            t + "wro_trained": 0.815,
            "anchor/win_rate_vs_itself": 0.5,
            "anchor/win_rate_standard_error_bound": 0.01,
            "anchor/max_win_rate_judge_best": 0.8,
            "checks/tilted_chain_mass_error": 0.0,
            "judge/heldout_acc": 0.7,
            "anchor/oracle_best_response_win_rate": 0.9,
        }
    )
    return metrics


def test_claim_holds_fails_and_is_inconclusive_on_hand_built_metrics():
    cfg = Config.for_scale("smoke", {"n_seeds": 3})
    good = P.claim(cfg, _claim_metrics(cfg, [0.95, 0.96, 0.97], [0.3, -0.2, 0.4], [0.9, 0.8, 0.85], [0.1, 0.0, -0.1]))
    assert good.verdict == "holds", [c.describe() for c in good.criteria]
    gap = good.criterion("wro_minus_dpo_correspondence")
    assert gap.estimate == pytest.approx(0.96 - np.mean([0.3, 0.2, 0.4])) and gap.n_units == 3
    assert good.criterion("success_ranks_dpo_family").estimate == pytest.approx(0.85)
    low = P.claim(cfg, _claim_metrics(cfg, [0.70, 0.75, 0.72], [0.3, -0.2, 0.4], [0.9, 0.8, 0.85], [0.1, 0.0, -0.1]))
    assert low.criterion("wro_correspondence").state == "fails" and low.verdict == "fails"
    # Mean 0.93 >= 0.9, but three seeds this far apart leave 0.9 inside the t interval.
    wide = P.claim(cfg, _claim_metrics(cfg, [0.99, 0.84, 0.96], [0.1, 0.0, 0.1], [0.5, -0.3, 0.4], [0.0, 0.0, 0.0]))
    rho = wide.criterion("wro_correspondence")
    assert rho.estimate == pytest.approx(0.93) and rho.low < 0.9 < rho.high and rho.state == "inconclusive"
    assert wide.criterion("success_ranks_rlhf_family").state == "inconclusive" and wide.verdict == "inconclusive"
    reversed_ = P.claim(
        cfg, _claim_metrics(cfg, [0.95, 0.96, 0.97], [0.1, 0.0, 0.1], [-0.5, -0.6, -0.4], [0.5, 0.6, 0.4])
    )
    assert reversed_.criterion("success_ranks_rlhf_family").state == "fails"
