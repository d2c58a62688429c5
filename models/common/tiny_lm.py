"""A tiny GPT-2-style language model, its symbol tokeniser, LoRA, and Hugging Face-format I/O.

No LLM weights can be downloaded in this project, so methods that need "an LLM" (win_rate,
self_ref) pretrain this model on their synthetic task in their ``prepare`` step and save it in
the Hugging Face folder layout inside their data folder, where DVC versions it::

    <folder>/config.json          GPT-2 config keys (model_type "gpt2", n_embd, n_layer, ...)
    <folder>/model.safetensors    or pytorch_model.bin (a torch.save'd state dict); sharded
                                  checkpoints (*.index.json + shards) are read too
    <folder>/vocab.json           {token: id} of the symbol tokeniser (ours; not GPT-2's BPE)

The architecture *is* GPT-2's (pre-LayerNorm blocks, learned positions, tanh-GELU, tied
input/output embeddings, biases everywhere), so :func:`load_pretrained` also reads a real
GPT-2-family checkpoint (``gpt2``, ``distilgpt2``, a locally trained one) from a local path:
its Conv1D weights are stored (in, out) and are transposed into ``nn.Linear``. Dropout is not
modelled (these models are trained briefly, and deterministically). The ``safetensors`` format is
read and written here in plain Python (the package is not installed in the project's venv).

Also here, for the methods: sequence log-probabilities, batched generation with left padding,
LoRA adapters, and a Lightning module for token-weighted language modelling (pretraining and
masked fine-tuning).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------- tokeniser

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


@dataclass(frozen=True)
class Tokenizer:
    """Symbol-level tokeniser: each token is a character or a bracketed special like ``<CN>``.

    Encoding matches the longest token at each position, so ``"12+3=<CN>"`` becomes
    ``["1", "2", "+", "3", "=", "<CN>"]``. Ids of existing tokens never change when tokens are
    added (:meth:`with_tokens`), so a checkpoint stays valid after its vocabulary grows.
    """

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("duplicate tokens in the vocabulary")
        if not all(self.tokens):
            raise ValueError("empty token in the vocabulary")

    @classmethod
    def build(cls, symbols: Iterable[str], specials: Sequence[str] = (PAD, BOS, EOS)) -> Tokenizer:
        return cls(tuple(specials) + tuple(symbols))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    def id(self, token: str) -> int:
        try:
            return self.tokens.index(token)
        except ValueError:
            raise KeyError(f"token {token!r} is not in the vocabulary") from None

    @property
    def pad_id(self) -> int:
        return self.id(PAD)

    def encode(self, text: str | Sequence[str], bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of ``text`` (a string, greedily split into tokens, or an explicit token list)."""
        if isinstance(text, str):
            pieces, by_length, i = [], sorted(self.tokens, key=len, reverse=True), 0
            while i < len(text):
                match = next((t for t in by_length if text.startswith(t, i)), None)
                if match is None:
                    raise KeyError(f"cannot tokenise {text[i:]!r}: {text[i]!r} is not in the vocabulary")
                pieces.append(match)
                i += len(match)
        else:
            pieces = list(text)
        index = self.index
        ids = [index[p] if p in index else self.id(p) for p in pieces]
        return ([index[BOS]] if bos else []) + ids + ([index[EOS]] if eos else [])

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        specials = {PAD, BOS, EOS}
        return "".join(self.tokens[int(i)] for i in ids if not (skip_special and self.tokens[int(i)] in specials))

    def with_tokens(self, new: Sequence[str]) -> Tokenizer:
        """This vocabulary plus ``new`` tokens appended (existing ids unchanged)."""
        return Tokenizer(self.tokens + tuple(t for t in new if t not in self.tokens))

    def save(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "vocab.json").write_text(json.dumps(self.index, indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Tokenizer:
        path = Path(folder) / "vocab.json"
        if not path.is_file():
            raise FileNotFoundError(f"no vocab.json in {folder}")
        index = json.loads(path.read_text())
        if sorted(index.values()) != list(range(len(index))):
            raise ValueError(f"{path}: ids must be 0..n-1 without gaps")
        if (Path(folder) / "merges.txt").is_file():
            raise ValueError(f"{folder} holds a BPE tokeniser (merges.txt); only symbol vocabularies are supported")
        return cls(tuple(sorted(index, key=index.__getitem__)))


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class LMConfig:
    """GPT-2 hyper-parameters under their Hugging Face names."""

    vocab_size: int
    n_positions: int = 32
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_inner: int | None = None  # None = 4 * n_embd, as in GPT-2
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"activation_function {self.activation_function!r} not in {sorted(ACTIVATIONS)}")

    @property
    def inner(self) -> int:
        return self.n_inner or 4 * self.n_embd

    def to_hf(self) -> dict[str, Any]:
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            **asdict(self),
            "n_ctx": self.n_positions,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
        }

    @classmethod
    def from_hf(cls, values: Mapping[str, Any]) -> LMConfig:
        model_type = values.get("model_type", "gpt2")
        if model_type != "gpt2":
            raise ValueError(f"unsupported model_type {model_type!r}: only GPT-2-architecture checkpoints load")
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in names})


