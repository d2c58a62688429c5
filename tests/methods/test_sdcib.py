"""sdcib: loss terms against closed forms and references, fusion, clustering metrics, npz layout, pipeline."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("PAPERLINE_PROGRESS", "0")
torch.set_num_threads(int(os.environ.get("PAPERLINE_THREADS", "1")))  # tiny tensors: threads only add contention

from models.base import Metrics, ValidationError, read_dataset  # noqa: E402
from models.common.raw_data import RawDataError  # noqa: E402
from models.common.units import unit_labels  # noqa: E402
from models.sdcib import SPEC  # noqa: E402
from models.sdcib import pipeline as P  # noqa: E402
from models.sdcib.algorithm import (  # noqa: E402
    cluster_acc,
    cluster_entropy,
    clustering_scores,
    compression_kl,
    fuse_views,
    jsd_mi,
    nt_xent,
    pairwise_nt_xent,
    sdcib_loss,
)
from models.sdcib.config import Config, DataConfig  # noqa: E402
from models.sdcib.data import (  # noqa: E402
    MFEAT_VIEWS,
    MFEAT_WHEEL,
    NpzLayoutError,
    load_mfeat,
    load_npz,
    make_esp_like,
    parse_mfeat_csv,
    save_npz,
    validation_split,
)
from models.sdcib.networks import SDCIB, GroupedCritic  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ----------------------------------------------------------------------------- clustering metrics


def test_acc_is_one_for_any_relabelling_and_matches_brute_force():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 200)
    perm = np.array([2, 0, 3, 1])
    assert cluster_acc(labels, perm[labels]) == 1.0
    pred = rng.integers(0, 4, 200)
    brute = max(np.mean(np.array(p)[pred] == labels) for p in itertools.permutations(range(4)))
    assert cluster_acc(labels, pred) == pytest.approx(brute)


def test_nmi_ari_and_cluster_entropy_ranges():
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(5), 40)
    perfect = clustering_scores(labels, (labels + 2) % 5, 5)
    assert perfect["acc"] == perfect["nmi"] == perfect["ari"] == pytest.approx(1.0)
    assert perfect["cluster_entropy"] == pytest.approx(1.0)
    noisy = clustering_scores(labels, rng.integers(0, 5, 200), 5)
    assert 0.0 <= noisy["nmi"] < 0.2 and abs(noisy["ari"]) < 0.1
    assert cluster_entropy(np.zeros(50, dtype=int), 5) == 0.0  # a collapsed clustering


def test_fusion_aligns_permuted_views_to_view_zero():
    rng = np.random.default_rng(2)
    p0 = rng.dirichlet(np.ones(4), size=300)
    views = [p0, p0[:, [3, 1, 0, 2]], p0[:, [1, 2, 3, 0]]]  # same assignments, clusters renamed per view
    np.testing.assert_array_equal(fuse_views(views), p0.argmax(1))


# ----------------------------------------------------------------------------- loss terms


def reference_nt_xent(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> float:
    """Loop-by-loop SimCLR loss over 2n anchors, minus log n."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    total = 0.0
    for i in range(2 * n):
        j = (i + n) % (2 * n)
        logits = torch.tensor([float(z[i] @ z[m]) / tau for m in range(2 * n) if m != i])
        pos = float(z[i] @ z[j]) / tau
        total += -(pos - float(torch.logsumexp(logits, 0)))
    return total / (2 * n) - math.log(n)


def test_nt_xent_matches_reference_and_is_symmetric():
    z1, z2 = torch.randn(6, 5), torch.randn(6, 5)
    value = float(nt_xent(z1, z2, 0.5))
    assert value == pytest.approx(reference_nt_xent(z1, z2, 0.5), rel=1e-5)
    assert float(nt_xent(z2, z1, 0.5)) == pytest.approx(value, rel=1e-6)


def test_nt_xent_closed_form_for_orthogonal_aligned_views():
    n, tau = 4, 0.2
    z = torch.eye(n)  # positives have cosine 1, all negatives cosine 0
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + 2 * n - 2)) - math.log(n)
    assert float(nt_xent(z, z, tau)) == pytest.approx(expected, rel=1e-6)


