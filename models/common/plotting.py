"""Matplotlib set-up shared by the methods' figures (headless, consistent style)."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """Import pyplot on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def learning_curves(
    history: dict[str, list[dict]],
    keys: list[tuple[str, str]],
    path: Path,
    arm_of=lambda variant: variant,
    colors: dict[str, str] | None = None,
    x: str = "epoch",
    log_y: bool = False,
) -> Path:
    """One panel per ``(record key, title)``: that key against ``x`` for every variant of ``history``, coloured
    by its arm (``arm_of(variant)``); a variant's missing ``x`` falls back to the record's index."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.1), squeeze=False)
    palette = dict(colors or {})
    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10)
    labelled: set[str] = set()
    for ax, (key, title) in zip(axes[0], keys):
        for variant, records in history.items():
            arm = arm_of(variant)
            if arm not in palette:
                palette[arm] = next(cycle)
            points = [(r.get(x, i), r[key]) for i, r in enumerate(records) if key in r]
            if points:
                label = arm if arm not in labelled else None
                labelled.add(arm)
                ax.plot(*zip(*points), lw=0.9, color=palette[arm], alpha=0.75, label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(x)
        if log_y:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    return save(fig, path)


def selection_grids(selections, path: Path) -> Path:
    """Every validation grid search (``models.common.evidence.SelectionRecord``): the validation score along the
    grid's first numeric axis per arm, the chosen point ringed, a choice on the grid's edge marked in red."""
    plt = pyplot()
    by_arm: dict[str, list] = {}
    for s in selections:
        by_arm.setdefault(s.arm, []).append(s)
    arms = list(by_arm)
    cols = min(4, max(1, len(arms)))
    rows = (len(arms) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for ax, arm in zip(axes.flat, arms):
        for s in by_arm[arm]:
            axes_of = s.axes()
            axis = next(iter(axes_of), None)
            score = f"val_{s.metric}"
            if axis is None:
                ax.text(0.5, 0.5, "one grid point", ha="center", va="center", transform=ax.transAxes, fontsize=8)
                continue
            # One line per setting of the other axes, the chosen setting drawn solid.
            others = {k: v for k, v in s.chosen.items() if k != axis}
            same = [r for r in s.table if all(r.get(k) == v for k, v in others.items()) and axis in r]
            same.sort(key=lambda r: float(r[axis]))
            ax.plot([float(r[axis]) for r in same], [float(r[score]) for r in same], marker=".", lw=0.8, alpha=0.7)
            edge = axis in s.edges()
            ax.plot(float(s.chosen[axis]), _chosen_score(s, score), "o", mfc="none", ms=9, color="red" if edge else "k")
            values = axes_of[axis]
            if values[0] > 0 and values[-1] / values[0] >= 10:
                ax.set_xscale("log")
            ax.set_xlabel(axis, fontsize=8)
        ax.set_title(f"{arm} ({len(by_arm[arm])} search{'es' if len(by_arm[arm]) > 1 else ''})", fontsize=8)
        ax.set_ylabel(f"validation {by_arm[arm][0].metric}", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(arms) :]:
        ax.axis("off")
    fig.suptitle("Validation grids (ringed: chosen; red: on the grid's edge)", fontsize=9)
    return save(fig, path)


def _chosen_score(selection, score_key: str) -> float:
    for row in selection.table:
        if all(row.get(k) == v for k, v in selection.chosen.items()):
            return float(row[score_key])
    return float("nan")


def fit_budgets(fits, path: Path) -> Path:
    """Every compared fit (``models.common.evidence.FitRecord``): evaluations run and the best one, per arm; a fit
    that ran its whole budget while still improving in red."""
    plt = pyplot()
    arms = list(dict.fromkeys(f.arm for f in fits))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(arms) + 2.5), 3.2))
    for i, arm in enumerate(arms):
        mine = [f for f in fits if f.arm == arm]
        for j, f in enumerate(mine):
            x = i + (j - (len(mine) - 1) / 2) * min(0.6 / max(len(mine), 1), 0.15)
            color = "tab:red" if f.still_improving else "tab:blue"
            ax.plot([x, x], [0, f.trained], color=color, alpha=0.35, lw=3)
            ax.plot(x, f.best + 1, "_", color=color, ms=10, mew=2)
    ax.set_xticks(range(len(arms)), arms, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("validation evaluations (bar: run; tick: best)", fontsize=8)
    ax.set_title("Fits: where the best score came (red: still improving at the end)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    return save(fig, path)
