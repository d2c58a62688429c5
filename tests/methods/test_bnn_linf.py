"""bnn_linf: binary layers, the L_{1,inf} norm and its smooth max, bounds, noise, loaders, pipeline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.base import ValidationError
from models.bnn_linf import SPEC
from models.bnn_linf.config import Config, NetConfig
from models.bnn_linf.data import (
    add_image_noise,
    cut_windows,
    distort_ecg,
    load_ecg_windows,
    load_image_folder,
    make_ecg,
    split_groups,
)
from models.bnn_linf.networks import (
    BinaryConv,
    BinaryResNet,
    SignSTE,
    linf_penalty,
    network_linf_bound,
    row_l1_norms,
    smooth_max,
    spectral_norm,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ----------------------------------------------------------------------------- binary layers


def test_sign_ste_forward_and_clipped_gradient():
    x = torch.tensor([-2.0, -1.0, -0.3, 0.0, 0.4, 1.0, 1.5], requires_grad=True)
    y = SignSTE.apply(x)
    assert y.tolist() == [-1, -1, -1, 1, 1, 1, 1]
    y.backward(torch.arange(1.0, 8.0))
    assert x.grad.tolist() == [0, 2, 3, 4, 5, 6, 0]  # upstream gradient where |x| <= 1, else 0


@pytest.mark.parametrize("dims", [1, 2])
def test_binary_weights_are_plus_minus_alpha_and_ste_gradients_reach_latent_weights(dims):
    layer = BinaryConv(dims, channels=4, kernel=3)
    w = layer.binary_weight().detach()
    for i in range(4):
        values = torch.unique(w[i].abs())
        assert torch.allclose(values, layer.alpha[i].abs().detach().expand_as(values))
        assert set(torch.unique(torch.sign(w[i])).tolist()) <= {-1.0, 1.0}
    x = torch.randn((2, 4) + (9,) * dims)
    (layer(x) ** 2).sum().backward()
    assert layer.weight.grad.abs().sum() > 0 and layer.alpha.grad.abs().sum() > 0


def unrolled(layer: BinaryConv, size: int) -> torch.Tensor:
    """The conv's linear map alpha*B as an explicit matrix (outputs x inputs), via the Jacobian."""
    shape = (1, layer.weight.shape[1]) + (size,) * layer.dims
    conv = F.conv1d if layer.dims == 1 else F.conv2d
    weight = layer.binary_weight().detach()

    def linear(z):
        return conv(z.reshape(shape), weight, padding=layer.padding).flatten()

    return torch.autograd.functional.jacobian(linear, torch.zeros(shape).flatten())


@pytest.mark.parametrize("dims,kernel", [(1, 3), (1, 5), (2, 3)])
def test_linf_norm_of_unrolled_conv_is_fan_in_times_max_alpha(dims, kernel):
    layer = BinaryConv(dims, channels=3, kernel=kernel)
    with torch.no_grad():
        layer.alpha.copy_(torch.tensor([0.3, -0.7, 0.5]))
    M = unrolled(layer, size=7)
    fan_in = 3 * kernel**dims
    assert M.abs().sum(1).max().item() == pytest.approx(fan_in * 0.7, rel=1e-6)
    assert torch.allclose(row_l1_norms(layer), fan_in * layer.alpha.abs().detach())
    # The l_inf -> l_inf operator norm is attained: z = sign(row) gives exactly the max row l1.
    row = M.abs().sum(1).argmax()
    assert (M @ torch.sign(M[row])).abs().max().item() == pytest.approx(fan_in * 0.7, rel=1e-6)


def test_smooth_max_bounds_and_limit():
    v = torch.tensor([1.0, 3.0, 2.5, -4.0])
    for tau in (2.0, 0.5, 0.1):
        s = smooth_max(v, tau).item()
        assert 3.0 <= s <= 3.0 + tau * math.log(4) + 1e-6
    assert smooth_max(v, 1e-4).item() == pytest.approx(3.0, abs=1e-3)
    assert smooth_max(v, 0.5).item() > smooth_max(v, 0.1).item()  # shrinks towards the max


def test_linf_penalty_gradient_is_the_closed_form_and_reaches_alpha_only():
    net = BinaryResNet(1, 3, NetConfig(channels=4, blocks=2, kernel=3, stem_kernel=3, stem_stride=1))
    tau = 0.3
    linf_penalty(net, tau).backward()
    for block in net.blocks:
        fan_in = block.fan_in
        rows = fan_in * block.alpha.detach().abs()
        expected = fan_in * torch.softmax(rows / tau, 0) * torch.sign(block.alpha.detach())
        assert torch.allclose(block.alpha.grad, expected, atol=1e-6)
        assert block.weight.grad is None  # |sign(W)| = 1 does not depend on W


