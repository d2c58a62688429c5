"""pag_cert: eps-net sizes, the Chernoff kappa_max, the kappa -> rho mapping, the held-out check, the oracles."""

from __future__ import annotations

import gzip
import math
import os

import numpy as np
import pytest
import torch
from torch import nn

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import ValidationError  # noqa: E402
from models.common.lightning import set_threads  # noqa: E402
from models.pag_cert import SPEC  # noqa: E402
from models.pag_cert import algorithm as alg  # noqa: E402
from models.pag_cert import data as images  # noqa: E402

set_threads()  # PAPERLINE_THREADS: tiny tensor ops crawl when OpenMP threads outnumber free cores

# s(e, delta' = 0.005) from the official complexity() (brief table)
SIZE_TABLE = [(1e-4, 989_533), (2.5e-3, 31_634), (5e-3, 14_953), (1e-2, 7_042), (2e-2, 3_303), (5e-2, 1_205)]


# ----------------------------------------------------------------------------- sample sizes


@pytest.mark.parametrize("e,expected", SIZE_TABLE)
def test_epsnet_size_reproduces_official_table(e, expected):
    s = alg.epsnet_size(e, 0.005, vc_dim=2)
    assert s == expected
    assert alg._enough(s, e, 0.005, 2) and not alg._enough(s - 1, e, 0.005, 2)  # the smallest such s


def test_certification_size_uses_eps_times_pmin_and_half_delta():
    assert alg.certification_size(0.05, 0.1, 0.01) == 14_953  # default scale
    assert alg.certification_size(0.1, 0.5, 0.01) == 1_205  # smoke scale
    assert alg.certification_size(0.01, 0.01, 0.01) == 989_533  # paper's MNIST PGD setting
    # more shattering (higher VC dimension) or a smaller delta needs more samples; no input dimension enters
    assert alg.epsnet_size(0.01, 0.005, vc_dim=3) > alg.epsnet_size(0.01, 0.005, vc_dim=2)
    assert alg.epsnet_size(0.01, 0.0005) > alg.epsnet_size(0.01, 0.005)


def test_chernoff_kappa_max_has_mass_p_min_with_probability_one_minus_half_delta():
    # confidences ~ U(0, 1): Pr(conf >= kappa) = 1 - kappa exactly
    rng = np.random.default_rng(0)
    s, p_min, delta, trials = 1_000, 0.2, 0.2, 4_000
    k = alg.chernoff_index(s, p_min, delta)
    kappa_max = np.sort(rng.uniform(size=(trials, s)), axis=1)[:, k]
    failures = np.mean(1.0 - kappa_max < p_min)
    assert failures <= delta / 2  # Chernoff guarantee (it is conservative: failures are rarer still)
    naive = np.sort(rng.uniform(size=(trials, s)), axis=1)[:, int(s * (1 - p_min))]
    assert np.mean(1.0 - naive < p_min) > 0.3  # the plain empirical quantile fails about half the time
    assert alg.chernoff_index(10, 0.1, 0.01) == -1  # too few samples: nothing certified


# ----------------------------------------------------------------------------- kappa -> rho mapping


def _quality_points(rng, n, ties=False):
    conf = rng.uniform(0.1, 1.0, n)
    rob = np.clip(0.3 * conf + rng.normal(0, 0.05, n), 0, None)
    if ties:  # quantised robustness (PGD steps), +inf (never flipped) and repeated confidences
        rob = np.round(rob * 50) / 50
        rob[rng.uniform(size=n) < 0.1] = np.inf
        conf = np.round(conf * 200) / 200
    return conf, rob


def test_bound_is_min_rob_above_kappa_and_non_decreasing():
    rng = np.random.default_rng(1)
    conf, rob = _quality_points(rng, 300, ties=True)
    cert = alg.Certificate.fit(conf, rob, p_min=0.2, delta=0.05)
    kappas = np.sort(np.concatenate([rng.uniform(0, 1.1, 200), conf]))
    bounds = cert.bound(kappas)
    brute = np.array([rob[conf >= k].min() if (conf >= k).any() else np.inf for k in kappas])
    np.testing.assert_array_equal(bounds, brute)
    assert np.all(bounds[1:] >= bounds[:-1])
    # no sample lies in a certified counterexample region {rob < M(kappa), conf >= kappa}
    for k in kappas[::10]:
        assert not np.any((conf >= k) & (rob < cert.bound(np.array([k]))[0]))


