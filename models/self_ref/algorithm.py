"""Self-REF's algorithm: training examples, Algorithm 1's data, answers and confidences, and the metrics.

AUROC and ECE come from ``torchmetrics`` (``binary_auroc``; ``binary_calibration_error`` with the l1 norm and
equal-width bins); the routing curve and its random-routing expectation are computed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.common.tiny_lm import EOS, TinyLM, Tokenizer, right_pad

from .config import Config
from .data import CONFIDENT, UNCONFIDENT
from .networks import attend


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
def greedy_decode(
    model: TinyLM, prompts: torch.Tensor, max_new: int, stop_ids: list[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuation of equal-length (unpadded) prompts with a key/value cache.

    The same tokens and next-token log-distributions as ``tiny_lm.generate`` (which re-runs the whole
    sequence every step, with a padding mask): ``tokens`` (B, n) hold ``pad_id`` after a row's first stop
    token, ``logprobs`` (B, n, V). Each step costs one position instead of the whole sequence (~5x less
    decoding compute at these lengths); ``test_cached_decoding_matches_generate`` checks the equality.
    """
    B, T = prompts.shape
    if T + max_new - 1 > model.config.n_positions:
        raise ValueError(f"prompt length {T} + {max_new} new tokens exceeds n_positions={model.config.n_positions}")
    stops = torch.as_tensor(stop_ids, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    caches: list = [None] * len(model.h)
    x = model.wte(prompts) + model.wpe(torch.arange(T))
    tokens, logprobs = [], []
    for step in range(max_new):
        for i, block in enumerate(model.h):
            y, caches[i] = attend(block, x, caches[i])
            x = x + block.attn.c_proj(y)
            x = x + block.mlp(block.ln_2(x))
        logp = torch.log_softmax(model.logits(model.ln_f(x[:, -1])).float(), -1)
        nxt = torch.where(done, torch.full((B,), pad_id), logp.argmax(-1))
        tokens.append(nxt)
        logprobs.append(logp)
        done |= torch.isin(nxt, stops)
        if bool(done.all()) or step == max_new - 1:
            break
        x = model.wte(nxt[:, None]) + model.wpe(torch.full((1,), T + step))
    return torch.stack(tokens, 1), torch.stack(logprobs, 1)


@dataclass
class ReadOut:
    """What a batch of decoded rows says: the answer (digits up to the first non-digit token, at ``end``),
    its token probabilities' product and mean, the log-distribution that follows the answer (``after``;
    unknown, NaN, when the answer filled every decoded position) and the verbalised digit / 9 (NaN if absent)."""

    end: np.ndarray
    text: list[str]
    product: np.ndarray
    mean: np.ndarray
    after: np.ndarray
    verbal: np.ndarray


def read_out(tokens: np.ndarray, logp: np.ndarray, digit_of: np.ndarray, semicolon: int) -> ReadOut:
    """``tokens`` (B, n) and next-token log-distributions ``logp`` (B, n, V) of greedy decoding, read with
    array operations; ``digit_of[id]`` is the digit a token writes, -1 for the other tokens."""
    rows = np.arange(len(tokens))
    digits = digit_of[tokens]
    width = tokens.shape[1]
    end = np.where((digits < 0).any(1), (digits < 0).argmax(1), width)
    in_answer = np.arange(width) < end[:, None]
    probs = np.exp(np.take_along_axis(logp, tokens[..., None], -1)[..., 0])
    answered = end > 0  # no answer at all: no confidence (product and mean 0)
    product = np.where(answered, np.where(in_answer, probs, 1.0).prod(1), 0.0)
    mean = np.where(answered, np.where(in_answer, probs, 0.0).sum(1) / np.maximum(end, 1), 0.0)
    text = ["".join(map(str, row[:e])) for row, e in zip(digits, end)]
    after = np.where((end < width)[:, None], logp[rows, np.minimum(end, width - 1)], np.nan)
    digit_next = digits[rows, np.minimum(end + 1, width - 1)]
    written = (end + 1 < width) & (tokens[rows, np.minimum(end, width - 1)] == semicolon) & (digit_next >= 0)
    return ReadOut(end, text, product, mean, after, np.where(written, digit_next / 9.0, np.nan))


@torch.no_grad()
def answer_questions(model: TinyLM, tok: Tokenizer, records: list[dict], reverse: bool, batch: int = 1024) -> Answers:
    """Greedy decoding until the first non-digit token; confidences read from the same pass.

    Prompts are decoded in groups of equal length (no padding, so no attention mask: ``greedy_decode``)
    and read with ``read_out``; the answers keep the order of ``records``."""
    model.eval()
    digit_of = np.full(len(tok), -1)
    digit_of[[tok.id(str(i)) for i in range(10)]] = np.arange(10)
    stop = [tok.id(t) for t in (EOS, CONFIDENT, UNCONFIDENT) if t in tok.tokens]  # ';' is followed by the verbal digit
    cn = tok.id(CONFIDENT) if CONFIDENT in tok.tokens else None
    un = tok.id(UNCONFIDENT) if UNCONFIDENT in tok.tokens else None
    max_new = max(len(r["answer"]) for r in records) + 4  # room for the answer, a stop token and "; d"
    prompts = [tok.encode(r["prompt"], bos=True) for r in records]
    n = len(records)
    text = [""] * n
    product, mean, selfref, verbal = np.zeros(n), np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
    lengths = np.array([len(p) for p in prompts])
    for length in np.unique(lengths):
        same = np.flatnonzero(lengths == length)
        for start in range(0, len(same), batch):
            rows = same[start : start + batch]
            tokens, logp = greedy_decode(model, torch.as_tensor([prompts[i] for i in rows]), max_new, stop, tok.pad_id)
            out = read_out(tokens.numpy(), logp.numpy(), digit_of, tok.id(";"))
            for j, i in enumerate(rows):
                text[i] = out.text[j]
            product[rows], mean[rows], verbal[rows] = out.product, out.mean, out.verbal
            if cn is not None:
                after = out.after
                for j in np.flatnonzero(out.end == tokens.shape[1]):  # the answer filled the budget: one more step
                    full = torch.as_tensor([prompts[rows[j]] + tokens[j].tolist()])
                    after[j] = torch.log_softmax(model(full)[0, -1].float(), -1).numpy()
                p_cn, p_un = np.exp(after[:, cn]), np.exp(after[:, un])
                total = p_cn + p_un
                selfref[rows] = np.where(total > 0, p_cn / np.where(total > 0, total, 1.0), 0.5)
    correct = np.array([t == target_text(r, reverse) for t, r in zip(text, records)])
    return Answers(text, correct, product, mean, selfref, verbal)


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


def shuffled_selfref_data(
    selfref: tuple, rng: np.random.Generator
) -> tuple[list[dict], list[str], list[list[str]], list[float]]:
    """The Self-REF mixture with its <CN>/<UN> suffixes permuted across the samples (the negative control):
    the same items, answers, label counts and masking, but a label that says nothing about correctness."""
    recs, answers, suffixes, weights = selfref
    order = rng.permutation(len(suffixes))
    return recs, answers, [suffixes[i] for i in order], weights


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
    if "selfref_shuffled" in answers:  # the negative control: Self-REF trained on shuffled <CN>/<UN> labels
        out["control_shuffled"] = (fill(answers["selfref_shuffled"].selfref), answers["selfref_shuffled"])
    return out