def test_spectral_norm_matches_svd():
    layer = BinaryConv(1, channels=5, kernel=3)
    M = layer.binary_weight().detach().flatten(1).numpy()
    assert spectral_norm(layer).item() == pytest.approx(np.linalg.svd(M, compute_uv=False)[0], rel=1e-5)


def _trained_stats_net(dims: int = 1) -> BinaryResNet:
    net = BinaryResNet(dims, 3, NetConfig(channels=6, blocks=2, kernel=3, stem_kernel=5, stem_stride=2), stem_pool=2)
    with torch.no_grad():
        for _ in range(3):  # give the stem BN non-trivial running statistics
            net(torch.randn((16, 1) + (40,) * dims) * 0.2)
        for block in net.blocks:
            block.alpha.mul_(3.0)
    return net.eval()


def test_network_bound_dominates_worst_case_gain_of_relaxed_network():
    net = _trained_stats_net()
    net.relaxed = True
    bound = network_linf_bound(net)
    eps = 1e-3
    x = torch.randn(8, 1, 40)
    worst = 0.0
    for _ in range(5):  # random starts + sign-gradient ascent on ||f(x+e) - f(x)||_inf
        e = (torch.rand_like(x) * 2 - 1) * eps
        for _ in range(10):
            e.requires_grad_(True)
            gap = (net(x + e) - net(x)).abs().amax(1).sum()
            (grad,) = torch.autograd.grad(gap, e)
            e = (e.detach() + 0.25 * eps * grad.sign()).clamp(-eps, eps)
        with torch.no_grad():
            worst = max(worst, ((net(x + e) - net(x)).abs().amax(1) / e.abs().flatten(1).amax(1)).max().item())
    assert 0 < worst <= bound


def test_network_bound_stem_factor_is_the_exact_stem_operator_norm():
    net = _trained_stats_net()
    with torch.no_grad():
        for block in net.blocks:
            block.alpha.zero_()  # blocks contribute 1 + 0; head row l1 is known
    stem = lambda z: net.stem_norm(net.stem(z.reshape(1, 1, 40))).flatten()
    J = torch.autograd.functional.jacobian(stem, torch.zeros(40))
    head = net.head.weight.abs().sum(1).max().item()
    assert network_linf_bound(net) == pytest.approx(J.abs().sum(1).max().item() * head, rel=1e-5)


# ----------------------------------------------------------------------------- data and noise


def test_windows_and_record_split_keep_records_apart():
    records = np.arange(6 * 20, dtype=float).reshape(6, 20)
    X, record_of = cut_windows(records, window=8, hop=4)
    assert X.shape == (6 * 4, 8) and np.array_equal(X[5], records[1, 4:12])
    labels = np.repeat([0, 1, 2], 2)[record_of]
    test = split_groups(record_of, labels, 0.5, seed=3)
    assert not set(record_of[test]) & set(record_of[~test])
    assert sorted(np.unique(labels[test])) == [0, 1, 2]


def test_powerline_noise_is_a_50hz_tone_at_the_requested_level():
    fs, level = 125, 0.4
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 500)).astype(np.float32)
    chunk_std = X.reshape(-1).std(ddof=1)
    e = (distort_ecg(X, "powerline", level, fs, chunk=4, seed=1) - X).reshape(-1)
    spectrum = np.abs(np.fft.rfft(e))
    freqs = np.fft.rfftfreq(len(e), 1 / fs)
    assert freqs[spectrum.argmax()] == pytest.approx(50, abs=0.5)
    # A sine of amplitude a has RMS a / sqrt(2) (50 Hz at 125 Hz cycles through 5 evenly spaced phases).
    assert np.sqrt(np.mean(e**2)) == pytest.approx(level * chunk_std / math.sqrt(2), rel=0.02)


def test_baseline_wander_is_slow_and_motion_artifacts_are_bursts():
    fs = 125
    X = np.random.default_rng(1).normal(size=(10, 500)).astype(np.float32)
    e = (distort_ecg(X, "baseline", 0.5, fs, chunk=10, seed=2) - X).reshape(-1)
    power = np.abs(np.fft.rfft(e)) ** 2
    freqs = np.fft.rfftfreq(len(e), 1 / fs)
    assert power[freqs <= 2].sum() > 0.95 * power.sum()
    m = distort_ecg(X, "motion", 0.5, fs, chunk=10, seed=2) - X
    touched = np.mean(np.abs(m) > 0)
    assert 0 < touched < 0.5
    # like every other noise kind, motion noise grows linearly with the level (same bursts, same seed)
    big = distort_ecg(X, "motion", 1.0, fs, chunk=10, seed=2) - X
    assert np.abs(big).sum() / np.abs(m).sum() == pytest.approx(2.0, rel=0.01)