ACTIVATIONS = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
}


class Attention(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """``allowed`` (B, 1, T, T) marks the keys each query may see; None = plain causal."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner)
        self.c_proj = nn.Linear(config.inner, config.n_embd)
        self.act = ACTIVATIONS[config.activation_function]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), allowed)
        return x + self.mlp(self.ln_2(x))


class TinyLM(nn.Module):
    """GPT-2: token + position embeddings, pre-LN blocks, final LayerNorm, tied output layer.

    ``attention_mask`` (1 = token, 0 = padding) is only needed for left-padded batches: it
    shifts positions so each sequence starts at position 0 and hides the padding from keys.
    Right padding needs no mask (causal attention never looks ahead).
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T = ids.shape
        if T > self.config.n_positions:
            raise ValueError(f"sequence length {T} exceeds n_positions={self.config.n_positions}")
        if attention_mask is None:
            positions, allowed = torch.arange(T, device=ids.device).expand(B, T), None
        else:
            mask = attention_mask.bool()
            positions = (mask.long().cumsum(1) - 1).clamp(min=0)
            causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
            eye = torch.eye(T, dtype=torch.bool, device=ids.device)
            allowed = (causal & mask[:, None, None, :]) | eye  # a padding query attends to itself only
        x = self.wte(ids) + self.wpe(positions)
        for block in self.h:
            x = block(x, allowed)
        return self.ln_f(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self.wte.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(hidden, head)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.logits(self.hidden(ids, attention_mask))

    def add_tokens(self, n_new: int) -> list[int]:
        """Grow the vocabulary by ``n_new`` tokens whose embeddings start at the mean embedding.

        The mean of the existing rows keeps the new tokens' initial logits typical rather than
        random (the brief's recipe for confidence tokens). Returns the new ids.
        """
        old = self.wte.weight.data
        grown = nn.Embedding(old.shape[0] + n_new, old.shape[1])
        grown.weight.data[: old.shape[0]] = old
        grown.weight.data[old.shape[0] :] = old.mean(0, keepdim=True)
        self.wte = grown
        if not self.config.tie_word_embeddings:
            head = nn.Linear(old.shape[1], old.shape[0] + n_new, bias=False)
            head.weight.data[: old.shape[0]] = self.lm_head.weight.data
            head.weight.data[old.shape[0] :] = self.lm_head.weight.data.mean(0, keepdim=True)
            self.lm_head = head
        self.config = LMConfig(**{**asdict(self.config), "vocab_size": old.shape[0] + n_new})
        return list(range(old.shape[0], old.shape[0] + n_new))


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- LoRA


class LoRALinear(nn.Module):
    """``base(x) + (alpha / r) * x A^T B^T``: a frozen linear layer plus a trainable low-rank update.

    B starts at zero, so wrapping a layer does not change the model until training moves it.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(
            torch.randn(rank, base.in_features, generator=generator) / math.sqrt(base.in_features)
        )
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def merged(self) -> nn.Linear:
        layer = nn.Linear(self.base.in_features, self.base.out_features)
        with torch.no_grad():
            layer.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
            layer.bias.copy_(self.base.bias)
        return layer


def add_lora(
    model: TinyLM, rank: int, alpha: float, targets: Sequence[str] = ("attn.c_attn",), seed: int = 0
) -> list[nn.Parameter]:
    """Freeze ``model`` and wrap the linear layers named ``h.<i>.<target>`` in LoRA; returns the new parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    params: list[nn.Parameter] = []
    for block in model.h:
        for target in targets:
            parent_name, _, child = target.rpartition(".")
            parent = block.get_submodule(parent_name) if parent_name else block
            layer = LoRALinear(getattr(parent, child), rank, alpha, generator)
            setattr(parent, child, layer)
            params += [layer.lora_A, layer.lora_B]
    return params


def merge_lora(model: TinyLM) -> TinyLM:
    """Fold every LoRA adapter into its base layer (in place): a plain TinyLM again."""
    for block in model.h:
        for name, module in list(block.named_modules()):
            if isinstance(module, LoRALinear):
                parent_name, _, child = name.rpartition(".")
                setattr(block.get_submodule(parent_name) if parent_name else block, child, module.merged())
    for p in model.parameters():
        p.requires_grad_(True)
    return model


# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(
    path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None
) -> None:
    """Write the safetensors format: u64 header length, JSON header, raw little-endian bytes.

    Tensors are laid out in name order, so the bytes depend on the values only (DVC-friendly).
    """
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _ST_NAMES:
            raise TypeError(f"{name}: dtype {t.dtype} is not supported by safetensors")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _ST_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for raw in blobs:
            fh.write(raw)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path} is not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path} is not a safetensors file (header length {n} exceeds the file)")
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _ST_DTYPES[info["dtype"]]
        if end > len(body):
            raise ValueError(f"{path}: tensor {name!r} runs past the end of the file")
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(info["shape"])
    return out


