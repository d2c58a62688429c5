"""Networks: a CLIP-layout encoder (+ a loader for OpenAI-layout state dicts), OTTER's text-aware
selection and policy, the all-tokens baseline head, and the grounded contrastive loss."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# ----------------------------------------------------------------------------- encoder (OpenAI CLIP names)


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            OrderedDict(c_fc=nn.Linear(width, 4 * width), gelu=QuickGELU(), c_proj=nn.Linear(4 * width, width))
        )
        self.ln_2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, attn_only: bool = False) -> torch.Tensor:
        h = self.ln_1(x)
        a = self.attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        if attn_only:  # ClearCLIP / OTTER: the last block's self-attention output, no residual, no FFN
            return a
        x = x + a
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, last_attn_only: bool = False) -> torch.Tensor:
        for i, block in enumerate(self.resblocks):
            x = block(x, mask, attn_only=last_attn_only and i == len(self.resblocks) - 1)
        return x


class VisionTransformer(nn.Module):
    def __init__(
        self, image_size: int, patch: int, width: int, layers: int, heads: int, embed_dim: int, stem_channels: int
    ) -> None:
        super().__init__()
        self.image_size, self.grid = image_size, image_size // patch
        # The tiny encoder's 3x3 conv stem (absent in CLIP) makes 4 x 4 patches see colour *and* shape.
        self.stem = (
            nn.Sequential(nn.Conv2d(3, stem_channels, 3, padding=1), nn.GELU()) if stem_channels else nn.Identity()
        )
        self.conv1 = nn.Conv2d(stem_channels or 3, width, patch, stride=patch, bias=False)
        scale = width**-0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn(self.grid**2 + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, embed_dim))

    def patch_tokens(self, x: torch.Tensor, clearclip: bool) -> torch.Tensor:
        x = self.conv1(self.stem(x)).flatten(2).transpose(1, 2)  # (B, N, width)
        cls = self.class_embedding.expand(len(x), 1, -1)
        x = self.ln_pre(torch.cat([cls, x], 1) + self.positional_embedding)
        x = self.transformer(x, last_attn_only=clearclip)[:, 1:]  # drop CLS
        return self.ln_post(x) @ self.proj


class CLIPEncoder(nn.Module):
    """The interface OTTER needs from a vision-language model: unit-norm patch and word features."""

    def __init__(
        self,
        image_size=32,
        patch=4,
        width=64,
        layers=1,
        heads=4,
        embed_dim=32,
        stem_channels=32,
        vocab=8,
        context=2,
        text_width=None,
        text_layers=None,
        text_heads=None,
        clearclip=False,
    ) -> None:
        super().__init__()
        self.clearclip = clearclip
        self.visual = VisionTransformer(image_size, patch, width, layers, heads, embed_dim, stem_channels)
        text_width = text_width or width
        self.token_embedding = nn.Embedding(vocab, text_width)
        self.positional_embedding = nn.Parameter(0.01 * torch.randn(context, text_width))
        self.transformer = Transformer(text_width, text_layers or layers, text_heads or heads)
        self.ln_final = nn.LayerNorm(text_width)
        self.text_projection = nn.Parameter(text_width**-0.5 * torch.randn(text_width, embed_dim))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("word_ids", torch.arange(vocab), persistent=False)  # our 8 words -> model token ids

    @property
    def grid(self) -> int:
        return self.visual.grid

    def encode_patches(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> unit-norm (B, N, D) patch features."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-1] != self.visual.image_size:  # e.g. 32 px scenes into a 224 px CLIP
            x = F.interpolate(x, size=self.visual.image_size, mode="bilinear", align_corners=False)
        return F.normalize(self.visual.patch_tokens((x - self.mean) / self.std, self.clearclip), dim=-1)

    def encode_words(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, k) word ids -> unit-norm (B, k, D) per-token text features (causal mask, as CLIP)."""
        ids = self.word_ids[tokens]
        k = ids.shape[1]
        x = self.token_embedding(ids) + self.positional_embedding[:k]
        mask = torch.full((k, k), float("-inf"), device=x.device).triu(1)
        x = self.ln_final(self.transformer(x, mask))
        return F.normalize(x @ self.text_projection, dim=-1)


