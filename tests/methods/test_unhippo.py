"""unhippo: HiPPO-LegS / UnHiPPO matrices against closed forms, the Kalman filter, kernels, data, pipeline."""

from __future__ import annotations

import json
import math
import os
import wave

import numpy as np
import pytest
import torch
from numpy.polynomial import legendre

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import Metrics, ValidationError  # noqa: E402
from models.common.lightning import set_threads  # noqa: E402
from models.unhippo import SPEC  # noqa: E402
from models.unhippo import algorithm as al  # noqa: E402
from models.unhippo import data as data_mod  # noqa: E402
from models.unhippo.config import Config  # noqa: E402
from models.unhippo.networks import FixedSSMLayer, SSMClassifier, ssm_matrices  # noqa: E402

F64 = torch.float64
set_threads()  # as the pipeline does: no OpenMP oversubscription on the shared cores


# ----------------------------------------------------------------------------- HiPPO-LegS and the data-free matrices


def test_hippo_legs_matches_its_entrywise_definition():
    n = 7
    a, b = al.hippo_legs(n)
    for i in range(n):
        assert b[i] == pytest.approx(math.sqrt(2 * i + 1))
        for k in range(n):
            expected = math.sqrt(2 * i + 1) * math.sqrt(2 * k + 1) if i > k else (i + 1 if i == k else 0.0)
            assert a[i, k].item() == pytest.approx(expected, abs=1e-14)


@pytest.mark.parametrize("n", [4, 16, 64])
def test_data_free_matrix_is_hippo_fed_with_its_own_reconstruction(n):
    a, b = al.hippo_legs(n)
    a0 = al.data_free_matrix(n)
    assert torch.allclose(a0, torch.outer(b, b) - a, atol=1e-12)  # A_H^T - I = B B^T - A_H
    q = al.legendre_endpoint_q(n)
    assert torch.allclose(b @ a0, 2 * q, rtol=1e-13)  # B^T A_0 = 2 Q^T


def test_q_is_the_endpoint_derivative_of_the_scaled_legendre_basis():
    n = 9
    q = al.legendre_endpoint_q(n).numpy()
    slope = np.array([legendre.legval(1.0, legendre.legder(np.eye(n)[i])) for i in range(n)])
    np.testing.assert_allclose(q, np.sqrt(2 * np.arange(n) + 1) * slope, rtol=1e-12)


@pytest.mark.parametrize("n", [16, 32, 64])
def test_regularised_matrix_is_stable_where_the_data_free_one_is_not(n):
    a0, ar = al.data_free_matrix(n), al.regularized_matrix(n)
    assert ar.dtype == F64
    assert torch.linalg.eigvals(a0).real.max().item() == pytest.approx(n - 1, abs=1e-8)
    assert torch.linalg.eigvals(ar).real.max().item() == pytest.approx(1.0, abs=1e-6)
    if n == 16:
        assert (torch.linalg.norm(ar - a0) / torch.linalg.norm(a0)).item() == pytest.approx(1.09, abs=0.01)


def test_regularised_matrix_solves_the_stacked_least_squares_problem():
    n = 12
    _, b = al.hippo_legs(n)
    q = al.legendre_endpoint_q(n)
    lhs = torch.cat([torch.eye(n, dtype=F64), b[None], q[None]])
    rhs = torch.cat([al.data_free_matrix(n), 2 * q[None], q[None]])
    ar = al.regularized_matrix(n)
    # Normal equations hold, and the answer agrees with numpy's independent solver.
    assert torch.allclose(
        lhs.T @ (lhs @ ar - rhs), torch.zeros(n, n, dtype=F64), atol=1e-8 * rhs.abs().max().item() ** 2
    )
    np.testing.assert_allclose(ar.numpy(), np.linalg.lstsq(lhs.numpy(), rhs.numpy(), rcond=None)[0], atol=1e-9)


# ----------------------------------------------------------------------------- discretisation