@pytest.mark.parametrize("ties", [False, True])
def test_relative_error_matches_direct_counting(ties):
    rng = np.random.default_rng(2 + ties)
    conf, rob = _quality_points(rng, 400, ties)
    test_conf, test_rob = _quality_points(rng, 600, ties)
    test_rob = test_rob * rng.uniform(0.7, 1.1, 600)  # a shifted held-out set, so that violations exist
    cert = alg.Certificate.fit(conf, rob, p_min=0.2, delta=0.05)
    held = alg.HeldOut.of(test_conf, test_rob)
    fast = alg.relative_error(cert, held)
    assert fast > 0
    assert fast == pytest.approx(alg.relative_error_reference(cert, test_conf, test_rob), abs=1e-12)
    brute_nc = sum(c <= cert.kappa_max and r < cert.bound(np.array([c]))[0] for c, r in zip(test_conf, test_rob))
    assert alg.counterexamples(cert, held) == brute_nc


def test_mapping_is_never_used_above_kappa_max():
    rng = np.random.default_rng(4)
    conf, rob = _quality_points(rng, 500)
    test_conf, test_rob = _quality_points(rng, 2_000)
    cert = alg.Certificate.fit(conf, rob, p_min=0.3, delta=0.05)
    above = test_conf > cert.kappa_max
    m_top = cert.bound(np.array([cert.kappa_max]))[0]
    # points above kappa_max sitting at M(kappa_max): below the bound M(conf) at their own confidence...
    edge, safe = test_rob.copy(), test_rob.copy()
    edge[above], safe[above] = m_top, np.inf
    assert np.any(cert.bound(test_conf[above]) > m_top)
    # ...but that bound is never used, and for every kappa <= kappa_max they are not counterexamples
    held_edge = alg.HeldOut.of(test_conf, edge)
    assert alg.relative_error(cert, held_edge) == pytest.approx(
        alg.relative_error(cert, alg.HeldOut.of(test_conf, safe))
    )
    assert alg.counterexamples(cert, held_edge) == alg.counterexamples(cert, alg.HeldOut.of(test_conf, safe))
    assert 0.0 <= alg.relative_error(cert, held_edge) <= 1.0