# ----------------------------------------------------------------------------- Hugging Face folders

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_IGNORED = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers of old GPT-2 checkpoints


def to_hf_state_dict(model: TinyLM) -> dict[str, torch.Tensor]:
    """Our state dict under GPT2LMHeadModel names (Conv1D weights stored (in, out))."""
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ValueError("merge the LoRA adapters (merge_lora) before saving")
    out = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("lm_head."):
            out[name] = tensor
            continue
        out["transformer." + name] = tensor.t().contiguous() if name.endswith(_CONV1D) else tensor
    return out


def from_hf_state_dict(state: Mapping[str, torch.Tensor], config: LMConfig) -> dict[str, torch.Tensor]:
    """A GPT-2 (``GPT2LMHeadModel`` or bare ``GPT2Model``) state dict renamed to ours."""
    out = {}
    for name, tensor in state.items():
        if name.endswith(_IGNORED):
            continue
        if name == "lm_head.weight":
            if not config.tie_word_embeddings:
                out[name] = tensor
            continue  # tied: the output layer is the token embedding
        key = name.removeprefix("transformer.")
        out[key] = tensor.t() if key.endswith(_CONV1D) else tensor
    return out


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    for index_name, reader in (
        ("model.safetensors.index.json", read_safetensors),
        ("pytorch_model.bin.index.json", lambda p: torch.load(p, weights_only=True, map_location="cpu")),
    ):
        index = folder / index_name
        if index.is_file():
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
                state.update(reader(folder / shard))
            return state
    if (folder / "model.safetensors").is_file():
        return read_safetensors(folder / "model.safetensors")
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(folder / "pytorch_model.bin", weights_only=True, map_location="cpu")
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin (or a sharded index) in {folder}")