def test_expm_discretisation_solves_the_scale_invariant_ode():
    ar = al.regularized_matrix(6)
    t0, t1, t2 = (torch.tensor([v], dtype=F64) for v in (3.0, 4.0, 7.0))
    step = lambda s, e: al.discretize_unhippo(ar, s, e, "expm")[0]
    # Flow property in log-time, and dc/dt = (1/t) A c (central finite difference).
    assert torch.allclose(step(t1, t2) @ step(t0, t1), step(t0, t2), atol=1e-10)
    c0 = torch.randn(6, dtype=F64)
    h = 1e-5
    dc = (step(t0, t1 + h) @ c0 - step(t0, t1 - h) @ c0) / (2 * h)
    assert torch.allclose(dc, ar @ (step(t0, t1) @ c0) / t1, rtol=1e-6, atol=1e-8)


def test_bilinear_rules_match_their_formulas_and_converge_to_expm():
    n = 5
    a, b = al.hippo_legs(n)
    eye = torch.eye(n, dtype=F64)
    t = torch.tensor([10.0], dtype=F64)
    a_bar, b_bar = al.discretize_hippo(a, b, t, t + 1, "bilinear-lssl")
    inv = torch.linalg.inv(eye + a / (2 * 11.0))
    assert torch.allclose(a_bar[0], inv @ (eye - a / (2 * 11.0)), atol=1e-13)
    assert torch.allclose(b_bar[0], inv @ b / 11.0, atol=1e-13)
    ar = al.regularized_matrix(n)
    big = torch.tensor([2000.0], dtype=F64)
    exact = al.discretize_unhippo(ar, big, big + 1, "expm")
    for method in ("bilinear", "forward", "backward"):
        assert (al.discretize_unhippo(ar, big, big + 1, method) - exact).abs().max() < 1e-4


