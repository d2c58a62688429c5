"""Figures of the IBMD study; each takes plain values and returns the saved PNG's path.

``results`` below are ``pipeline.evaluate_seed`` outputs (one seed of a setup): ``values``
(``<sampler>/<metric>``), ``samples`` (per sampler), ``x0``/``x1`` (the held-out block).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common import plotting


def titles(many_nfe: int) -> dict[str, str]:
    return {
        "truth": "true x0",
        "oracle": "exact p(x0|x1)",
        "teacher_nfe1": "teacher, NFE 1",
        f"teacher_nfe{many_nfe}": f"teacher, NFE {many_nfe}",
        "ibmd": "IBMD student, NFE 1",
    }


def plot_toy_samples(many_nfe: int, results: dict, path: Path) -> Path:
    """Scatter of every sampler's x0 on the first seed's block, and the x0_2 marginals."""
    plt = plotting.pyplot()
    names = titles(many_nfe)
    columns = list(names)
    fig, axes = plt.subplots(
        len(results), len(columns) + 1, figsize=(2.7 * (len(columns) + 1), 2.7 * len(results)), squeeze=False
    )
    for row, (name, res) in enumerate(results.items()):
        samples = {"truth": res["x0"], **res["samples"]}
        v = res["values"]
        for col, key in enumerate(columns):
            ax = axes[row, col]
            if key not in samples or samples[key].shape[1] < 2:
                ax.axis("off")
                continue
            x = samples[key][:2048].numpy()
            ax.scatter(x[:, 0], x[:, 1], s=1, alpha=0.4, color="tab:red" if key == "ibmd" else "tab:blue")
            extra = f"\nED {v[f'{key}/ed_plugin']:.4f}" if f"{key}/ed_plugin" in v else ""
            ax.set_title(f"{name}: {names[key]}{extra}", fontsize=8)
            ax.set_xlim(-3, 3)
            ax.set_ylim(-3, 3)
            ax.set_aspect("equal")
        ax = axes[row, -1]
        bins = np.linspace(-3, 3, 61)
        for key, color in (
            ("truth", "black"),
            ("teacher_nfe1", "tab:gray"),
            (f"teacher_nfe{many_nfe}", "tab:blue"),
            ("ibmd", "tab:red"),
        ):
            if key in samples and samples[key].shape[1] >= 2:
                ax.hist(
                    samples[key][:, 1].numpy(), bins=bins, histtype="step", density=True, color=color, label=names[key]
                )
        ax.set_title(f"{name}: x0_2 marginal", fontsize=8)
        ax.legend(fontsize=6)
    return plotting.save(fig, path)


def plot_ed_vs_nfe(nfe: list[int], results: dict, path: Path) -> Path:
    """The teacher's plug-in ED against NFE (first seed), IBMD at NFE 1, and the noise floor."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(3.6 * len(results), 3.1), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items()):
        v = res["values"]
        ax.plot(nfe, [v[f"teacher_nfe{n}/ed_plugin"] for n in nfe], marker="o", color="tab:blue", label="teacher")
        ax.scatter([1], [v["ibmd/ed_plugin"]], marker="*", s=160, color="tab:red", zorder=5, label="IBMD, NFE 1")
        if "oracle/ed_plugin" in v:
            ax.axhline(v["oracle/ed_plugin"], ls="--", color="black", lw=1, label="noise floor (exact posterior)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("NFE")
        ax.set_ylabel("plug-in energy distance, joint (x0, x1)")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_learning_curves(history: dict, path: Path) -> Path:
    """Teacher validation loss, the fake bridge's loss, the generator loss and the student's validation ED."""
    plt = plotting.pyplot()
    panels = [
        ("baseline", "val/loss", "teacher: validation bridge-matching loss (EMA)"),
        ("method", "train/fake_loss", "fake bridge loss (on G's coupling)"),
        ("method", "train/generator_loss", "generator loss (a difference; may be < 0)"),
        ("method", "val/ed_to_teacher", "student: validation ED to teacher samples"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 3.0))
    for ax, (role, key, title) in zip(axes, panels):
        for variant, records in history.items():
            if not variant.startswith(role):
                continue
            pts = [(r.get("epoch", i), r[key]) for i, r in enumerate(records) if key in r]
            if pts:
                ax.plot(*zip(*pts), marker=".", lw=1, label=variant.removeprefix(role).strip("_") or "toy_cond")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("epoch (validation)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5)
    return plotting.save(fig, path)


def plot_teacher_convergence(history: dict, truth: dict[str, float | None], many_nfe: int, path: Path) -> Path:
    """The first seed's teacher at every validation: its NFE-many bimodal fraction against the truth's."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0))
    for setup, true_fraction in truth.items():
        key = "baseline" if setup == "toy_cond" else f"baseline_{setup}"
        records = history.get(key, [])
        pts = [
            (r.get("epoch", i), r["val/frac_bimodal_many"], r["val/loss"])
            for i, r in enumerate(records)
            if "val/frac_bimodal_many" in r
        ]
        if not pts:
            continue
        epochs, fracs, losses = zip(*pts)
        (line,) = axes[0].plot(epochs, fracs, marker=".", label=setup)
        if true_fraction is not None:
            axes[0].axhline(true_fraction, color=line.get_color(), ls="--", lw=1)
        axes[1].plot(epochs, losses, marker=".", label=setup)
    axes[0].set_title(f"teacher NFE {many_nfe}: bimodal fraction (dashed: truth)", fontsize=8)
    axes[1].set_title("teacher: validation loss (EMA)", fontsize=8)
    for ax in axes:
        ax.set_xlabel("epoch (validation)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_seed_summary(many_nfe: int, setups: list[str], n_seeds: int, values: dict, path: Path) -> Path:
    """Per seed: excess ED over the noise floor of each sampler, and the bimodal fractions."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(len(setups), 2, figsize=(8.5, 2.8 * len(setups)), squeeze=False)
    samplers = (
        ("baseline", "_nfe1", "teacher NFE 1"),
        ("baseline", f"_nfe{many_nfe}", f"teacher NFE {many_nfe}"),
        ("method", "", "IBMD NFE 1"),
    )
    for row, s in enumerate(setups):
        floor = np.array([values.get(f"oracle/seed{k}/{s}_ed_plugin", 0.0) for k in range(n_seeds)])
        x = np.arange(n_seeds)
        for j, (ns, suffix, label) in enumerate(samplers):
            ed = np.array([values[f"{ns}/seed{k}/{s}_ed_plugin{suffix}"] for k in range(n_seeds)])
            axes[row, 0].bar(x + 0.27 * (j - 1), np.maximum(ed - floor, 1e-6), width=0.27, label=label)
            if f"{ns}/seed0/{s}_frac_bimodal{suffix}" in values:
                frac = [values[f"{ns}/seed{k}/{s}_frac_bimodal{suffix}"] for k in range(n_seeds)]
                axes[row, 1].bar(x + 0.27 * (j - 1), frac, width=0.27, label=label)
        axes[row, 0].plot(x, np.maximum(floor, 1e-6), "k_", ms=20, label="noise floor")
        axes[row, 0].set_yscale("log")
        axes[row, 0].set_title(f"{s}: ED excess over the noise floor", fontsize=8)
        if f"oracle/seed0/{s}_truth_frac_bimodal" in values:
            truth = [values[f"oracle/seed{k}/{s}_truth_frac_bimodal"] for k in range(n_seeds)]
            axes[row, 1].plot(x, truth, "k_", ms=20, label="truth")
        axes[row, 1].set_title(f"{s}: fraction |x0_2| > threshold", fontsize=8)
        for ax in axes[row]:
            ax.set_xticks(x, [f"seed {k}" for k in range(n_seeds)])
            ax.legend(fontsize=6)
    return plotting.save(fig, path)


def plot_selection(selections: dict[str, dict], path: Path) -> Path:
    """Validation score of every lr of every arm (first seed), the chosen one ringed."""
    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(selections), figsize=(2.2 * len(selections), 2.8), squeeze=False)
    for ax, (arm, sel) in zip(axes[0], selections.items()):
        lrs = [p["lr"] for p in sel["table"]]
        scores = [next(v for k, v in p.items() if k.startswith("val_")) for p in sel["table"]]
        ax.plot(lrs, scores, "o-")
        ax.plot(sel["chosen"]["lr"], scores[lrs.index(sel["chosen"]["lr"])], "ko", mfc="none", ms=10)
        ax.set_xscale("log")
        ax.set_title(arm, fontsize=7)
        ax.set_xlabel("lr", fontsize=7)
        ax.tick_params(labelsize=6)
    return plotting.save(fig, path)


def plot_digits(many_nfe: int, res: dict, path: Path, n: int = 10) -> Path:
    plt = plotting.pyplot()
    many = f"teacher_nfe{many_nfe}"
    rows = [
        ("clean x0", res["x0"], None),
        ("corrupted x1", res["x1"], None),
        ("teacher NFE 1", res["samples"]["teacher_nfe1"], "teacher_nfe1"),
        (f"teacher NFE {many_nfe}", res["samples"][many], many),
        ("IBMD NFE 1", res["samples"]["ibmd"], "ibmd"),
    ]
    fig, axes = plt.subplots(len(rows), n, figsize=(1.1 * n, 1.25 * len(rows)))
    v = res["values"]
    for r, (label, x, key) in enumerate(rows):
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(x[c].reshape(8, 8).clamp(-1, 1).numpy(), cmap="gray_r", vmin=-1, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        extra = f"\nED {v[f'{key}/ed_plugin']:.3f}\nacc {v[f'{key}/class_acc']:.2f}" if key else ""
        axes[r, 0].set_ylabel(label + extra, fontsize=6, rotation=0, ha="right", va="center")
    return plotting.save(fig, path)