def save_pretrained(
    model: TinyLM, folder: Path, tokenizer: Tokenizer | None = None, weights: str = "safetensors"
) -> Path:
    """Write ``model`` (and ``tokenizer``) as a Hugging Face GPT-2 folder; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_hf(), indent=1, sort_keys=True) + "\n")
    state = to_hf_state_dict(model)
    if weights == "safetensors":
        write_safetensors(folder / "model.safetensors", state, {"format": "pt"})
    elif weights == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:
        raise ValueError(f"weights must be 'safetensors' or 'bin', not {weights!r}")
    if tokenizer is not None:
        if len(tokenizer) != model.config.vocab_size:
            raise ValueError(f"tokeniser has {len(tokenizer)} tokens, the model {model.config.vocab_size}")
        tokenizer.save(folder)
    return folder


def load_pretrained(folder: Path) -> TinyLM:
    """Rebuild a TinyLM from a Hugging Face GPT-2 folder (ours, or a real GPT-2 checkpoint)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no config.json in {folder}")
    config = LMConfig.from_hf(json.loads((folder / "config.json").read_text()))
    model = TinyLM(config)
    state = {
        k: v.float() if v.is_floating_point() else v
        for k, v in from_hf_state_dict(_read_weights(folder), config).items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{folder}: weights do not fit the config (missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    return model.eval()


def load_tokenizer(folder: Path) -> Tokenizer:
    return Tokenizer.load(folder)


# ----------------------------------------------------------------------------- scoring and generation


def next_token_logprobs(model: TinyLM, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t = 1..T-1: shape (B, T-1)."""
    logits = model(ids[:, :-1], None if attention_mask is None else attention_mask[:, :-1])
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]


def sequence_logprob(
    model: TinyLM, ids: torch.Tensor, target_mask: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Sum of log-probabilities of the tokens where ``target_mask`` (aligned with ``ids``) is set."""
    return (next_token_logprobs(model, ids, attention_mask) * target_mask[:, 1:].to(torch.float32)).sum(1)


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into (ids, attention_mask)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        if len(s):
            ids[i, width - len(s) :] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids, mask


def right_pad(sequences: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> torch.Tensor:
    width = width or max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.as_tensor(list(s)[:width], dtype=torch.long)
    return ids


@dataclass
class Generation:
    """``tokens`` (B, n): generated ids (``pad`` after a stop token); ``logprobs`` (B, n, V): the
    next-token log-distribution at every generated position; ``length`` (B,): tokens up to and
    including the first stop token (n if none)."""

    tokens: torch.Tensor
    logprobs: torch.Tensor
    length: torch.Tensor = field(default_factory=lambda: torch.empty(0))


@torch.no_grad()
def generate(
    model: TinyLM,
    prompt_ids: torch.Tensor,
    max_new: int,
    *,
    attention_mask: torch.Tensor | None = None,
    sample: bool = False,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    stop_ids: Sequence[int] = (),
    pad_id: int = 0,
    allowed_ids: Sequence[int] | None = None,
) -> Generation:
    """Greedy or sampled continuation of (left-padded) prompts, without a KV cache (tiny models).

    ``allowed_ids`` constrains decoding to those tokens (the others get probability 0 and the
    returned log-distribution is renormalised over the allowed ones).
    """
    B = prompt_ids.shape[0]
    blocked = None
    if allowed_ids is not None:
        blocked = torch.ones(model.config.vocab_size, dtype=torch.bool)
        blocked[torch.as_tensor(list(allowed_ids), dtype=torch.long)] = False
    ids = prompt_ids
    mask = torch.ones_like(prompt_ids) if attention_mask is None else attention_mask
    done = torch.zeros(B, dtype=torch.bool)
    length = torch.full((B,), max_new, dtype=torch.long)
    tokens, logprobs = [], []
    stops = torch.as_tensor(list(stop_ids), dtype=torch.long)
    for step in range(max_new):
        logits = model(ids, mask if attention_mask is not None else None)[:, -1].float()
        if blocked is not None:
            logits = logits.masked_fill(blocked, float("-inf"))
        logp = torch.log_softmax(logits, -1)
        if sample:  # inverse-CDF draw (torch.multinomial is slow on CPU for many small rows)
            cdf = torch.softmax(logp / temperature, -1).cumsum(-1)
            u = torch.rand(B, 1, generator=generator, dtype=cdf.dtype) * cdf[:, -1:]
            nxt = (cdf < u).sum(-1).clamp(max=cdf.shape[-1] - 1)
        else:
            nxt = logp.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        logprobs.append(logp)
        if len(stops):
            hit = torch.isin(nxt, stops) & ~done
            length = torch.where(hit, torch.full_like(length, step + 1), length)
            done |= hit
        ids = torch.cat([ids, nxt[:, None]], 1)
        mask = torch.cat(
            [
                mask,
                (~done | torch.isin(nxt, stops)).long()[:, None] if len(stops) else torch.ones(B, 1, dtype=torch.long),
            ],
            1,
        )
        if bool(done.all()):
            break
    return Generation(torch.stack(tokens, 1), torch.stack(logprobs, 1), length)


# ----------------------------------------------------------------------------- Lightning: token-weighted LM


class LanguageModelling(L.LightningModule):
    """Next-token cross-entropy weighted per target token, optionally plus distillation:

        loss = [sum_t w_t CE(ids_t, p_theta(. | x_<t)) + sum_t s_t CE(q_t, p_theta(. | x_<t))] / sum_t w_t

    Batches are ``(ids, weights)`` or ``(ids, weights, soft_weights, soft_targets)`` with right
    padding; ``weights[:, t]`` weighs predicting ``ids[:, t]`` (0 on prompts, padding, or masked
    answers) and ``soft_targets[:, t]`` (a distribution over the first V tokens, e.g. a frozen
    reference model's) is matched where ``soft_weights[:, t] > 0``. Pretraining and Self-REF's
    masked fine-tuning are this one module with different weights.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float,
        weight_decay: float = 0.0,
        params: Sequence[nn.Parameter] | None = None,
        grad_masks: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.model, self.lr, self.weight_decay = model, lr, weight_decay
        self.trainable = list(params) if params is not None else None
        self.grad_masks = dict(grad_masks or {})

    def shared_step(self, batch, stage: str) -> torch.Tensor:
        ids, weights = batch[0], batch[1]
        logp_all = torch.log_softmax(self.model(ids[:, :-1]).float(), -1)
        logp = logp_all.gather(-1, ids[:, 1:, None])[..., 0]
        w = weights[:, 1:].to(logp.dtype)
        denominator = w.sum().clamp(min=1e-8)
        loss = -(logp * w).sum() / denominator
        logs = {}
        if len(batch) > 2:
            soft_w, soft = batch[2][:, 1:].to(logp.dtype), batch[3][:, 1:].to(logp.dtype)
            distill = -((soft * logp_all[..., : soft.shape[-1]]).sum(-1) * soft_w).sum() / denominator
            loss = loss + distill
            logs[f"{stage}/distill"] = distill
        self.log_dict({f"{stage}/loss": loss, **logs}, on_step=False, on_epoch=True, batch_size=len(ids))
        return loss

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.shared_step(batch, "val")

    def on_after_backward(self) -> None:
        # Freeze parts of a tensor (e.g. the old rows of a grown embedding): zero their gradient.
        for name, p in self.model.named_parameters():
            if name in self.grad_masks and p.grad is not None:
                p.grad.mul_(self.grad_masks[name])

    def configure_optimizers(self):
        params = (
            self.trainable if self.trainable is not None else [p for p in self.model.parameters() if p.requires_grad]
        )
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)


__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "Generation",
    "LMConfig",
    "LanguageModelling",
    "LoRALinear",
    "Tokenizer",
    "TinyLM",
    "add_lora",
    "from_hf_state_dict",
    "generate",
    "left_pad",
    "load_pretrained",
    "load_tokenizer",
    "merge_lora",
    "n_parameters",
    "next_token_logprobs",
    "read_safetensors",
    "right_pad",
    "save_pretrained",
    "sequence_logprob",
    "to_hf_state_dict",
    "write_safetensors",
]