def encoder_kwargs(state_dict: dict[str, torch.Tensor], head_width: int = 64) -> dict:
    """Hyperparameters of a CLIP-layout state dict (heads = width / head_width, OpenAI's convention)."""

    def count(prefix: str) -> int:
        return len({m.group(1) for k in state_dict if (m := re.match(prefix + r"(\d+)\.", k))})

    conv = state_dict["visual.conv1.weight"]
    width, patch = conv.shape[0], conv.shape[-1]
    grid = round(math.sqrt(state_dict["visual.positional_embedding"].shape[0] - 1))
    text_width = state_dict["ln_final.weight"].shape[0]
    return dict(
        image_size=grid * patch,
        patch=patch,
        width=width,
        layers=count(r"visual\.transformer\.resblocks\."),
        heads=width // head_width,
        embed_dim=state_dict["visual.proj"].shape[1],
        stem_channels=state_dict["visual.stem.0.weight"].shape[0] if "visual.stem.0.weight" in state_dict else 0,
        vocab=state_dict["token_embedding.weight"].shape[0],
        context=state_dict["positional_embedding"].shape[0],
        text_width=text_width,
        text_layers=count(r"transformer\.resblocks\."),
        text_heads=text_width // head_width,
    )


def load_clip_weights(
    path: Path, head_width: int = 64, word_ids: tuple[int, ...] = (), clearclip: bool = True
) -> CLIPEncoder:
    """An OpenAI-layout CLIP ViT state dict (``.pt``, e.g. ``clip.load(...)[0].state_dict()``) as a CLIPEncoder.

    Extra keys of the full checkpoint (``input_resolution``, ``context_length``, ``vocab_size``) are
    dropped; every weight must match. ``word_ids`` map our 8 words to the model's token ids."""
    state = torch.load(Path(path), weights_only=True, map_location="cpu")
    state = {k: v for k, v in state.items() if k not in ("input_resolution", "context_length", "vocab_size")}
    encoder = CLIPEncoder(**encoder_kwargs(state, head_width), clearclip=clearclip)
    encoder.load_state_dict(state, strict=True)
    if word_ids:
        encoder.word_ids = torch.tensor(word_ids, dtype=torch.long)
    return encoder.float()


# ----------------------------------------------------------------------------- OTTER


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """(grid*grid, dim) fixed 2-D sin-cos table: half the channels code the row, half the column."""
    quarter = dim // 4
    freqs = 1.0 / (10000 ** (torch.arange(quarter, dtype=torch.float32) / max(quarter, 1)))
    pos = torch.arange(grid, dtype=torch.float32)
    one_d = torch.cat([torch.sin(pos[:, None] * freqs), torch.cos(pos[:, None] * freqs)], 1)  # (grid, dim/2)
    rows = one_d[:, None, :].expand(grid, grid, -1)
    cols = one_d[None, :, :].expand(grid, grid, -1)
    table = torch.cat([rows, cols], -1).reshape(grid * grid, -1)
    return F.pad(table, (0, dim - table.shape[1]))


def text_aware_selection(words: torch.Tensor, patches: torch.Tensor, pos: torch.Tensor, tau: torch.Tensor | float):
    """OTTER's extraction: A = softmax_patches(cos(word, patch) / tau); one visual token per word, A (P + PE).

    words (B, k, D) and patches (B, N, D) unit-norm, pos (N, D). The position code enters the values only.
    Returns tokens (B, k, D) and weights (B, k, N)."""
    weights = torch.softmax(words @ patches.transpose(1, 2) / tau, dim=-1)
    return weights @ (patches + pos), weights


def _encoder_features(encoder: CLIPEncoder, frozen: bool, images, tokens):
    with torch.set_grad_enabled(not frozen and torch.is_grad_enabled()):
        return encoder.encode_patches(images), encoder.encode_words(tokens)