def test_epsnet_guarantee_holds_in_distribution_and_control_is_worse():
    """Theorem 4.3 on a known quality-space distribution: rel. error <= eps in (almost) all runs."""
    rng = np.random.default_rng(5)
    eps, p_min, delta = 0.1, 0.5, 0.01
    s = alg.certification_size(eps, p_min, delta)

    def draw(n):
        conf = rng.beta(5, 1, n)
        return conf, rng.exponential(0.1, n) * (1 + 2 * conf)

    held = alg.HeldOut.of(*draw(200_000))
    rel_net, rel_control = [], []
    for _ in range(30):
        conf, rob = draw(s)
        rel_net.append(alg.relative_error(alg.Certificate.fit(conf, rob, p_min, delta), held))
        rel_control.append(alg.relative_error(alg.Certificate.fit(conf[: s // 50], rob[: s // 50], p_min, delta), held))
    assert max(rel_net) <= eps
    assert np.median(rel_net) < eps / 2
    assert np.median(rel_control) > 3 * np.median(rel_net)


# ----------------------------------------------------------------------------- oracles


def _linear(d=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(10, d, generator=g, dtype=torch.float64), torch.randn(10, generator=g, dtype=torch.float64)


def test_linear_radius_is_exact():
    w, b = _linear()
    x = torch.rand(200, 20, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rob = alg.linear_radius(w, b, x)
    logits = x @ w.T + b
    label = logits.argmax(1)
    assert torch.all(rob > 0)
    flipped_any = torch.zeros(len(x), dtype=torch.bool)
    for j in range(10):  # the l_inf ball's worst point against class j is a vertex: -r sign(w_c - w_j)
        direction = -torch.sign(w[label] - w[j])
        inside = ((x + (rob * (1 - 1e-6))[:, None] * direction) @ w.T + b).argmax(1)
        assert torch.all(inside == label)  # nothing flips strictly inside the radius
        outside = ((x + (rob * (1 + 1e-6))[:, None] * direction) @ w.T + b).argmax(1)
        flipped_any |= outside != label
    assert torch.all(flipped_any)  # and the worst vertex just outside flips the label
    # the run-time check agrees, and catches a radius that is 10% off either way
    assert alg.radius_violations(w, b, x, rob) == 0
    assert alg.radius_violations(w, b, x, rob * 0.9) == len(x)
    assert alg.radius_violations(w, b, x, rob * 1.1) == len(x)


def test_oracles_bracket_the_exact_radius_on_a_linear_model():
    w, b = _linear(d=16, seed=3)
    net = nn.Sequential(nn.Linear(16, 10)).double()
    with torch.no_grad():
        net[0].weight.copy_(w)
        net[0].bias.copy_(b)
    x = torch.rand(300, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.2
    exact = alg.linear_radius(w, b, x)
    pgd = alg.pgd_radius(net, x, eps=2.0, alpha=0.002, steps=1000)
    ibp = alg.ibp_radius(net, x, max_radius=2.0, steps=12)
    assert torch.all(pgd >= exact - 1e-9)  # PGD finds real adversarial examples: an upper bound
    assert torch.all(ibp <= exact + 1e-9)  # interval bounds are sound: a lower bound
    assert torch.all(exact - ibp <= 2.0 / 2**12 + 1e-9)  # and exact up to bisection on a linear model
    hit = torch.isfinite(pgd)
    assert hit.float().mean() > 0.9 and torch.median(pgd[hit] - exact[hit]) < 0.1


def test_ibp_radius_is_sound_on_an_mlp():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
    x = torch.rand(100, 8)
    ibp = alg.ibp_radius(net, x, max_radius=1.0, steps=10)
    pgd = alg.pgd_radius(net, x, eps=1.0, alpha=0.004, steps=250)
    assert torch.all(ibp <= pgd + 1e-6)
    assert (ibp > 0).float().mean() > 0.5
    label = net(x).argmax(1)
    corners = torch.sign(torch.randn(400, 1, 8))  # random vertices of each certified ball never flip
    with torch.no_grad():
        probe = net((x[None] + ibp[None, :, None] * corners * (1 - 1e-4)).reshape(-1, 8)).argmax(1).view(400, -1)
    assert torch.all(probe == label[None])


def test_affine_layers_rejects_unsupported_modules():
    with pytest.raises(TypeError):
        alg.affine_layers(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)))


def test_noisy_resampler_stays_in_the_unit_box_and_is_seeded():
    pool = torch.rand(30, 5)
    draws = [torch.cat([b.clone() for b in alg.NoisyResampler(pool, 0.3, 7, 64).batches(500)]) for _ in range(2)]
    assert draws[0].shape == (500, 5)
    assert torch.equal(draws[0], draws[1])
    assert draws[0].min() >= 0 and draws[0].max() <= 1
    quiet = torch.cat([b.clone() for b in alg.NoisyResampler(pool, 0.0, 7, 64).batches(200)])
    assert all((quiet[i] == pool).all(1).any() for i in range(200))  # no noise: pure resampling of the pool


# ----------------------------------------------------------------------------- data


def _write_idx(path, array, code):
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    payload = header + array.astype(">u1" if code == 0x08 else ">i4").tobytes()
    (gzip.open if path.suffix == ".gz" else open)(path, "wb").write(payload)


def test_mnist_idx_loader_reads_the_official_layout(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    mnist = tmp_path / "data" / "mnist"  # data.mnist_dir is relative to <PAPERLINE_ROOT>/data/
    raw = mnist / "MNIST" / "raw"
    raw.mkdir(parents=True)
    imgs = rng.integers(0, 256, (5, 28, 28)).astype(np.uint8)
    labels = rng.integers(0, 10, 5).astype(np.uint8)
    _write_idx(raw / "train-images-idx3-ubyte.gz", imgs, 0x08)
    _write_idx(raw / "train-labels-idx1-ubyte", labels, 0x08)
    x, y = images.load_mnist_idx(mnist)
    assert x.shape == (5, 28, 28) and x.dtype == np.float32
    np.testing.assert_allclose(x, imgs / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)
    # prepare() takes a user-supplied MNIST folder in place of digits
    from models.pag_cert import pipeline

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    cfg = SPEC.make_config("smoke", {"data.source": "mnist", "data.mnist_dir": "mnist"})
    (tmp_path / "prepared").mkdir()
    ref = pipeline.prepare(cfg, tmp_path / "prepared")
    assert ref.meta["side"] == 28 and ref.meta["train"] + ref.meta["pool"] + ref.meta["test"] == 5
    (raw / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError):
        images.read_idx(raw / "bad")


def test_nearest_upsampling_copies_pixels_into_blocks():
    x = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    up = images.resize_nearest(x, 32)
    assert up.shape == (2, 32, 32)
    np.testing.assert_array_equal(up[:, ::4, ::4], x)
    np.testing.assert_array_equal(up.reshape(2, 8, 4, 8, 4).min((2, 4)), up.reshape(2, 8, 4, 8, 4).max((2, 4)))


def test_split_is_a_seeded_partition():
    a, b = images.split_labels(100, 0.5, 0.25, seed=3), images.split_labels(100, 0.5, 0.25, seed=3)
    np.testing.assert_array_equal(a, b)
    assert np.bincount(a).tolist() == [50, 25, 25]


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"guarantee.epsilon": 0.0})
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"data.train_frac": 0.8, "data.pool_frac": 0.3})
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"data.source": "mnist"})  # needs data.mnist_dir