def test_legs_recursion_reconstructs_a_low_degree_polynomial():
    length, n = 1500, 8
    t = (np.arange(length) + 0.5) / length
    f = 1 - 3 * t + 2 * t**2
    c = al.hippo_legs_final_state(torch.from_numpy(f)[None], n).numpy()[0]
    error = (al.legendre_reconstruct(c, length) - f) ** 2
    assert error.mean() < 1e-3 and error[length // 4 :].mean() < 1e-4  # only the first steps' transient remains
    # B_H^T c is the reconstruction at the right end of the window (P_n(1) = 1).
    _, b = al.hippo_legs(n)
    assert float(b.numpy() @ c) == pytest.approx(legendre.legval(1.0, c * np.sqrt(2 * np.arange(n) + 1)), rel=1e-12)


# ----------------------------------------------------------------------------- Kalman filter


def reference_kalman(transitions, b, sigma2, q):
    """Textbook filter (P = (I - K b^T) P^-) with mean update m = A m + K (y - b^T A m)."""
    n = len(b)
    p = np.eye(n)
    out = []
    for a in transitions:
        pm = a @ p @ a.T + q * np.eye(n)
        k = pm @ b / (b @ pm @ b + sigma2)
        p = (np.eye(n) - np.outer(k, b)) @ pm
        out.append((k, p))
    return out


def test_kalman_filter_matches_the_textbook_filter_and_its_mean_recursion():
    rng = np.random.default_rng(0)
    n, steps, sigma2 = 4, 12, 0.7
    transitions = np.eye(n) + 0.2 * rng.standard_normal((steps, n, n))
    b = rng.standard_normal(n)
    a_bar, gain, cov = al.kalman_filter(torch.from_numpy(transitions), torch.from_numpy(b), sigma2, 0.3)
    ref = reference_kalman(transitions, b, sigma2, 0.3)
    for k in range(steps):
        np.testing.assert_allclose(gain[k].numpy(), ref[k][0], rtol=1e-9)
        np.testing.assert_allclose(cov[k].numpy(), ref[k][1], atol=1e-9)
    # Posterior mean: m_k = A_bar_k m_{k-1} + K_k y_k equals the predict/correct form.
    y = rng.standard_normal(steps)
    m_ssm = al.unroll(a_bar, gain, torch.from_numpy(y)).numpy()
    m = np.zeros(n)
    for k in range(steps):
        pred = transitions[k] @ m
        m = pred + ref[k][0] * (y[k] - b @ pred)
        np.testing.assert_allclose(m_ssm[k], m, atol=1e-10)


def test_scalar_kalman_filter_closed_form():
    sigma2, q = 2.0, 0.5
    _, gain, cov = al.kalman_filter(torch.ones(3, 1, 1, dtype=F64), torch.ones(1, dtype=F64), sigma2, q)
    p = 1.0
    for k in range(3):
        pm = p + q
        assert gain[k, 0].item() == pytest.approx(pm / (pm + sigma2))
        p = sigma2 * pm / (pm + sigma2)
        assert cov[k, 0, 0].item() == pytest.approx(p)


@pytest.mark.parametrize("sigma2", [1e-2, 1e6, 1e10])
def test_unhippo_covariances_stay_symmetric_positive_definite(sigma2):
    _, _, cov = al.unhippo_parameters(16, 100, sigma2)
    assert torch.equal(cov, cov.transpose(1, 2)) or (cov - cov.transpose(1, 2)).abs().max() < 1e-12 * cov.abs().max()
    assert torch.linalg.eigvalsh(cov).min() > 0


def test_observation_noise_limits():
    _, b = al.hippo_legs(8)
    # sigma^2 -> 0: the filter interpolates the observation, b^T m_k = y_k whatever m_{k-1}.
    a_bar, gain, _ = al.unhippo_parameters(8, 20, 1e-9)
    assert (b @ a_bar[5]).abs().max() < 1e-6 and (b @ gain[5]).item() == pytest.approx(1.0, abs=1e-6)
    # sigma^2 -> infinity: the data are ignored.
    _, gain_inf, _ = al.unhippo_parameters(8, 20, 1e30)
    assert gain_inf.abs().max() < 1e-20


def test_unlssl_channels_take_the_kalman_pair_at_their_truncated_logspaced_step():
    n, channels = 8, 5
    a_ch, k_ch = al.unlssl_parameters(n, 1.0, 100.0, channels, 1e6)
    a_bar, gain, _ = al.unhippo_parameters(n, 101, 1e6)
    steps = [1, 3, 10, 31, 100]  # floor(10 ** (c / 2)): 1, 3.16, 10, 31.6, 100 (truncated, not rounded)
    for c, s in enumerate(steps):
        assert torch.equal(a_ch[c], a_bar[s]) and torch.equal(k_ch[c], gain[s])


@pytest.mark.parametrize(("low", "high", "channels"), [(10, 1000, 128), (1, 100, 16), (1, 100, 128), (10, 1000, 7)])
def test_kalman_steps_equal_the_official_integer_logspace(low, high, channels):
    official = torch.logspace(np.log10(low), np.log10(high), channels, dtype=torch.long)  # layers.py, UnLSSLLayer
    assert torch.equal(al.kalman_steps(low, high, channels), official)


# ----------------------------------------------------------------------------- kernels and layers


def test_krylov_columns_are_matrix_powers_and_fft_conv_is_causal_convolution():
    g = torch.Generator().manual_seed(0)
    a = 0.3 * torch.randn(2, 5, 5, dtype=F64, generator=g)
    b = torch.randn(2, 5, dtype=F64, generator=g)
    kr = al.krylov(11, a, b)
    for l in (0, 1, 6, 10):
        assert torch.allclose(kr[..., l], (torch.linalg.matrix_power(a, l) @ b[..., None])[..., 0], atol=1e-12)
    k, x = torch.randn(13, dtype=F64, generator=g), torch.randn(13, dtype=F64, generator=g)
    assert np.allclose(al.causal_conv(k, x).numpy(), np.convolve(k.numpy(), x.numpy())[:13], atol=1e-12)


@pytest.mark.parametrize("kind", ["lssl", "unlssl"])
def test_krylov_fft_kernel_equals_the_unrolled_recurrence_in_float64(kind):
    a_bar, b_bar = ssm_matrices(kind, 32, 6, 2.0, 128.0, 1e8, 1.0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 128, dtype=F64, generator=g)
    readout = torch.randn(32, dtype=F64, generator=g)
    for c in range(6):
        conv = al.causal_conv(readout @ al.krylov(128, a_bar[c], b_bar[c]), x)
        rec = al.unroll(a_bar[c], b_bar[c], x) @ readout
        assert ((conv - rec).abs().max() / rec.abs().max()).item() < 1e-8


def test_fixed_ssm_layer_is_readout_of_the_recurrence():
    torch.manual_seed(0)
    a_bar, b_bar = ssm_matrices("unlssl", 8, 3, 2.0, 40.0, 1e6, 1.0)
    layer = FixedSSMLayer(a_bar, b_bar, length=40, latent=2)
    x = torch.randn(4, 3, 30)
    states = torch.stack([al.unroll(a_bar[c], b_bar[c], x[:, c].double()) for c in range(3)], 1).float()  # (b, h, t, n)
    y = torch.einsum("hmn,bhtn->bhmt", layer.C, states) + layer.D[None, :, :, None] * x[:, :, None, :]
    expected = layer.mix(torch.nn.functional.gelu(y).flatten(1, 2).transpose(1, 2)).transpose(1, 2)
    assert torch.allclose(layer(x), expected, atol=1e-4)


def test_classifier_is_causal_per_step_and_batch_independent():
    torch.manual_seed(0)
    net = SSMClassifier("lssl", 4, 32, layers=2, n=8, hidden=8, latent=1, dropout=0.0, min_t=2, max_t=32).eval()
    x = torch.randn(3, 32)
    with torch.no_grad():
        full = net(x)
        assert torch.allclose(net(x[:1]), full[:1], atol=1e-5)  # no batch statistics at evaluation
        assert full.shape == (3, 4)


# ----------------------------------------------------------------------------- E1: the bias/variance crossover


def test_unhippo_denoises_where_hippo_follows_the_noise():
    length, n = 400, 64
    t = np.arange(length)
    f = np.sin(6 * np.pi * t / length) * np.exp(-t / length)
    rng = np.random.default_rng(0)
    mse = {}
    for noise in (0.0, 0.3):
        y = torch.from_numpy(f + noise * rng.standard_normal((4, length)))
        for name, c in (("hippo", al.hippo_legs_final_state(y, n)), ("unhippo", al.unhippo_final_state(y, n, 1e10))):
            mse[name, noise] = np.mean((al.legendre_reconstruct(c.numpy(), length) - f) ** 2)
    assert mse["unhippo", 0.3] <= 0.5 * mse["hippo", 0.3]
    assert mse["hippo", 0.0] < mse["unhippo", 0.0]


# ----------------------------------------------------------------------------- data


def test_waveforms_are_balanced_unit_variance_and_noise_is_seeded():
    cfg = Config.for_scale("smoke").data
    arrays = data_mod.make_waveforms(cfg, seed=3)
    assert arrays["X_train"].shape == (cfg.n_train, cfg.length)
    assert np.bincount(arrays["y_test"]).tolist() == [cfg.n_test // 10] * 10
    assert arrays["X_train"].std() == pytest.approx(1.0)
    a = data_mod.noisy(arrays, "test", 0.5, seed=1)
    assert np.array_equal(a, data_mod.noisy(arrays, "test", 0.5, seed=1))
    assert (a - arrays["X_test"]).std() == pytest.approx(0.5, rel=0.1)
    assert not np.allclose(a - arrays["X_test"], 0.5 * (data_mod.noisy(arrays, "test", 1.0, seed=1) - arrays["X_test"]))
    train = data_mod.normalised(arrays, "train", 0.5, seed=1)
    assert abs(train.mean()) < 1e-5 and train.std() == pytest.approx(1.0, abs=1e-4)


def write_wav(path, samples):
    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(8000)
        fh.writeframes((np.asarray(samples) * 32767).astype("<i2").tobytes())


def test_fsd_loader_reads_the_release_layout_loops_and_crops(tmp_path, monkeypatch):
    fsd = tmp_path / "data" / "fsd"  # data.fsd_dir is relative to <PAPERLINE_ROOT>/data/
    rec = fsd / "recordings"
    rec.mkdir(parents=True)
    speakers = ["george", "jackson", "lucas", "nicolas", "theo"]
    for digit in range(2):
        for s in speakers:
            write_wav(rec / f"{digit}_{s}_0.wav", np.linspace(-0.5, 0.5, 3 if digit == 0 else 20))
    (rec / "README.txt").write_text("not audio")
    X, y, who = data_mod.load_fsd(fsd, length=8)
    assert X.shape == (10, 8) and sorted(set(y.tolist())) == [0, 1] and set(who) == set(speakers)
    short = X[list(y).index(0)]
    np.testing.assert_allclose(short[:3], short[3:6], atol=1e-12)  # a 3-sample clip is looped
    assert short[0] == pytest.approx(-0.5, abs=1e-4)
    split = data_mod.split_fsd(np.repeat(X, 3, 0), np.repeat(y, 3), np.repeat(who, 3), seed=0)
    assert [len(split[f"y_{s}"]) for s in data_mod.SPLITS] == [18, 6, 6]
    # prepare reads the folder named by data.fsd_dir (two more takes per speaker and digit).
    for digit in range(2):
        for s in speakers:
            for take in (1, 2):
                write_wav(rec / f"{digit}_{s}_{take}.wav", np.linspace(-0.5, 0.5, 12))
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    cfg = Config.for_scale(
        "smoke", {"data.fsd_dir": "fsd", "data.fsd_length": 8, "data.downsample": 1, "data.every_nth_clip": 1}
    )
    (tmp_path / "prepared").mkdir()
    ref = SPEC.module().prepare(cfg, tmp_path / "prepared")
    assert not ref.meta["synthetic"] and ref.meta["length"] == 8
    assert ref.meta["source"] == "real" and "Free Spoken Digit" in ref.meta["provenance"]
    assert [ref.meta[f"n_{s}"] for s in data_mod.SPLITS] == [18, 6, 6]


def write_release_tar(path, clips: dict[str, np.ndarray]) -> None:
    """A tar of a ``recordings/`` folder, the layout of the committed ``fsdd/recordings.tar``."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        folder = tarfile.TarInfo("recordings")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, samples in clips.items():
            buffer = io.BytesIO()
            with wave.open(buffer, "wb") as fh:
                fh.setnchannels(1)
                fh.setsampwidth(2)
                fh.setframerate(8000)
                fh.writeframes((np.asarray(samples) * 32767).astype("<i2").tobytes())
            info = tarfile.TarInfo(f"recordings/{name}")
            info.size = buffer.tell()
            buffer.seek(0)
            tar.addfile(info, buffer)


def test_fsd_archive_loader_matches_the_folder_loader(tmp_path):
    rng = np.random.default_rng(0)
    clips = {
        f"{d}_{s}_{i}.wav": rng.uniform(-0.5, 0.5, 5 + 7 * d + i)
        for d in (3, 7)
        for s in ("jackson", "yweweler")
        for i in (0, 1)
    }
    write_release_tar(tmp_path / "recordings.tar", clips)
    (tmp_path / "release" / "recordings").mkdir(parents=True)
    for name, samples in clips.items():
        write_wav(tmp_path / "release" / "recordings" / name, samples)
    X, y, who = data_mod.load_fsd_archive(tmp_path / "recordings.tar", length=16)
    X2, y2, who2 = data_mod.load_fsd(tmp_path / "release", length=16)
    np.testing.assert_array_equal(X, X2)
    assert y.tolist() == y2.tolist() == [3, 3, 3, 3, 7, 7, 7, 7] and who.tolist() == who2.tolist()
    first = clips["3_jackson_0.wav"]  # 5 samples looped to 16, 16-bit quantised
    np.testing.assert_allclose(X[0], np.tile(first, 4)[:16], atol=2 / 32767)
    assert len(data_mod.load_fsd_archive(tmp_path / "recordings.tar", 16, every_nth=3)[1]) == 3


def test_downsampling_keeps_the_low_band_and_removes_what_would_alias():
    t = np.arange(4000) / 8000
    low, high = np.sin(2 * np.pi * 100 * t), np.sin(2 * np.pi * 1500 * t)  # new Nyquist at 8x: 500 Hz
    out = data_mod.downsample(np.stack([low, high]), 8)
    assert out.shape == (2, 500)
    inner = slice(50, 450)  # away from the filter's edge transients
    np.testing.assert_allclose(out[0, inner], low[::8][inner], atol=0.02)
    assert np.abs(out[1, inner]).max() < 0.02
    assert data_mod.downsample(low[None], 1) is not None and np.array_equal(
        data_mod.downsample(low[None], 1), low[None]
    )


def test_prepare_refuses_a_corrupt_recordings_archive(tmp_path, monkeypatch):
    from models.common.raw_data import COMMITTED, RawDataError

    (tmp_path / "data" / "raw" / "fsdd").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "fsdd" / "recordings.tar").write_bytes(b"not the recordings")
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "prepared").mkdir()
    with pytest.raises(RawDataError, match=COMMITTED["fsdd/recordings.tar"].sha256):
        SPEC.module().prepare(Config.for_scale("smoke"), tmp_path / "prepared")


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"unhippo.obs_sigma2_grid": [0.0]})
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"train.lr_grid": []})
    with pytest.raises(ValidationError, match="claim_train_noise"):
        Config.for_scale("smoke", {"claim_train_noise": 0.3})
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"train_noises": [0.5]})
    with pytest.raises(ValidationError, match="downsample"):
        Config.for_scale("smoke", {"data.fsd_length": 16, "data.downsample": 8})
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"data.source": "speech_commands"})
    paper = Config.for_scale("paper")
    assert paper.claim_train_noise in paper.train_noises and len(paper.eval_noises) == 14
    assert paper.data.fsd_length == 8000 and paper.data.downsample == 1 and paper.model.n == 128
    default = Config()
    assert default.model.n == 128 and default.train.n_seeds == 3 and default.data.source == "fsdd"
    assert set(default.eval_noises) <= set(paper.eval_noises) and set(default.train_noises) <= set(paper.train_noises)


# ----------------------------------------------------------------------------- the whole pipeline at smoke scale


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert ref.meta["length"] == 100 and not ref.meta["synthetic"] and ref.meta["source"] == "real"
    assert "recordings.tar" in ref.meta["provenance"] and [ref.meta[f"n_{s}"] for s in data_mod.SPLITS] == [180, 60, 60]
    artifacts = steps.train(SPEC, cfg, tmp_path)
    # Selection fits (lr per arm, then sigma^2) are the seed-0 runs at the claim noise; the clean runs reuse the choice.
    tn = cfg.claim_train_noise
    chosen = json.loads((tmp_path / "outputs" / "unhippo" / "model" / "chosen.json").read_text())["chosen"]
    assert set(artifacts.history) == {
        f"baseline_train{tn:g}_seed0_lr0.01",
        f"method_train{tn:g}_seed0_lr0.01_s21e+06",
        f"method_train{tn:g}_seed0_lr0.01_s21e+04",
        "baseline_train0_seed0_lr0.01",
        f"method_train0_seed0_lr0.01_s2{chosen['method']['obs_sigma2']:.0e}",
    }
    assert all(math.isfinite(r["train/loss"]) for recs in artifacts.history.values() for r in recs if "train/loss" in r)
    assert all(
        0 <= artifacts.summary[f"final/{a}_train0_seed0/best_epoch"] < cfg.train.max_epochs
        for a in ("baseline", "method")
    )
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    for arm in ("method", "baseline"):
        for train_noise in cfg.train_noises:
            for en in cfg.eval_noises:
                assert 0.0 <= v[f"{arm}/acc_train{train_noise:g}_eval{en:g}"] <= 1.0
    assert v["maths/max_real_eig_A0"] == pytest.approx(cfg.model.n - 1)
    assert v["method/chosen_sigma2_log10"] in (4.0, 6.0) and v["method/chosen_lr"] == 0.01
    assert v[f"data/snr_db_noise{tn:g}"] == pytest.approx(20 * math.log10(ref.meta["signal_rms_train"] / tn), abs=1e-3)
    assert all(result.sanity.values()), result.sanity
    assert {c.name for c in result.criteria} == {"acc_noisy_gain_pt", "acc_clean_gap_pt"}
    gain = result.criterion("acc_noisy_gain_pt")
    assert gain.estimate == pytest.approx(100 * (v["method/acc_noisy"] - v["baseline/acc_noisy"]))
    assert gain.n_units == cfg.train.n_seeds == 1 and gain.state == "inconclusive"  # one seed: no interval
    assert metrics.unit("acc_clean", "method").as_dict()["seed0"] == pytest.approx(v["method/acc_clean"])
    assert "recon_mse_ratio_unhippo_over_hippo" in result.figures
    assert {p.name for p in metrics.figures} >= {
        "accuracy_vs_eval_noise.png",
        "selection.png",
        "reconstruction_mse.png",
    }
    assert json.loads((tmp_path / "outputs" / "unhippo" / "claim.json").read_text())["verdict"] == result.verdict
    model = SPEC.module().load_model(cfg, tmp_path / "outputs" / "unhippo" / "model")
    assert model(torch.zeros(2, 100)).shape == (2, 10)


# ----------------------------------------------------------------------------- claim


def claim_metrics(
    cfg: Config, noisy: dict[str, list[float]], clean: dict[str, list[float]], in_distribution: float = 0.5
) -> Metrics:
    """The keys claim() reads: per-seed noisy/clean accuracies of both arms, matrix checks at their closed forms."""
    n, tn = cfg.model.n, cfg.claim_train_noise
    values = {
        "maths/a0_identity_residual": 0.0,
        "maths/bt_a0_minus_2q_residual": 0.0,
        "maths/max_real_eig_AR": 1.0,
        "maths/max_real_eig_A0": n - 1.0,
        "maths/rel_change_AR_vs_A0_N16": 1.09,
        "maths/kalman_cov_asymmetry": 0.0,
        "maths/kalman_cov_min_eig": 1.0,
        "maths/krylov_fft_vs_unrolled_rel_err": 0.0,
        "method/chosen_sigma2_log10": 10.0,
    }
    for noise in cfg.recon.noises:
        values[f"baseline/recon_mse_noise{noise:g}"] = 1.0 if noise else 0.1
        values[f"method/recon_mse_noise{noise:g}"] = 0.4
    metrics = Metrics(values)
    for arm in ("method", "baseline"):
        seeds = [f"seed{k}" for k in range(len(noisy[arm]))]
        metrics.add_units("acc_noisy", arm, noisy[arm], seeds)
        metrics.add_units("acc_clean", arm, clean[arm], seeds)
        metrics.add_units("acc_in_distribution", arm, [in_distribution] * len(seeds), seeds)
        values[f"{arm}/acc_noisy"], values[f"{arm}/acc_clean"] = np.mean(noisy[arm]), np.mean(clean[arm])
        values[f"{arm}/acc_train{tn:g}_eval{tn:g}"] = in_distribution
        values.update(
            {f"{arm}/chosen_lr": 1e-2, f"{arm}/best_epoch_mean": 3.0, f"{arm}/finals_best_at_last_epoch": 0.0}
        )
    return metrics


def test_claim_pairs_training_seeds_and_is_three_state():
    cfg = Config.for_scale("smoke", {"train.n_seeds": 3})
    clean = {"method": [0.90, 0.92, 0.91], "baseline": [0.91, 0.92, 0.92]}  # gaps -1, 0, -1 pt: well above -3
    # Noisy gains +6, +5, +7 pt: the whole interval is above 2 pt.
    holds = SPEC.module().claim(
        cfg, claim_metrics(cfg, {"method": [0.60, 0.55, 0.62], "baseline": [0.54, 0.50, 0.55]}, clean)
    )
    gain = holds.criterion("acc_noisy_gain_pt")
    assert gain.estimate == pytest.approx(6.0) and gain.low > 2.0 and gain.n_units == 3 and gain.interval == "t"
    assert holds.criterion("acc_clean_gap_pt").state == "holds" and holds.verdict == "holds" and holds.sane
    # The placebo (LSSL's next seed scored as UnLSSL) has mean 0 by construction: it fails the 2 pt bar when LSSL's
    # seeds agree, and is inconclusive when seed noise alone could reach 2 pt (+-4 pt between seeds here).
    (control,) = holds.controls
    assert control.criterion.estimate == pytest.approx(0.0) and control.criterion.state == "inconclusive"
    tight = SPEC.module().claim(
        cfg, claim_metrics(cfg, {"method": [0.60, 0.59, 0.61], "baseline": [0.540, 0.542, 0.544]}, clean)
    )
    assert tight.controls[0].criterion.state == "fails" and tight.verdict == "holds"
    assert "FSD" in gain.paper
    # Gains +6, -1, +3 pt: mean 2.7 pt, but the interval straddles 2 pt.
    mixed = SPEC.module().claim(
        cfg, claim_metrics(cfg, {"method": [0.60, 0.49, 0.58], "baseline": [0.54, 0.50, 0.55]}, clean)
    )
    assert mixed.criterion("acc_noisy_gain_pt").state == "inconclusive" and mixed.verdict == "inconclusive"
    # UnLSSL 1 pt below LSSL under noise on every seed: fails.
    fails = SPEC.module().claim(
        cfg, claim_metrics(cfg, {"method": [0.53, 0.49, 0.54], "baseline": [0.54, 0.50, 0.55]}, clean)
    )
    assert fails.criterion("acc_noisy_gain_pt").state == "fails" and fails.verdict == "fails"
    # Clean gaps -6, -6, -7 pt: the whole interval below -3 pt.
    worse_clean = {"method": [0.85, 0.86, 0.85], "baseline": [0.91, 0.92, 0.92]}
    dropped = SPEC.module().claim(
        cfg, claim_metrics(cfg, {"method": [0.60, 0.55, 0.62], "baseline": [0.54, 0.50, 0.55]}, worse_clean)
    )
    assert dropped.criterion("acc_clean_gap_pt").state == "fails" and dropped.verdict == "fails"


def test_default_claim_gates_a_baseline_that_does_not_learn_the_noisy_task():
    cfg = Config()
    clean = {"method": [0.90, 0.92, 0.91], "baseline": [0.91, 0.92, 0.92]}
    noisy = {"method": [0.60, 0.55, 0.62], "baseline": [0.54, 0.50, 0.55]}
    learned = SPEC.module().claim(cfg, claim_metrics(cfg, noisy, clean, in_distribution=0.4))
    assert learned.sane and learned.sanity["baseline_at_noise0.0316228_learns_task_>=0.15"]
    at_chance = SPEC.module().claim(cfg, claim_metrics(cfg, noisy, clean, in_distribution=0.11))
    assert not at_chance.sanity["baseline_at_noise0.0316228_learns_task_>=0.15"] and not at_chance.sane
