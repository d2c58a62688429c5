"""Self-REF's algorithm: training examples, Algorithm 1's data, answers and confidences, and the metrics.

AUROC and ECE come from ``torchmetrics`` (``binary_auroc``; ``binary_calibration_error`` with the l1 norm and
equal-width bins); the routing curve and its random-routing expectation are computed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.common.tiny_lm import EOS, TinyLM, Tokenizer, generate, left_pad, right_pad

from .config import Config
from .data import CONFIDENT, UNCONFIDENT


def target_text(rec: dict, reverse: bool) -> str:
    """What the model should write for a record: its answer, digits reversed when ``reverse``."""
    return rec["answer"][::-1] if reverse else rec["answer"]


def lm_examples(
    tok: Tokenizer,
    records: list[dict],
    answers: list[str] | None = None,
    suffixes: list[list[str]] | None = None,
    answer_weight: list[float] | None = None,
    reverse: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``<bos> prompt answer suffix`` rows, per-token loss weights, and answer masks.

    The prompt is never a target; the answer tokens weigh ``answer_weight[i]`` (0 masks them);
    the suffix tokens (``<eos>``, a confidence token, ``; d <eos>``) always weigh 1. The third
    tensor marks the answer positions (where a confidence token must not appear yet).
    """
    rows, weights, answer_mask = [], [], []
    for i, rec in enumerate(records):
        prompt = tok.encode(rec["prompt"], bos=True)
        answer = tok.encode(answers[i] if answers is not None else target_text(rec, reverse))
        suffix = tok.encode(suffixes[i] if suffixes is not None else [EOS])
        a_w = 1.0 if answer_weight is None else answer_weight[i]
        rows.append(prompt + answer + suffix)
        weights.append([0.0] * len(prompt) + [a_w] * len(answer) + [1.0] * len(suffix))
        answer_mask.append([0.0] * len(prompt) + [1.0] * len(answer))
    width = max(len(r) for r in rows)
    w, m = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for i, (row_w, row_m) in enumerate(zip(weights, answer_mask)):
        w[i, : len(row_w)] = torch.as_tensor(row_w)
        m[i, : len(row_m)] = torch.as_tensor(row_m)
    return right_pad(rows, tok.pad_id, width), w, m


@dataclass
class Answers:
    """A model's greedy answers to a list of questions and the confidence read-outs."""

    text: list[str]
    correct: np.ndarray  # (n,) bool
    prob_product: np.ndarray  # prod of the answer tokens' probabilities
    prob_mean: np.ndarray  # mean of the answer tokens' probabilities
    selfref: np.ndarray  # P(<CN>) / (P(<CN>) + P(<UN>)) after the answer (nan without the tokens)
    verbal: np.ndarray  # the digit written after ';' divided by 9 (nan when absent)


@torch.no_grad()
def answer_questions(model: TinyLM, tok: Tokenizer, records: list[dict], reverse: bool, batch: int = 1024) -> Answers:
    """Greedy decoding until the first non-digit token; confidences read from the same pass."""
    model.eval()
    digits = {tok.id(str(i)): i for i in range(10)}
    stop = [tok.id(t) for t in (EOS, CONFIDENT, UNCONFIDENT) if t in tok.tokens]  # ';' is followed by the verbal digit
    cn = tok.id(CONFIDENT) if CONFIDENT in tok.tokens else None
    un = tok.id(UNCONFIDENT) if UNCONFIDENT in tok.tokens else None
    semicolon = tok.id(";")
    max_answer = max(len(r["answer"]) for r in records) + 2
    text, product, mean, selfref, verbal = [], [], [], [], []
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        ids, mask = left_pad([tok.encode(r["prompt"], bos=True) for r in chunk], tok.pad_id)
        gen = generate(model, ids, max_answer + 2, attention_mask=mask, stop_ids=stop, pad_id=tok.pad_id)
        tokens, logp = gen.tokens.numpy(), gen.logprobs.numpy()
        for i in range(len(chunk)):
            row = tokens[i]
            end = next((t for t, x in enumerate(row) if int(x) not in digits), len(row))  # first non-digit
            answer = "".join(str(digits[int(x)]) for x in row[:end])
            probs = np.exp(logp[i, np.arange(end), row[:end]]) if end else np.array([0.0])  # no answer: no confidence
            text.append(answer)
            product.append(float(np.prod(probs)))
            mean.append(float(np.mean(probs)))
            if cn is not None:
                if end < logp.shape[1]:
                    after = logp[i, end]
                else:  # the answer filled the whole budget: one more step gives the distribution after it
                    full = torch.as_tensor([tok.encode(chunk[i]["prompt"], bos=True) + row[:end].tolist()])
                    after = torch.log_softmax(model(full)[0, -1].float(), -1).numpy()
                p_cn, p_un = np.exp(after[cn]), np.exp(after[un])
                selfref.append(float(p_cn / (p_cn + p_un)) if p_cn + p_un > 0 else 0.5)
            else:
                selfref.append(float("nan"))
            if end + 1 < len(row) and int(row[end]) == semicolon and int(row[end + 1]) in digits:
                verbal.append(digits[int(row[end + 1])] / 9.0)
            else:
                verbal.append(float("nan"))
    correct = np.array([t == target_text(r, reverse) for t, r in zip(text, records)])
    return Answers(text, correct, np.array(product), np.array(mean), np.array(selfref), np.array(verbal))


# ----------------------------------------------------------------------------- Self-REF data (Algorithm 1)