# ----------------------------------------------------------------------------- pipeline at smoke scale


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert ref.source == "real" and "load_digits" in ref.provenance and ref.meta["dataset"] == "digits"
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert set(artifacts.history) == {"linear_d64", "linear_d256", "mlp_d64"}
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert not metrics.non_finite()
    assert v["method/samples"] == 1_205 and v["baseline/samples"] == 24
    for setting in ("linear_d64", "linear_d256", "mlp_pgd", "mlp_ibp"):
        for label in ("method", "baseline"):
            assert 0.0 <= v[f"{label}/{setting}/rel_err_median"] <= v[f"{label}/{setting}/rel_err_max"] <= 1.0
            assert 0.0 <= v[f"{label}/{setting}/pool_pass_rate"] <= 1.0
    assert v["classifier/linear_d64/test_acc"] > 0.5
    assert result.sane, result.sanity
    assert {"samples", "linear_d64/rel_err_median", "mlp_pgd/pass_rate"} <= set(result.figures)
    assert result.statement and result.verdict in ("holds", "fails", "inconclusive")
    assert [c.name for c in result.criteria] == [
        "linear_d256_pass_rate",
        "linear_d256_rel_err_median",
        "mlp_pgd_pass_rate",
    ]
    rate = result.criterion("linear_d256_pass_rate")  # 2 smoke runs: a Clopper-Pearson interval over 2 trials
    assert (
        rate.n_units == 2 and rate.interval == "clopper-pearson" and rate.estimate == v["method/linear_d256/pass_rate"]
    )
    runs = [v[f"method/linear_d256/run{r}/rel_err"] for r in range(2)]
    assert result.criterion("linear_d256_rel_err_median").estimate == pytest.approx(np.median(runs))
    assert len(metrics.figures) == 3 and all(p.is_file() and p.suffix == ".png" for p in metrics.figures)
    model = SPEC.module().load_model(cfg, artifacts.model_dir)
    assert isinstance(model, nn.Module)
    assert model(torch.rand(3, 64)).shape == (3, 10)
    with torch.no_grad():
        assert math.isfinite(float(model(torch.rand(1, 64)).sum()))