def test_image_noise_levels():
    rng = np.random.default_rng(0)
    images = np.full((200, 8, 8), 0.5)
    g = add_image_noise(images, "gaussian", 0.1, rng) - images
    assert g.std() == pytest.approx(0.1, rel=0.05)
    sp = add_image_noise(images, "salt_pepper", 0.2, rng)
    hit = sp != 0.5
    assert hit.mean() == pytest.approx(0.2, abs=0.02) and set(np.unique(sp[hit])) == {0.0, 1.0}


def test_loaders_read_the_official_layouts(tmp_path, monkeypatch):
    np.savez(tmp_path / "w.npz", X=np.ones((5, 12)), y=np.array([0, 1, 2, 1, 0]), record=np.array([0, 0, 1, 1, 2]))
    X, y, groups = load_ecg_windows(tmp_path / "w.npz")
    assert X.dtype == np.float32 and X.shape == (5, 12) and y.tolist() == [0, 1, 2, 1, 0] and groups[3] == 1
    np.savez(tmp_path / "bad.npz", data=np.ones(3))
    with pytest.raises(ValueError, match="'X'"):
        load_ecg_windows(tmp_path / "bad.npz")
    # data.ecg_npz names such a file relative to <PAPERLINE_ROOT>/data/.
    (tmp_path / "data" / "ecg").mkdir(parents=True)
    records = np.repeat(np.arange(6), 4)
    window = int(Config.for_scale("smoke").data.window_seconds * Config.for_scale("smoke").data.sampling_rate)
    signal = np.sin(np.linspace(0, 40, window))[None] * (1 + records[:, None] % 3)
    np.savez(tmp_path / "data" / "ecg" / "w.npz", X=signal, y=records % 3, record=records)
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    ecg = make_ecg(Config.for_scale("smoke", {"data.ecg_npz": "ecg/w.npz"}).data, seed=0)
    assert len(ecg["y_train"]) + len(ecg["y_test"]) == 24 and ecg["X_train"].shape[1] == window

    from PIL import Image

    for name, value in (("glioma", 40), ("notumor", 200)):
        (tmp_path / "Training" / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((20, 30, 3), value, dtype=np.uint8)).save(tmp_path / "Training" / name / f"{i}.jpg")
    images, labels, classes = load_image_folder(tmp_path / "Training", size=16)
    assert classes == ["glioma", "notumor"] and images.shape == (4, 16, 16) and labels.tolist() == [0, 0, 1, 1]
    assert images[0].mean() == pytest.approx(40 / 255, abs=0.02) and images[3].mean() == pytest.approx(
        200 / 255, abs=0.02
    )


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.records_per_class": 1})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.heart_rate_bands": [[70.0, 60.0], [90.0, 100.0]]})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"lambda_linf": -1.0})
    assert Config.for_scale("paper").ecg_net.blocks == 8


# ----------------------------------------------------------------------------- pipeline