def selfref_data(
    tok: Tokenizer, records: list[dict], base: Answers, cfg: Config, rng: np.random.Generator
) -> tuple[list[dict], list[str], list[list[str]], list[float]]:
    """D_CN = {(x, y_hat + <CN>) : y_hat = y}, D_UN = {(x, y_hat + <UN>) : y_hat != y}, <UN> subsampled.

    Returns the kept records, their base answers, suffixes and answer weights (0 on <UN> answers:
    the gradient masking that keeps wrong answers from being reinforced).
    """
    cn = np.flatnonzero(base.correct)
    un = np.flatnonzero(~base.correct)
    if not len(cn):
        raise ValueError(
            f"the small LM answers none of the {len(records)} questions correctly: Self-REF has no "
            "<CN> examples (pretrain it longer: data.pretrain_epochs, or make the questions easier)"
        )
    keep_un = min(len(un), max(1, int(round(cfg.un_ratio * len(cn)))))
    un = np.sort(rng.choice(un, size=keep_un, replace=False)) if len(un) else un
    kept = np.sort(np.concatenate([cn, un]))
    recs = [records[i] for i in kept]
    answers = [base.text[i] for i in kept]
    suffixes = [[CONFIDENT] if base.correct[i] else [UNCONFIDENT] for i in kept]
    weights = [
        (1.0 if cfg.cn_answer_loss else 0.0) if base.correct[i] else (0.0 if cfg.mask_un_answers else 1.0) for i in kept
    ]
    return recs, answers, suffixes, weights


def finetuned_logits_data(
    records: list[dict], base: Answers, selfref: tuple
) -> tuple[list[dict], list[str], list[list[str]], list[float]]:
    """The same mixture without confidence tokens (the paper's "fine-tuned logits" baseline): with the
    wrong answers masked, what is left to learn are the correct answers of the <CN> samples."""
    recs, answers, suffixes, _ = selfref
    keep = [i for i, s in enumerate(suffixes) if s == [CONFIDENT]]
    return [recs[i] for i in keep], [answers[i] for i in keep], [[EOS] for _ in keep], [1.0 for _ in keep]


def verbalized_data(
    records: list[dict], base: Answers, selfref: tuple
) -> tuple[list[dict], list[str], list[list[str]], list[float]]:
    """``y_hat ; d <eos>`` with d = round(9 x the base accuracy of the item's group on split B)."""
    recs, answers, _, weights = selfref
    groups: dict[str, list[bool]] = {}
    for rec, ok in zip(records, base.correct):
        groups.setdefault(rec["group"], []).append(bool(ok))
    digit = {g: str(int(round(9 * np.mean(v)))) for g, v in groups.items()}
    return recs, answers, [[";", digit[r["group"]], EOS] for r in recs], weights


# ----------------------------------------------------------------------------- metrics


def auroc(correct: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` for ``correct`` (0.5 when only one class is present)."""
    from torchmetrics.functional.classification import binary_auroc

    correct = np.asarray(correct, bool)
    if not 0 < correct.mean() < 1:
        return 0.5
    return float(binary_auroc(torch.as_tensor(score, dtype=torch.float64), torch.as_tensor(correct, dtype=torch.long)))


def ece(correct: np.ndarray, score: np.ndarray, bins: int) -> float:
    """Expected calibration error: sum over ``bins`` equal-width bins [k/b, (k+1)/b) of |accuracy - mean score|
    weighted by the bin's share of items, the last bin closed at 1.

    torchmetrics gives a score of exactly 1 a bin of its own (its bins are half-open up to the edge 1); the
    overconfident base model writes such scores, so they are moved to the largest double below 1 (the last bin).
    """
    from torchmetrics.functional.classification import binary_calibration_error

    score = np.minimum(np.asarray(score, dtype=np.float64), np.nextafter(1.0, 0.0))
    return float(
        binary_calibration_error(
            torch.as_tensor(score), torch.as_tensor(np.asarray(correct), dtype=torch.long), n_bins=bins, norm="l1"
        )
    )


def routing_curve(
    small_correct: np.ndarray, large_correct: np.ndarray, score: np.ndarray, rates: np.ndarray, tie_break: np.ndarray
) -> np.ndarray:
    """Accuracy when the round(rate n) least confident queries go to the large model (ties in random order)."""
    order = np.lexsort((tie_break, score))  # ascending confidence
    n = len(score)
    routed_gain = np.concatenate([[0.0], np.cumsum((large_correct.astype(float) - small_correct)[order])])
    return small_correct.mean() + routed_gain[np.round(rates * n).astype(int)] / n


def random_routing_sd(
    small_correct: np.ndarray, large_correct: np.ndarray, rates: np.ndarray, draws: int
) -> np.ndarray:
    """Standard deviation of the mean-over-draws random-routing accuracy (sampling without replacement)."""
    n = len(small_correct)
    d = large_correct.astype(float) - small_correct
    k = np.round(rates * n)
    var = k * d.var() * (n - k) / max(n - 1, 1) / n**2
    return np.sqrt(var / draws)


def trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def confidence_sources(answers: dict[str, Answers], rng: np.random.Generator) -> dict[str, tuple[np.ndarray, Answers]]:
    """(confidence score, answers it goes with) per source; missing read-outs fall back to 0.5."""
    fill = lambda x: np.where(np.isfinite(x), x, 0.5)
    base = answers["base"]
    out = {
        "method": (fill(answers["selfref"].selfref), answers["selfref"]),
        "baseline": (base.prob_product, base),
        "baseline_mean": (base.prob_mean, base),
        "finetuned_logits": (answers["finetuned_logits"].prob_product, answers["finetuned_logits"]),
        "random": (rng.random(len(base.correct)), base),
    }
    if "verbalized" in answers:
        out["verbalized"] = (fill(answers["verbalized"].verbal), answers["verbalized"])
    return out