def hand_built_metrics(rel_errors: dict[str, list[float]]):
    """The metrics claim reads: per-run held-out relative errors per setting, aggregates from them, passing checks."""
    from models.base import Metrics

    eps = SPEC.make_config("default").guarantee.epsilon
    values = {
        "method/samples": 14_953.0,
        "baseline/samples": 299.0,
        "check/linear_flip_errors": 0.0,
        "check/linear_pgd_below_exact": 0.0,
        "check/linear_ibp_above_exact": 0.0,
        "check/mlp_ibp_above_pgd": 0.0,
    }
    for setting, errors in rel_errors.items():
        for label, scale in (("method", 1.0), ("baseline", 10.0)):  # the control: 10x the error
            rel = np.minimum(np.array(errors) * scale, 1.0)
            for where in ("", "pool_"):
                values[f"{label}/{setting}/{where}pass_rate"] = float(np.mean(rel <= eps))
                values[f"{label}/{setting}/{where}rel_err_median"] = float(np.median(rel))
                values[f"{label}/{setting}/{where}rel_err_max"] = float(rel.max())
                values[f"{label}/{setting}/{where}mass_above_kappa_max_min"] = 0.1
            values[f"{label}/{setting}/bound_monotone"] = 1.0
        for r, e in enumerate(errors):
            values[f"method/{setting}/run{r}/rel_err"] = e
    return Metrics(values)


def test_claim_criteria_are_intervals_over_certification_runs():
    cfg = SPEC.make_config("default")
    eps = cfg.guarantee.epsilon
    assert cfg.sampling.repetitions == 20 and cfg.mlp.repetitions == 10
    good = [0.005 * (1 + r % 4) for r in range(20)]  # all <= eps / 2 = 0.025: every run passes
    result = SPEC.module().claim(
        cfg,
        hand_built_metrics(
            {"linear_d64": good, "linear_d256": good, "linear_d1024": good, "mlp_pgd": good[:10], "mlp_ibp": good[:10]}
        ),
    )
    assert result.sane, result.sanity
    assert {c.name for c in result.criteria} == {
        "linear_d256_pass_rate",
        "linear_d256_rel_err_median",
        "linear_d1024_pass_rate",
        "linear_d1024_rel_err_median",
        "mlp_pgd_pass_rate",
    }
    median = result.criterion("linear_d1024_rel_err_median")
    assert median.estimate == pytest.approx(0.0125) and median.high <= 0.02 and median.state == "holds"
    # 20/20 passing runs: the pass probability's 95 % interval [0.83, 1] straddles 0.95, so it stays open.
    rate = result.criterion("linear_d256_pass_rate")
    assert rate.estimate == 1.0 and rate.low == pytest.approx(0.8316, abs=1e-3) and rate.state == "inconclusive"
    assert result.verdict == "inconclusive"

    # Run errors spread around eps / 2 (median 0.025 exactly): the median criterion straddles its threshold.
    around = [0.015, 0.035] * 10
    result = SPEC.module().claim(
        cfg,
        hand_built_metrics(
            {
                "linear_d64": good,
                "linear_d256": around,
                "linear_d1024": good,
                "mlp_pgd": good[:10],
                "mlp_ibp": good[:10],
            }
        ),
    )
    median = result.criterion("linear_d256_rel_err_median")
    assert median.low < eps / 2 < median.high and median.state == "inconclusive"

    # The MLP-PGD certificate failing in 8 of 10 runs: the pass rate's interval lies below 0.9, so the claim fails.
    failing = [0.2] * 8 + [0.01] * 2
    result = SPEC.module().claim(
        cfg,
        hand_built_metrics(
            {"linear_d64": good, "linear_d256": good, "linear_d1024": good, "mlp_pgd": failing, "mlp_ibp": good[:10]}
        ),
    )
    mlp = result.criterion("mlp_pgd_pass_rate")
    assert mlp.estimate == pytest.approx(0.2) and mlp.high < 0.9 and mlp.state == "fails"
    assert result.verdict == "fails"