def test_smoke_pipeline_end_to_end(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert {"ecg.npz", "digits.npz"} <= set(ref.files)
    with np.load(ref.file("ecg.npz")) as ecg:
        assert ecg["X_test_noisy"].shape == (1, 1) + ecg["X_test"].shape
        assert not set(ecg["record_train"]) & set(ecg["record_test"])
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert {"method", "baseline", "baseline_spectral", "method_digits"} <= set(artifacts.history)
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    assert not metrics.non_finite()
    for variant in ("method", "baseline", "baseline_spectral"):
        for key in ("ecg_acc_clean", "ecg_acc_noisy", "ecg_noise_gain", "ecg_bound_linf", "digits_acc_clean"):
            assert 0 <= metrics[f"{variant}/{key}"] < math.inf
        assert metrics[f"{variant}/ecg_acc_white_0.5"] <= 1
    assert SPEC.primary_metric in metrics.values
    assert len(metrics.figures) >= 4 and all(p.suffix == ".png" and p.stat().st_size > 0 for p in metrics.figures)
    assert result.sane and result.verdict in ("holds", "fails", "inconclusive")
    names = {
        "ecg_noisy_gain_pts",
        "ecg_clean_drop_pts",
        "ecg_noise_gain_vs_plain",
        "ecg_noise_gain_vs_spectral",
        "ecg_bound_linf_vs_plain",
        "ecg_bound_linf_vs_spectral",
    }
    assert {c.name for c in result.criteria} == names
    gain = result.criterion("ecg_noisy_gain_pts")  # one smoke seed: a point estimate, no interval
    assert gain.n_units == 1 and gain.state == "inconclusive"
    assert gain.estimate == pytest.approx(
        100 * (metrics["method/seed0/ecg_acc_noisy"] - metrics["baseline/seed0/ecg_acc_noisy"])
    )
    assert metrics["method/seed0/ecg_acc_noisy"] == pytest.approx(metrics["method/ecg_acc_noisy"])
    assert "ecg_log10_bound_ratio_vs_plain" in result.figures

    net = SPEC.module().load_model(cfg, tmp_path / "outputs" / SPEC.slug / "model")
    with np.load(ref.file("ecg.npz")) as ecg:
        logits = net(torch.from_numpy(ecg["X_test"][:3]).unsqueeze(1))
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    for block in net.blocks:  # a deployed DBNN still has two weight values per output channel
        w = block.binary_weight().detach().flatten(1)
        assert all(len(torch.unique(row.abs())) == 1 for row in w)


def hand_built_metrics(cfg: Config, per_seed: dict[str, dict[str, list[float]]]):
    """Metrics as evaluate writes them, from per-seed ECG numbers per variant (means for the aggregate keys)."""
    from models.base import Metrics

    values = {}
    for variant, rows in per_seed.items():
        for metric, seeds in rows.items():
            values[f"{variant}/ecg_{metric}"] = float(np.mean(seeds))
            for k, x in enumerate(seeds):
                values[f"{variant}/seed{k}/ecg_{metric}"] = x
        values[f"{variant}/ecg_acc_top_level"] = values[f"{variant}/ecg_acc_noisy"] - 0.05
        values[f"{variant}/ecg_bound_spectral"] = values[f"{variant}/ecg_bound_network"] = 1.0
        values[f"{variant}/digits_acc_clean"] = values[f"{variant}/digits_acc_noisy"] = 0.9
    return Metrics(values)


def _seeds(acc_noisy, acc_clean, noise_gain, bound_linf):
    return {"acc_noisy": acc_noisy, "acc_clean": acc_clean, "noise_gain": noise_gain, "bound_linf": bound_linf}


def test_claim_criteria_are_intervals_over_paired_seeds():
    cfg = Config.for_scale("default")
    assert cfg.n_seeds == 3
    plain = _seeds([0.80, 0.70, 0.75], [0.95, 0.96, 0.94], [2.0, 2.2, 2.1], [50.0, 60.0, 55.0])
    spectral = _seeds([0.80, 0.72, 0.74], [0.95, 0.95, 0.95], [1.8, 1.9, 2.0], [40.0, 45.0, 50.0])
    # Clear win: every seed +5 pts noisy, no clean drop, lower gain and bound than both comparators.
    clear = _seeds([0.85, 0.75, 0.80], [0.95, 0.96, 0.94], [1.0, 1.1, 1.05], [5.0, 6.0, 5.5])
    result = SPEC.module().claim(
        cfg, hand_built_metrics(cfg, {"baseline": plain, "baseline_spectral": spectral, "method": clear})
    )
    gain = result.criterion("ecg_noisy_gain_pts")
    assert [gain.low, gain.estimate, gain.high] == pytest.approx([5.0] * 3)  # identical per-seed gains: zero width
    assert gain.state == "holds" and gain.n_units == 3 and gain.interval == "t"
    assert result.criterion("ecg_clean_drop_pts").state == "holds"
    assert result.criterion("ecg_bound_linf_vs_spectral").estimate == pytest.approx(5.5 - 45.0)
    assert result.verdict == "holds" and result.sane

    # Straddling: +6, -2, +2 pts (mean 2.0, the threshold) -> the noisy-gain criterion is inconclusive.
    straddle = dict(clear, acc_noisy=[0.86, 0.68, 0.77])
    result = SPEC.module().claim(
        cfg, hand_built_metrics(cfg, {"baseline": plain, "baseline_spectral": spectral, "method": straddle})
    )
    gain = result.criterion("ecg_noisy_gain_pts")
    assert gain.low < 2.0 < gain.high and gain.state == "inconclusive"
    assert result.verdict == "inconclusive"

    # A consistent clean-accuracy drop of 5 pts and a higher noise gain than the plain BNN on every seed fail.
    worse = dict(clear, acc_clean=[0.90, 0.91, 0.89], noise_gain=[3.0, 3.1, 3.2])
    result = SPEC.module().claim(
        cfg, hand_built_metrics(cfg, {"baseline": plain, "baseline_spectral": spectral, "method": worse})
    )
    assert result.criterion("ecg_clean_drop_pts").state == "fails"
    assert result.criterion("ecg_noise_gain_vs_plain").state == "fails"
    assert result.verdict == "fails"