def test_pairwise_nt_xent_equals_the_pair_by_pair_sum_over_ordered_pairs():
    zs = [torch.randn(5, 4) for _ in range(3)]
    expected = sum(reference_nt_xent(zs[v], zs[u], 0.3) for v in range(3) for u in range(3) if u != v)
    assert float(pairwise_nt_xent(torch.stack(zs), 0.3)) == pytest.approx(expected, rel=1e-5)
    assert float(pairwise_nt_xent(torch.stack(zs[:1]), 0.3)) == 0.0  # one view: no pair to contrast
    # Cluster level: the K columns of (batch, K) assignments are the contrasted samples.
    c1, c2 = torch.softmax(torch.randn(16, 3), 1), torch.softmax(torch.randn(16, 3), 1)
    pair = torch.stack([c1.T, c2.T])
    assert float(pairwise_nt_xent(pair, 0.1)) == pytest.approx(2 * reference_nt_xent(c1.T, c2.T, 0.1), rel=1e-5)


def test_compression_kl_is_kl_of_softmax_prior_sample_to_softmax_code():
    h = torch.randn(8, 5)
    torch.manual_seed(3)
    value = float(compression_kl(h))
    torch.manual_seed(3)
    q = torch.softmax(torch.randn_like(h), 1)  # the same fresh prior sample
    p = torch.softmax(h, 1)
    assert value == pytest.approx(float((q * (q.log() - p.log())).sum(1).mean()), rel=1e-5)


