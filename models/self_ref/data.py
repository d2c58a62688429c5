"""Synthetic arithmetic QA (the offline stand-in for MMLU / OpenBookQA / GSM8K / MedQA).

Questions ``a+b=`` and ``a*b=`` with operand widths drawn per item (difficulty varies within a
split); each record is ``{"prompt", "answer", "split", "group", "large_correct"}`` in JSONL.
``large_correct`` is the simulated large model's (a calculator that is right with probability
``large_accuracy``) verdict on the item, drawn once here so that it is versioned with the data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models.common.arrays import save_npz  # noqa: F401 (re-exported for tests and pipeline)
from models.common.tiny_lm import Tokenizer

from .config import DataConfig

SYMBOLS = tuple("0123456789+*=;")  # ';' introduces the verbalised confidence digit
CONFIDENT, UNCONFIDENT = "<CN>", "<UN>"
SPLITS = ("A", "B", "V", "C", "U")


def make_tokenizer() -> Tokenizer:
    return Tokenizer.build(SYMBOLS)


def operand(width: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniform integers with exactly ``width`` digits (0-9 for width 1)."""
    low = np.where(width == 1, 0, 10 ** (width - 1))
    return low + (rng.random(len(width)) * (10**width - low)).astype(np.int64)


def sample_split(cfg: DataConfig, n: int, split: str, rng: np.random.Generator) -> list[dict]:
    """``n`` questions of one split; split U widens every operand by one digit (never seen: unanswerable)."""
    mul = rng.random(n) < cfg.mul_fraction
    max_width = np.where(mul, cfg.max_mul_width, cfg.max_add_width)
    wa = (rng.random(n) * max_width).astype(np.int64) + 1
    wb = (rng.random(n) * max_width).astype(np.int64) + 1
    if split == "U":
        wa = wb = max_width + 1
    a, b = operand(wa, rng), operand(wb, rng)
    large = rng.random(n) < cfg.large_accuracy
    out = []
    for i in range(n):
        op = "*" if mul[i] else "+"
        value = int(a[i]) * int(b[i]) if mul[i] else int(a[i]) + int(b[i])
        out.append(
            {
                "prompt": f"{a[i]}{op}{b[i]}=",
                "answer": str(value),
                "split": split,
                "group": f"{op}{wa[i]}x{wb[i]}",
                "large_correct": bool(large[i]),
            }
        )
    return out


def fresh_questions(cfg: DataConfig, n: int, split: str, seen: set[str], rng: np.random.Generator) -> list[dict]:
    """``n`` questions of ``split``'s distribution that are not in ``seen`` (which grows by them)."""
    fresh: list[dict] = []
    for _ in range(50):
        for rec in sample_split(cfg, 2 * (n - len(fresh)) + 16, split, rng):
            if rec["prompt"] not in seen and len(fresh) < n:
                seen.add(rec["prompt"])
                fresh.append(rec)
        if len(fresh) == n:
            return fresh
    raise ValueError(
        f"data: only {len(fresh)} of the {n} split-{split} questions requested are new at "
        f"max_add_width={cfg.max_add_width}, max_mul_width={cfg.max_mul_width}; widen the operands or shrink the split"
    )


def make_questions(cfg: DataConfig, rng: np.random.Generator) -> list[dict]:
    """All splits. With ``held_out_distinct`` no B, V, C or U question is in A (the brief: B is held out from
    the small LM's training, and its labels must come from questions it was not trained on) or in another split.

    B, V and C are exchangeable: one pool of n_b + n_v + n_c fresh questions is drawn, shuffled and cut.
    (Filling them one after another, as an earlier version did, gave B the small operand groups A had not
    exhausted and left C the harder rest: base accuracy 0.40 on B against 0.27 on C.) A itself may repeat
    questions (it is a training corpus); U (wider operands) is drawn last.
    """
    sizes = {"A": cfg.n_a, "B": cfg.n_b, "V": cfg.n_v, "C": cfg.n_c, "U": cfg.n_u}
    if not cfg.held_out_distinct:
        return [rec for split in SPLITS for rec in sample_split(cfg, sizes[split], split, rng)]
    out = sample_split(cfg, cfg.n_a, "A", rng)
    seen = {r["prompt"] for r in out}
    pool = fresh_questions(cfg, cfg.n_b + cfg.n_v + cfg.n_c, "B", seen, rng)
    pool = [pool[i] for i in rng.permutation(len(pool))]
    start = 0
    for split in ("B", "V", "C"):
        out += [{**rec, "split": split} for rec in pool[start : start + sizes[split]]]
        start += sizes[split]
    return out + fresh_questions(cfg, cfg.n_u, "U", seen, rng)


def write_jsonl(path: Path, records: list[dict]) -> None:
    Path(path).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def load_questions_jsonl(path: Path, tok: Tokenizer, large_accuracy: float, seed: int) -> list[dict]:
    """QA records from JSONL: ``{"prompt" | "question", "answer", "split"}``.

    GSM8K-style answers (reasoning then ``#### 42``) keep the final number. Items without a
    ``large_correct`` verdict get one drawn with ``large_accuracy``; items without a split are
    spread over A/B/V/C in the proportions 50/20/10/20. Texts must tokenise with ``tok``.
    """
    rng = np.random.default_rng(seed)
    out = []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        prompt = rec.get("prompt", rec.get("question"))
        answer = str(rec.get("answer", ""))
        if prompt is None or not answer:
            raise ValueError(f"{path}:{line_no}: a record needs 'prompt' (or 'question') and 'answer'")
        if "####" in answer:
            answer = answer.rsplit("####", 1)[1]
        answer = answer.strip().replace(",", "")
        prompt = prompt.strip()
        if not prompt.endswith("="):
            prompt += "="
        for text in (prompt, answer):
            tok.encode(text)  # raises a KeyError naming the character that does not fit the vocabulary
        split = rec.get("split") or str(rng.choice(["A", "B", "V", "C"], p=[0.5, 0.2, 0.1, 0.2]))
        if split not in SPLITS:
            raise ValueError(f"{path}:{line_no}: split {split!r} not in {SPLITS}")
        large = rec.get("large_correct")
        out.append(
            {
                "prompt": prompt,
                "answer": answer,
                "split": split,
                "group": str(rec.get("group", "all")),
                "large_correct": bool(rng.random() < large_accuracy) if large is None else bool(large),
            }
        )
    if not out:
        raise ValueError(f"{path}: no records")
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def by_split(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for rec in records:
        out[rec["split"]].append(rec)
    return out