class OtterPolicy(nn.Module):
    """Frozen (or fine-tuned) encoder -> text-aware visual tokens -> policy transformer -> action."""

    def __init__(
        self,
        encoder: CLIPEncoder,
        frozen: bool,
        tau: float,
        learn_tau: bool,
        tau_min: float,
        d_model: int,
        layers: int,
        hidden: int,
        n_words: int = 2,
        action_dim: int = 2,
    ) -> None:
        super().__init__()
        self.encoder, self.frozen, self.tau_min = encoder, frozen, tau_min
        if frozen:
            encoder.requires_grad_(False)
        dim = encoder.visual.proj.shape[1]
        self.register_buffer("pos", sincos_2d(encoder.grid, dim), persistent=False)
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau)), requires_grad=learn_tau)
        self.visual_in = nn.Linear(dim, d_model)
        self.word_in = nn.Linear(dim, d_model)
        self.proprio_in = nn.Linear(2, d_model)
        self.slot = nn.Parameter(0.02 * torch.randn(2 * n_words + 1, d_model))  # which token is which
        layer = nn.TransformerEncoderLayer(
            d_model, 4 if d_model % 4 == 0 else 1, 2 * d_model, 0.0, batch_first=True, norm_first=True
        )
        self.policy = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else nn.Identity()
        self.head = nn.Sequential(
            nn.Linear((2 * n_words + 1) * d_model, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, action_dim),
        )

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:
            self.encoder.eval()
        return self

    @property
    def tau(self) -> torch.Tensor:
        return self.log_tau.exp().clamp(min=self.tau_min)

    def select(self, images, tokens):
        patches, words = _encoder_features(self.encoder, self.frozen, images, tokens)
        visual, weights = text_aware_selection(words, patches, self.pos, self.tau)
        return visual, words, weights

    def act(self, patches: torch.Tensor, words: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        """The head on encoder features (a frozen encoder's features can be computed once)."""
        visual, _ = text_aware_selection(words, patches, self.pos, self.tau)
        x = torch.cat([self.visual_in(visual), self.word_in(words), self.proprio_in(proprio)[:, None]], 1) + self.slot
        return self.head(self.policy(x).flatten(1))

    def forward(self, images: torch.Tensor, tokens: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        return self.act(*_encoder_features(self.encoder, self.frozen, images, tokens), proprio)


class ReadoutBlock(nn.Module):
    """A pre-LN transformer layer evaluated at some positions only: ``queries`` attend over all ``tokens``
    (queries are among them), then a residual MLP. With every position as a query it is an ordinary layer."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln_q, self.ln_kv, self.ln_mlp = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, queries: torch.Tensor, tokens: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """``position`` (same shape as ``tokens``) is added to the values only."""
        keys = self.ln_kv(tokens)
        x = queries + self.attn(self.ln_q(queries), keys, keys + position, need_weights=False)[0]
        return x + self.mlp(self.ln_mlp(x))


class AllTokensPolicy(nn.Module):
    """The 'independent features' head OTTER argues against: every patch token, the word tokens and a proprio
    token go into a policy transformer, which must learn for itself which patches the words name (its attention
    projections see seen targets only). The action is read from the outputs at the word and proprio positions
    (the last layer is evaluated there only: its other outputs are unread). As in OTTER's selection, the 2-D
    position code enters the values only: the two heads differ in what selects the patches (frozen cosine vs
    learned attention), not in how position reaches the policy. With the code also in the keys, it swamped the
    unit-norm patch content and the head had not left the "predict the mean" plateau after 1,000 steps."""

    def __init__(
        self,
        encoder: CLIPEncoder,
        frozen: bool,
        d_model: int,
        layers: int,
        hidden: int,
        heads: int = 2,
        n_words: int = 2,
        action_dim: int = 2,
    ) -> None:
        super().__init__()
        self.encoder, self.frozen = encoder, frozen
        if frozen:
            encoder.requires_grad_(False)
        dim = encoder.visual.proj.shape[1]
        self.register_buffer("pos", sincos_2d(encoder.grid, dim), persistent=False)
        self.visual_in = nn.Linear(dim, d_model)
        self.pos_in = nn.Linear(dim, d_model, bias=False)
        self.word_in = nn.Linear(dim, d_model)
        self.proprio_in = nn.Linear(2, d_model)
        self.token_type = nn.Parameter(0.02 * torch.randn(3, d_model))
        self.slot = nn.Parameter(0.02 * torch.randn(n_words + 1, d_model))  # which readout is which
        self.blocks = nn.ModuleList(ReadoutBlock(d_model, heads) for _ in range(layers))
        self.head = nn.Sequential(
            nn.LayerNorm((n_words + 1) * d_model),
            nn.Linear((n_words + 1) * d_model, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, action_dim),
        )

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:
            self.encoder.eval()
        return self

    def forward(self, images: torch.Tensor, tokens: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        return self.act(*_encoder_features(self.encoder, self.frozen, images, tokens), proprio)

    def act(self, patches: torch.Tensor, words: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        readout = torch.cat([self.word_in(words), self.proprio_in(proprio)[:, None]], 1)
        readout = (
            readout + torch.cat([self.token_type[1:2].expand(words.shape[1], -1), self.token_type[2:]]) + self.slot
        )
        x = torch.cat([self.visual_in(patches) + self.token_type[0], readout], 1)
        position = F.pad(self.pos_in(self.pos), (0, 0, 0, readout.shape[1]))[None]  # patches only
        for block in self.blocks[:-1]:
            x = block(x, x, position)
        return self.head(self.blocks[-1](x[:, -readout.shape[1] :], x, position).flatten(1))


# ----------------------------------------------------------------------------- pretraining loss


def grounded_contrastive_loss(patches, caption_words, object_patch, object_pair, tau: float, n_shapes: int = 4):
    """Grounded region-word InfoNCE (the brief's stand-in for CLIP's web-scale alignment).

    patches (B, N, D) and caption_words (C, 2, D) unit-norm, caption c = colour * n_shapes + shape;
    object_patch (B, M) patch index of each object, object_pair (B, M, 2) its (colour, shape).
    (a) region -> caption: the object's patch against all C captions, logit = mean over the caption's
        words of cos / tau, cross-entropy with the object's caption;
    (b) word -> patches: for each object's word t, softmax over the image's N patches of cos / tau;
        -log of the probability mass on the patches of every object sharing attribute t.
    Returns (a) + (b), and the two parts."""
    b, m = object_patch.shape
    region = torch.gather(patches, 1, object_patch[..., None].expand(-1, -1, patches.shape[-1]))  # (B, M, D)
    caption_logits = torch.einsum("bmd,ctd->bmc", region, caption_words) / (2 * tau)
    target_caption = object_pair[..., 0] * n_shapes + object_pair[..., 1]
    loss_region = F.cross_entropy(caption_logits.reshape(b * m, -1), target_caption.reshape(-1))

    words = caption_words[target_caption]  # (B, M, 2, D)
    log_p = torch.log_softmax(torch.einsum("bmtd,bnd->bmtn", words, patches) / tau, dim=-1)  # (B, M, 2, N)
    shares = object_pair[:, :, None, :] == object_pair[:, None, :, :]  # (B, M, M', 2): o' shares attribute t with o
    positive = torch.zeros(b, m, 2, patches.shape[1], dtype=torch.bool, device=patches.device)
    for t in range(2):
        onehot = F.one_hot(object_patch, patches.shape[1]).bool()  # (B, M', N)
        positive[:, :, t] = (shares[..., t, None] & onehot[:, None]).any(2)
    loss_word = -torch.logsumexp(log_p.masked_fill(~positive, float("-inf")), -1).mean()
    return loss_region + loss_word, loss_region, loss_word


def all_captions(n_colours: int = 4, n_shapes: int = 4) -> torch.Tensor:
    """(C, 2) word ids of every caption, caption c = colour * n_shapes + shape."""
    c = torch.arange(n_colours).repeat_interleave(n_shapes)
    s = torch.arange(n_shapes).repeat(n_colours)
    return torch.stack([c, n_colours + s], 1)