class DotCritic(torch.nn.Module):
    """T(h, c) = s * (2 <h, c> - 1): +s on matching one-hots, -s otherwise."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, h, c):
        return self.scale * (2 * (h * c).sum(1) - 1)


def test_jsd_bound_closed_forms():
    c = F.one_hot(torch.arange(6) % 3, 3).float()  # rolled by one, every negative pair differs
    for s in (0.0, 1.0, 5.0):
        expected = 2 * math.log(1 / (1 + math.exp(-s)))  # log sigma(s) + log(1 - sigma(-s))
        assert float(jsd_mi(DotCritic(s), c, c)) == pytest.approx(expected, rel=1e-6)
    assert float(jsd_mi(DotCritic(30.0), c, c)) > -1e-6  # the bound's supremum is 0


def critic_run(sign: float, steps: int = 60) -> float:
    """Train a critic on I_JSD(h; c) with ``sign * I`` as its loss; return the final I."""
    torch.manual_seed(0)
    h = torch.randn(64, 8)
    c = torch.softmax(3 * h[:, :3], 1)  # c depends on h: I(h; c) > 0
    h, c = h[None], c[None]  # one view
    critic = GroupedCritic(1, 8, 3)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    for _ in range(steps):
        mi = jsd_mi(critic, h, c)
        opt.zero_grad()
        (sign * mi).backward()
        opt.step()
    return float(jsd_mi(critic, h, c).detach())


def test_official_sign_runs_away_while_ib_sign_stays_bounded():
    minimised = critic_run(+1.0)  # the official code: the critic minimises the bound
    maximised = critic_run(-1.0)  # the fix: the critic maximises it
    assert minimised < -4.0, "minimising the JSD bound should run far below its chance value -2 log 2"
    assert -2 * math.log(2) < maximised <= 0.0


def small_outputs(widths=(6, 6, 4), k=3, views=2, batch=10):
    net = SDCIB((5, 7, 4)[:views], widths, k, (True,) * views)
    xs = [torch.rand(batch, d) for d in net.view_dims]
    critics = {f"k{l}": GroupedCritic(views, w, k) for l, w in enumerate(widths)}
    return net, xs, critics


@torch.no_grad()
def test_sdcib_loss_composition_and_mi_sign():
    net, xs, critics = small_outputs()
    out = net(xs, sample=False)
    kw = dict(alpha=0.3, beta=2.0, tau_instance=0.1, tau_cluster=0.1, sample=False)
    torch.manual_seed(1)  # the compression term draws a fresh prior sample: same draw for both signs
    ib = sdcib_loss(out, critics, (0, 1, 2), mi_sign=-1.0, **kw)
    torch.manual_seed(1)
    official = sdcib_loss(out, critics, (0, 1, 2), mi_sign=+1.0, **kw)
    gap = float(official["loss"] - ib["loss"])
    assert gap == pytest.approx(2 * 0.3 * 2.0 * float(ib["mi"]), rel=1e-4)
    assert float(ib["mi"]) <= 0  # sum of JSD bounds: the ib loss term -beta*I is >= 0
    # Two views: each unordered pair counts twice (u != v in both orders).
    expected_inst = sum(2 * float(nt_xent(out.codes[l][0], out.codes[l][1], 0.1)) for l in range(3))
    assert float(ib["instance"]) == pytest.approx(expected_inst, rel=1e-5)
    last = sdcib_loss(out, critics, (2,), mi_sign=-1.0, **kw)
    expected_last = 2 * float(nt_xent(out.codes[2][0], out.codes[2][1], 0.1))
    assert float(last["instance"]) == pytest.approx(expected_last, rel=1e-5)
    no_ib = sdcib_loss(out, {}, (0, 1, 2), mi_sign=-1.0, **{**kw, "alpha": 0.0})
    assert float(no_ib["loss"]) == pytest.approx(float(no_ib["instance"] + no_ib["cluster"]), rel=1e-6)


def test_encoder_heads_shapes_sigma_positive_mu_nonnegative_and_eval_is_deterministic():
    net, xs, _ = small_outputs(views=3)
    out = net(xs, sample=True)
    assert out.probs.shape == (3, 10, 3) and [m.shape for m in out.mus] == [(3, 10, 6), (3, 10, 6), (3, 10, 4)]
    assert all((s > 0).all() for s in out.sigmas)
    assert all((m >= 0).all() for m in out.mus)  # ReLU before the split (official)
    assert torch.allclose(out.probs.sum(-1), torch.ones(3, 10))
    net.eval()
    a, b = net(xs, sample=False), net(xs, sample=False)
    assert torch.equal(a.probs, b.probs) and torch.equal(a.codes[1], a.mus[1])
    labels = net.predict(xs)
    assert labels.shape == (10,) and int(labels.min()) >= 0 and int(labels.max()) < 3


def test_input_scaling_standardises_every_log1p_feature_and_travels_in_the_state_dict():
    rng = np.random.default_rng(0)
    counts = torch.from_numpy(rng.poisson(30.0, (50, 4)).astype(np.float32))
    signed = torch.from_numpy(rng.normal(5.0, 3.0, (50, 3)).astype(np.float32))
    signed[:, 2] = 7.0  # a constant feature keeps scale 1 (no division by zero)
    net = SDCIB((4, 3), (6, 4), 3, (True, False))
    net.fit_input_scaling([counts, signed])
    a, b = net.transformed(0, counts), net.transformed(1, signed)
    np.testing.assert_allclose(a.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(a.std(0), 1, atol=1e-5)
    np.testing.assert_allclose(
        a, (torch.log1p(counts) - torch.log1p(counts).mean(0)) / torch.log1p(counts).std(0), atol=1e-5
    )
    assert torch.equal(b[:, 2], torch.zeros(50)) and float(net.scale[1, 2]) == 1.0
    copy = SDCIB((4, 3), (6, 4), 3, (True, False))
    copy.load_state_dict(net.state_dict())
    assert torch.equal(copy.transformed(0, counts), a)


# ----------------------------------------------------------------------------- data and config


def test_npz_official_layout_round_trip_and_label_remap(tmp_path):
    rng = np.random.default_rng(0)
    views = [rng.poisson(3.0, (12, 5)).astype(np.float64), rng.random((12, 3))]
    labels = np.array([1, 2, 3] * 4)  # 1-based, as in some official files
    path = save_npz(tmp_path / "tiny.npz", views, labels)
    with np.load(path) as archive:
        assert set(archive.files) == {"n_views", "labels", "view_0", "view_1"} and int(archive["n_views"]) == 2
    loaded, codes = load_npz(path)
    assert [x.dtype for x in loaded] == [np.float32, np.float32]
    np.testing.assert_allclose(loaded[0], views[0])
    np.testing.assert_array_equal(codes, labels - 1)


def test_npz_layout_errors(tmp_path):
    np.savez(tmp_path / "a.npz", labels=np.zeros(3), view_0=np.zeros((3, 2)))
    with pytest.raises(NpzLayoutError, match="n_views"):
        load_npz(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", n_views=2, labels=np.zeros(3), view_0=np.zeros((3, 2)))
    with pytest.raises(NpzLayoutError, match="view_1"):
        load_npz(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", n_views=1, labels=np.zeros(3), view_0=np.zeros((4, 2)))
    with pytest.raises(NpzLayoutError, match="shape"):
        load_npz(tmp_path / "c.npz")


def test_parse_mfeat_csv_reads_features_and_the_label_column():
    rows = [",".join(f"{x:g}" for x in [c + 0.5, 2 * c, c]) for c in range(10) for _ in range(200)]
    x, y = parse_mfeat_csv("0,1,0\n" + "\n".join(rows), 2, "tiny.csv")  # header: feature indices + label
    assert x.shape == (2000, 2) and np.array_equal(y, np.repeat(np.arange(10), 200))
    np.testing.assert_allclose(x[200], [1.5, 2.0])
    with pytest.raises(RawDataError, match="header"):
        parse_mfeat_csv("0,1,2,0\n" + "\n".join(rows), 2, "tiny.csv")
    with pytest.raises(RawDataError, match="shape"):
        parse_mfeat_csv("0,1,0\n" + "\n".join(rows[:-1]), 2, "tiny.csv")


def test_load_mfeat_from_the_pinned_wheel():
    views, labels = load_mfeat()
    assert [x.shape for x in views] == [(2000, d) for d in MFEAT_VIEWS.values()]
    assert all(x.dtype == np.float32 and np.isfinite(x).all() for x in views)
    assert np.array_equal(np.bincount(labels), np.full(10, 200))
    assert views[5].max() > 1e4 and views[2].min() < 0  # mor spans 1e4, kar is signed: why inputs are scaled
    small, small_labels = load_mfeat(per_class=3)
    assert np.array_equal(small_labels, np.repeat(np.arange(10), 3))
    np.testing.assert_array_equal(small[0][3:6], views[0][200:203])  # the first 3 digits of class 1


def test_missing_or_altered_wheel_is_a_raw_data_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw").mkdir(parents=True)  # a project with its own (here empty) raw folder
    with pytest.raises(RawDataError, match="missing"):
        load_mfeat()
    (tmp_path / "data" / "raw" / MFEAT_WHEEL).write_bytes(b"not the wheel")
    with pytest.raises(RawDataError, match="expected 449a5c649176"):
        load_mfeat()


def test_validation_split_is_stratified_seeded_and_a_fraction():
    labels = np.repeat(np.arange(4), [50, 30, 20, 100])
    mask = validation_split(labels, 0.2, 3)
    assert np.array_equal(np.bincount(labels[mask]), [10, 6, 4, 20])
    assert np.array_equal(mask, validation_split(labels, 0.2, 3)) and not np.array_equal(
        mask, validation_split(labels, 0.2, 4)
    )


def test_kmeans_view_weighting_gives_every_view_the_same_total_variance():
    from models.sdcib.pipeline import kmeans_input

    rng = np.random.default_rng(0)
    views = [rng.poisson(4.0, (40, 3)).astype(np.float32), rng.normal(size=(40, 12)).astype(np.float32)]
    z = kmeans_input(views, (True, False), "view")
    assert z[:, :3].var(0).sum() == pytest.approx(1.0) and z[:, 3:].var(0).sum() == pytest.approx(1.0)
    assert kmeans_input(views, (True, False), "feature").var(0) == pytest.approx(np.ones(15))


def test_data_source_and_file_must_agree():
    assert Config().data.source == "mfeat" and SPEC.dataset == "sdcib"
    with pytest.raises(ValidationError, match="real_npz"):
        Config.for_scale("smoke", {"data.source": "npz"})
    with pytest.raises(ValidationError, match="only read with"):
        Config.for_scale("smoke", {"data.real_npz": "real/esp.npz"})
    with pytest.raises(ValidationError, match="batch_size"):
        Config.for_scale("smoke", {"data.per_class": 2, "batch_size": 32})


@pytest.mark.parametrize("bad", ["/abs/esp.npz", "../esp.npz", "real/../../x.npz", "real/esp.mat"])
def test_real_npz_path_must_stay_inside_data(bad):
    with pytest.raises(ValidationError, match="real_npz"):
        Config.for_scale("smoke", {"data.source": "npz", "data.real_npz": bad})


def test_config_bounds():
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"alpha": 1.5})
    with pytest.raises(ValidationError):
        Config.for_scale("smoke", {"variants": ("sdcib",)})
    with pytest.raises(ValidationError, match="lr_grid"):
        Config.for_scale("smoke", {"lr_grid": (1e-3, 1e-3)})


def test_generator_is_deterministic_esp_shaped():
    cfg = DataConfig(n_samples=300, n_clusters=5, image_dim=20, tag_vocab=30)
    (image, tags), labels = make_esp_like(cfg, 7)
    (image2, tags2), labels2 = make_esp_like(cfg, 7)
    assert np.array_equal(image, image2) and np.array_equal(tags, tags2) and np.array_equal(labels, labels2)
    assert image.shape == (300, 20) and tags.shape == (300, 30) and (image >= 0).all()
    assert np.array_equal(tags, np.round(tags)) and (tags >= 0).all()  # tag counts
    assert sorted(np.unique(labels)) == list(range(5)) and np.bincount(labels).min() >= 300 / 5 * 0.6


# ----------------------------------------------------------------------------- pipeline


def test_prepare_reads_user_supplied_real_npz(tmp_path, monkeypatch):
    from tasks import steps

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    rng = np.random.default_rng(1)
    (tmp_path / "data" / "real").mkdir(parents=True)
    save_npz(tmp_path / "data" / "real" / "esp.npz", [rng.random((40, 6)), rng.random((40, 9))], np.arange(40) % 4)
    cfg = SPEC.make_config("smoke", {"data.source": "npz", "data.real_npz": "real/esp.npz", "batch_size": 8})
    ref = steps.prepare(SPEC, cfg, tmp_path)
    assert ref.meta["synthetic"] is False and ref.meta["view_dims"] == [6, 9] and ref.meta["n_clusters"] == 4
    assert ref.meta["source"] == "real" and "real/esp.npz" in ref.meta["provenance"]
    views, labels = load_npz(ref.file("views.npz"))
    assert len(labels) == 40 and views[1].shape == (40, 9)


def test_synthetic_source_is_labelled_synthetic(tmp_path):
    from models.sdcib.pipeline import dataset_label, prepare

    cfg = SPEC.make_config("smoke", {"data.source": "synthetic", "data.n_samples": 64, "data.n_clusters": 4})
    ref = prepare(cfg, tmp_path)
    assert ref.meta["source"] == "synthetic" and ref.meta["synthetic"] is True
    assert "make_esp_like" in ref.meta["provenance"] and "SYNTHETIC" in ref.meta["dataset"] == dataset_label(cfg)
    assert load_npz(ref.file("views.npz"))[1].max() == 3


def test_smoke_pipeline_on_the_real_slice(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    meta = read_dataset(ref.path).meta
    assert meta["source"] == "real" and MFEAT_WHEEL in meta["provenance"] and meta["n_samples"] == 200
    assert meta["view_dims"] == list(MFEAT_VIEWS.values()) and meta["synthetic"] is False
    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert {"method", "baseline", "baseline_kmeans"} <= set(artifacts.history)
    assert artifacts.summary["select/method/seed0/lr"] == cfg.lr_grid[0]
    assert 0 <= artifacts.summary["select/method/seed0/best_epoch"] < cfg.max_epochs
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    assert v["check/n_test"] == 160  # 20 % of every class chooses, the other 80 % is scored
    for prefix in ("method", "baseline", "baseline_kmeans"):
        assert 0.0 < v[f"{prefix}/acc"] <= 1.0 and 0.0 <= v[f"{prefix}/nmi"] <= 1.0
        assert v[f"{prefix}/acc"] >= 1 / 10 - 1e-9  # the best of K disjoint matchings covers >= n/K
    assert v["method/acc_official_max"] >= v["method/acc"] - 1e-6  # the chosen epoch is one of the maximised ones
    assert v["check/labels_in_range"] == 1.0 and v["check/real_data"] == 1.0
    assert all(np.isfinite(x) for x in v.values())
    assert result.sanity["loss_bounded_abs_lt_1e4"] and result.sanity["labels_in_range"]
    assert {c.name for c in result.criteria} == {"acc_gap_vs_last_layer", "acc_gap_vs_kmeans"}
    gap = result.criterion("acc_gap_vs_last_layer")
    assert gap.estimate == pytest.approx(v["method/acc"] - v["baseline/acc"])
    assert gap.n_units == cfg.n_seeds == 1 and gap.state == "inconclusive"  # one seed at smoke: no interval
    assert "UCI Multiple Features (real" in result.notes and "Official-style" in result.notes
    assert {p.name for p in metrics.figures} >= {"scores.png", "embedding_2d.png", "learning_curves.png"}
    model = SPEC.module().load_model(cfg, artifacts.model_dir)
    views, labels = load_npz(ref.file("views.npz"))
    pred = model.predict([torch.from_numpy(x) for x in views])
    assert pred.shape == labels.shape


# ----------------------------------------------------------------------------- claim


def claim_metrics(sdcib_acc, last_layer_acc, kmeans_acc) -> Metrics:
    """The metric keys claim() reads, with the given per-seed ACCs for the three arms."""
    values = {
        "check/labels_in_range": 1.0,
        "check/n_clusters": 10.0,
        "method/max_abs_loss": 3.0,
        "baseline/max_abs_loss": 2.0,
        "method/cluster_entropy": 0.99,
        "method/acc_train_mode": 0.5,
    }
    metrics = Metrics(values)
    arms = (("method", sdcib_acc), ("baseline", last_layer_acc), ("baseline_kmeans", kmeans_acc))
    for prefix, accs in (*arms, ("control_untrained", [0.1] * len(sdcib_acc))):
        labels = unit_labels("seed", len(accs))
        metrics.add_units("acc", prefix, accs, labels)
        metrics.add_units("lr", prefix, [1e-3] * len(accs), labels)
        metrics.add_units("best_epoch", prefix, [5.0] * len(accs), labels)
        for name in ("nmi", "ari"):
            values.update({f"{prefix}/{name}{suffix}": 0.5 for suffix in ("", "_low", "_high")})
        values[f"{prefix}/acc"] = float(np.mean(accs))
        values[f"{prefix}/acc_low"], values[f"{prefix}/acc_high"] = min(accs), max(accs)
        values[f"{prefix}/acc_official_max"] = max(accs)
    for name, chosen in (("raw", 0.0), ("feature", 0.0), ("view", 1.0)):  # every k-means preprocessing
        prefix = f"baseline_kmeans_{name}"
        labels = unit_labels("seed", len(kmeans_acc))
        metrics.add_units("acc", prefix, kmeans_acc, labels)
        metrics.add_units("chosen", prefix, [chosen] * len(kmeans_acc), labels)
        values.update({f"{prefix}/acc{suffix}": 0.5 for suffix in ("", "_low", "_high")})
    return metrics


def test_claim_gaps_are_paired_over_seeds_and_three_state():
    cfg = Config(n_seeds=3)
    # SDCIB beats both baselines on every seed by ~0.09: both intervals above 0.
    holds = SPEC.module().claim(cfg, claim_metrics([0.74, 0.76, 0.72], [0.65, 0.66, 0.64], [0.60, 0.61, 0.62]))
    gap = holds.criterion("acc_gap_vs_last_layer")
    assert gap.estimate == pytest.approx(0.09) and gap.low > 0 and gap.n_units == 3 and gap.interval == "t"
    assert holds.verdict == "holds" and holds.sane and holds.figures["method_acc_official_max"] == 0.76
    # Pairing: the seeds' ACCs vary a lot, their differences do not, so the paired gap is still decisive.
    paired = SPEC.module().claim(cfg, claim_metrics([0.50, 0.70, 0.90], [0.47, 0.68, 0.87], [0.1, 0.2, 0.3]))
    assert paired.criterion("acc_gap_vs_last_layer").state == "holds"
    # Per-seed gaps +0.03, -0.02, +0.01 straddle 0: inconclusive, so the verdict is too.
    mixed = SPEC.module().claim(cfg, claim_metrics([0.70, 0.68, 0.71], [0.67, 0.70, 0.70], [0.5, 0.5, 0.5]))
    assert mixed.criterion("acc_gap_vs_last_layer").state == "inconclusive"
    assert mixed.criterion("acc_gap_vs_kmeans").state == "holds" and mixed.verdict == "inconclusive"
    # k-means ahead on every seed: that criterion fails, and with it the claim.
    fails = SPEC.module().claim(cfg, claim_metrics([0.70, 0.71, 0.72], [0.60, 0.61, 0.62], [0.80, 0.82, 0.81]))
    assert fails.criterion("acc_gap_vs_kmeans").state == "fails" and fails.verdict == "fails"
    # An arm at chance (ACC 0.1 < 2/K = 0.2) fails the must-pass gate whatever the gaps say.
    vacuous = SPEC.module().claim(cfg, claim_metrics([0.30, 0.31, 0.29], [0.10, 0.10, 0.11], [0.1, 0.1, 0.1]))
    assert not vacuous.sanity["baseline_learns_task_>=0.2"] and vacuous.sanity["method_learns_task_>=0.2"]
    assert not vacuous.sane


def test_every_kmeans_preprocessing_is_scored_and_the_claim_names_the_chosen_one():
    cfg = Config(n_seeds=3)
    result = SPEC.module().claim(cfg, claim_metrics([0.74, 0.76, 0.72], [0.65, 0.66, 0.64], [0.60, 0.61, 0.62]))
    assert "per-view weighted on 3 of 3 seeds" in result.criterion("acc_gap_vs_kmeans").statement
    for name in ("raw", "feature", "view"):
        assert f"baseline_kmeans_{name}_acc" in result.figures
    assert result.figures["baseline_kmeans_view_chosen_seeds"] == 3.0
    # "raw" is the plain concatenation: no log1p, no scaling.
    views = [np.arange(6.0).reshape(3, 2), 10.0 * np.ones((3, 1))]
    raw = P.kmeans_input(views, (True, True), "raw")
    assert np.array_equal(raw, np.concatenate(views, axis=1))
    assert not np.allclose(P.kmeans_input(views, (True, True), "feature"), raw)


def test_official_epoch_choice_takes_the_lowest_training_loss_epoch():
    records = [
        {"epoch": 0.0, "train/loss": 5.0},
        {"epoch": 0.0, "test/acc": 0.5},
        {"epoch": 1.0, "train/loss": 2.0},
        {"epoch": 1.0, "test/acc": 0.8},
        {"epoch": 2.0, "train/loss": 1.0},
        {"epoch": 2.0, "test/acc": 0.6},
    ]
    assert P.official_epoch_choice(records) == {"acc_official_epoch": 0.6, "official_epoch": 2.0, "epochs_run": 3.0}
    assert P.official_epoch_choice([{"epoch": 0.0, "test/acc": 0.5}]) == {}
