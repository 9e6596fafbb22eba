"""iGPT (Chen et al. 2020, "Generative Pretraining from Pixels"): a GPT over pixels. An image is
quantised to a palette (grey levels or k-means colour clusters: :mod:`tfam.data.vision.palette`),
read in raster order as a sequence of palette ids after a start token, and the model learns
p(x) = prod_i p(x_i | x_1..x_{i-1}) (the paper's eq. 1) by predicting the next pixel:

palette ids (B, L), ids[:, 0] = the start token (the last id, vocab_size - 1)
  -> token embedding + learned position embedding, dropout
  -> N x [ X1 = X0 + MaskedMHSA(norm(X0));  X_out = X1 + MLP(norm(X1)) ]   (pre-norm)
  -> final norm -> head

as OpenAI's release and Hugging Face's ImageGPT compute it: the norm has no mean subtraction
and no bias, x / sqrt(mean(x^2) + eps) * g (tfam's ``rmsnorm``), the MLP's activation is
quick GELU, x * sigmoid(1.702 x), the vocabulary is the palette plus the start token, and the
LM head (untied) scores the palette only (vocab_size - 1 classes: the start token is never
predicted).

Heads (``head``): ``"lm"`` (next-pixel logits (B, L, V - 1): pre-training, completion),
``"sequence"`` (classification for fine-tuning: a bias-free Linear on the mean over positions
of the final-normed output of the last block: Hugging Face's
``ImageGPTForImageClassification``), ``"none"`` (the final-normed hidden states: Hugging Face's
``ImageGPTModel``). :func:`features` gives the mean-pooled features of any layer, for the
paper's linear probe (its best layers are in the middle of the stack); to fine-tune on block
l's features, build the classifier with ``depth=l`` (``tfam train igpt --task classify --init
RUN --set depth=l``: the first l blocks are copied, the later ones left out).

The model is tfam's GPT with these choices (it reuses GPT's embedding, stack, positions and
decoding): ``generate`` continues a prompt of pixels, and ``tfam generate RUN`` completes
held-out images from their top half (:attr:`IGPT.image_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import as_pair, check_choice, check_positive_int, config_error
from tfam.generation import DecodingState
from tfam.layers import TransformerStack, make_norm
from tfam.layers.masks import masked_mean
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.gpt import GPT, GPTConfig
from tfam.models.registry import register_preset

__all__ = [
    "IGPT",
    "IGPTConfig",
    "complete",
    "features",
    "features_by_layer",
    "hidden_by_layer",
    "mbr_select",
    "region_pool",
]

HEADS = ("lm", "sequence", "none")


@dataclass
class IGPTConfig(GPTConfig):
    """An image GPT; the defaults are Hugging Face's ``openai/imagegpt-small``: D=512, N=24,
    H=8, 512 colour clusters + the start token, 1024 positions (32 x 32 pixels), quick GELU,
    RMS norm (eps 1e-5), an untied LM head. The start token is always ``vocab_size - 1``
    (:attr:`start_token_id`); ``max_positions`` must hold what the model reads: H*W for
    next-pixel prediction ([start] + all pixels but the last), 1 + H*W to classify whole
    images with the start token."""

    family: ClassVar[str] = "igpt"

    dim: int = 512
    depth: int = 24
    heads: int = 8
    activation: str = "quick_gelu"
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    vocab_size: int = 513
    max_positions: int = 1024
    tie_output: bool = False  # the head scores vocab_size - 1 ids: it cannot be the embedding
    head: str = "lm"
    num_labels: int = 10
    # The pixel grid (H, W) the sequence reads in raster order (None: not said). With
    # position="rope" it makes RoPE 2-D: token 1 + i (pixel i) is rotated by its row i // W
    # and column i % W (the start token at (0, 0), unrotated), so the pixel above is the same
    # offset in every column, where 1-D RoPE over the raster index (image_size None) sees the
    # next row's first pixel as the last one's right-hand neighbour. Other schemes ignore it.
    image_size: Any = None  # None, an int or (height, width)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vocab_size < 2:
            raise config_error(
                "vocab_size", self.vocab_size, "expected >= 2: a palette of >= 1 id + the start"
            )
        if self.tie_output:
            raise config_error(
                "tie_output",
                self.tie_output,
                "expected False: iGPT's head scores vocab_size - 1 palette ids, its embedding "
                "has vocab_size rows (the start token too)",
            )
        check_choice("head", self.head, HEADS)
        check_positive_int("num_labels", self.num_labels)
        if self.image_size is not None:
            self.image_size = as_pair("image_size", self.image_size)
        if self.rope_grid is not None:
            h, w = self.rope_grid
            if self.head_dim % 4:
                raise config_error(
                    "heads",
                    self.heads,
                    "2-D RoPE (position='rope' with image_size) rotates two halves of feature "
                    f"pairs, so the head width dim/heads must be a multiple of 4 (dim={self.dim})",
                )
            if self.max_positions > 1 + h * w:
                raise config_error(
                    "max_positions",
                    self.max_positions,
                    f"expected at most 1 + H*W = {1 + h * w} for 2-D RoPE over image_size="
                    f"{self.rope_grid} ([start] + the pixels)",
                )

    @property
    def rope_grid(self) -> tuple[int, int] | None:
        """The pixel grid 2-D RoPE indexes: ``image_size`` with position='rope', else None."""
        return self.image_size if self.position == "rope" else None

    @property
    def start_token_id(self) -> int:
        """The start-of-image token: the last id (Hugging Face's convention)."""
        return self.vocab_size - 1

    @property
    def palette_size(self) -> int:
        """The pixel ids: every id but the start token."""
        return self.vocab_size - 1


class IGPT(GPT):
    """``model(input_ids (B, L), attention_mask=None)`` -> by ``config.head``: next-pixel
    logits (B, L, V - 1) ("lm"), class logits (B, C) ("sequence"), or the final-normed hidden
    states (B, L, D) ("none"). ``generate`` continues pixel prompts (head "lm")."""

    config_class = IGPTConfig
    title = "iGPT"
    inputs = "tokens"
    tasks = ("causal-lm", "sequence-classification")
    head_tasks: ClassVar[dict[str, str]] = {
        "lm": "causal-lm",
        "sequence": "sequence-classification",
    }
    generates = True
    # Its tokens are an image's palette ids in raster order (palette.json beside a run):
    # `tfam generate` completes images instead of text.
    image_tokens: ClassVar[bool] = True

    def __init__(self, config: IGPTConfig) -> None:
        TfamModel.__init__(self, config)  # GPT's parts, iGPT's head: built here, not by GPT
        c = config
        self.tok_embed = nn.Embedding(c.vocab_size, c.dim)
        # With image_size, RoPE indexes the pixel grid (row, column) after the start token.
        grid, prefix = c.rope_grid, (0 if c.rope_grid is None else 1)
        self.position = build_position(c, length=c.max_positions, grid=grid, prefix=prefix)
        self.pos_embed = self.position.make_table()  # (max_positions, D) when learned
        self.drop = nn.Dropout(c.dropout)
        self.stack = TransformerStack(c, causal=True, grid=grid, prefix=prefix)
        self.norm = make_norm(c.norm, c.dim, c.norm_eps) if c.final_norm else nn.Identity()
        if c.head == "lm":
            self.lm_head = nn.Linear(c.dim, c.palette_size, bias=False)
        elif c.head == "sequence":
            self.score = nn.Linear(c.dim, c.num_labels, bias=False)  # HF's name and bias
        self.init_weights()

    # -- the network -----------------------------------------------------------------------
    @staticmethod
    def mean_pool(x: Tensor, mask: Tensor | None) -> Tensor:
        """x (B, L, D), mask (B, L) True = real or None -> the mean over real positions (B, D)."""
        return masked_mean(x, mask)

    def pooled_features(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        layer: int | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """input_ids (B, L) -> the mean over real positions of the final-normed output of block
        ``layer`` (1..N; None: the last), (B, D) [, :class:`AttentionWeights` of the blocks
        run]. The final norm's per-feature gain does not change what a linear probe can
        separate; at the last layer this is Hugging Face's classification pooling."""
        self.check_ids(input_ids)
        mask = self._check_mask(attention_mask, input_ids)
        x, weights = self._hidden(input_ids, mask, need_weights=return_attention, layers=layer)
        pooled = self.mean_pool(x, mask)
        if return_attention:
            return pooled, AttentionWeights("decoder", decoder=weights or [])
        return pooled

    def forward_features(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """input_ids (B, L), attention_mask (B, L) True/1 = real token -> what the head reads:
        final-normed hidden states (B, L, D) (heads "lm", "none"), or their mean over real
        positions (B, D) (head "sequence")
        [, :class:`AttentionWeights`]."""
        c = self.config
        if c.head == "sequence":
            return self.pooled_features(
                input_ids, attention_mask, return_attention=return_attention
            )
        return super().forward_features(input_ids, attention_mask, return_attention)

    def forward_head(self, features: Tensor) -> Tensor:
        """(B, L, D) -> next-pixel logits (B, L, V - 1) ("lm": at i, the scores of pixel
        i + 1); (B, D) -> class logits (B, C) ("sequence"); identity ("none")."""
        head = self.config.head
        if head == "lm":
            return self.lm_head(features)
        if head == "sequence":
            return self.score(features)
        return features

    def token_positions(self, length: int, offset: int, key_mask: Tensor | None) -> TokenPositions:
        """GPT's positions, or with 2-D RoPE each new token's (row, column) on the pixel
        grid after the start token (:meth:`TokenPositions.query`), counted from ``offset``."""
        grid = self.config.rope_grid
        if grid is None:
            return super().token_positions(length, offset, key_mask)
        if key_mask is not None:
            raise ValueError(
                "attention_mask with padding is invalid for an iGPT with 2-D RoPE (position="
                "'rope' with image_size): every row must be an unpadded image, [start] + its "
                "pixels in raster order"
            )
        return TokenPositions(offset, length, grid=grid, prefix=1)

    # -- decoding --------------------------------------------------------------------------
    def prepare_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int, use_cache: bool
    ) -> tuple[DecodingState, Tensor]:
        if self.config.head != "lm":
            raise ValueError(
                f"head={self.config.head!r} cannot generate: only an iGPT with head='lm' "
                "predicts the next pixel"
            )
        return super().prepare_decoding(input_ids, attention_mask, max_new_tokens, use_cache)

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """[start] + random pixel ids, (B, min(8, max_positions))."""
        c = self.config
        length = min(8, c.max_positions)
        ids = torch.randint(0, c.palette_size, (batch_size, length))
        ids[:, 0] = c.start_token_id
        return (ids,)


def features(
    model: IGPT, ids: Tensor, layer: int | None = None, attention_mask: Tensor | None = None
) -> Tensor:
    """The linear probe's features (Chen et al. 2020, sec. 3.3): ids (B, L) -> the mean over
    positions of the final-normed output of block ``layer`` (1..N, None: the last), (B, D).
    Runs the first ``layer`` blocks only, without gradients; any head."""
    with torch.no_grad():
        out = model.pooled_features(ids, attention_mask, layer)
    assert isinstance(out, Tensor)
    return out


def region_pool(
    x: Tensor, mask: Tensor | None, grid: tuple[int, int], regions: tuple[int, int]
) -> Tensor:
    """x (B, H*W, D): one vector per pixel of an H x W ``grid`` in raster order (position i
    predicts pixel i), mask (B, H*W) True = real or None -> the mean over real positions in
    each cell of a ``regions`` = (rows, columns) partition of the grid (near-equal cells),
    side by side in raster order of the cells (B, rows * columns * D). (1, 1) is
    :meth:`IGPT.mean_pool`; (2, 2) pools the four quadrants apart, so a linear probe still
    sees where a stroke is, as one on raw pixels does."""
    h, w = grid
    if x.shape[1] != h * w:
        raise ValueError(
            f"grid={grid!r} is invalid for {x.shape[1]} positions: expected H * W of them"
        )
    if not (
        isinstance(regions, tuple)
        and len(regions) == 2
        and all(isinstance(r, int) and not isinstance(r, bool) for r in regions)
        and 1 <= regions[0] <= h
        and 1 <= regions[1] <= w
    ):
        raise ValueError(
            f"regions={regions!r} is invalid: expected (rows, columns) with 1 <= rows <= {h} "
            f"and 1 <= columns <= {w}"
        )
    cells = x.unflatten(1, (h, w))
    cell_mask = None if mask is None else mask.unflatten(1, (h, w))
    rows = torch.arange(h, device=x.device).tensor_split(regions[0])
    cols = torch.arange(w, device=x.device).tensor_split(regions[1])
    pooled = []
    for r in rows:
        for c in cols:
            part = cells[:, r][:, :, c].flatten(1, 2)
            part_mask = None if cell_mask is None else cell_mask[:, r][:, :, c].flatten(1, 2)
            pooled.append(IGPT.mean_pool(part, part_mask))
    return torch.cat(pooled, dim=-1)


def hidden_by_layer(
    model: IGPT, ids: Tensor, layers: Sequence[int], attention_mask: Tensor | None = None
) -> dict[int, Tensor]:
    """The final-normed output of several blocks from one forward pass, at every position:
    ids (B, L) -> {layer: (B, L, D)} for each of ``layers`` (1..N), without gradients.
    Reading N blocks one by one runs 1 + 2 + ... + N blocks; this runs max(layers). Each
    block's output is read as it leaves the block (a forward hook, in call order, so a stack
    that reuses one block still counts calls)."""
    depth = len(model.stack.blocks)
    wanted = sorted(set(layers))
    if not wanted or wanted[0] < 1 or wanted[-1] > depth:
        raise ValueError(f"layers={list(layers)!r} is invalid: expected blocks in [1, {depth}]")
    outputs: list[Tensor] = []
    distinct = {id(b): b for b in model.stack.blocks}.values()
    hooks = [b.register_forward_hook(lambda _m, _i, out: outputs.append(out[0])) for b in distinct]
    model.check_ids(ids)
    mask = model._check_mask(attention_mask, ids)
    try:
        with torch.no_grad():
            model._hidden(ids, mask, layers=wanted[-1])  # the blocks only: nothing pooled
            return {k: model.norm(outputs[k - 1]) for k in wanted}
    finally:
        for h in hooks:
            h.remove()


def features_by_layer(
    model: IGPT,
    ids: Tensor,
    layers: Sequence[int],
    attention_mask: Tensor | None = None,
    regions: tuple[int, int] = (1, 1),
    grid: tuple[int, int] | None = None,
) -> dict[int, Tensor]:
    """:func:`features` of several blocks from one forward pass (:func:`hidden_by_layer`):
    ids (B, L) -> {layer: (B, D)} for each of ``layers`` (1..N), pooled as
    :meth:`IGPT.pooled_features` does; with ``regions`` other than (1, 1), over each cell of
    the image apart (:func:`region_pool`, (B, rows * columns * D); ``ids`` then holds
    [start] + the first H*W - 1 pixels of an H x W ``grid``, default the config's
    ``image_size``)."""
    hidden = hidden_by_layer(model, ids, layers, attention_mask)
    mask = model._check_mask(attention_mask, ids)
    if tuple(regions) == (1, 1):
        return {k: model.mean_pool(x, mask) for k, x in hidden.items()}
    grid = grid or model.config.image_size
    if grid is None:
        raise ValueError(
            f"regions={regions!r} needs the image's grid: pass grid=(H, W) (this config "
            "has no image_size)"
        )
    size = (int(grid[0]), int(grid[1]))
    return {k: region_pool(x, mask, size, regions) for k, x in hidden.items()}


def complete(
    model: IGPT,
    prompt: Tensor,
    length: int,
    *,
    samples: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    mbr: int = 1,
    colours: Tensor | None = None,
) -> Tensor:
    """Complete images: ``prompt`` (B, P) palette ids ([start] + the first pixels in raster
    order) -> (B, samples, length) pixel ids: the prompt's pixels and the sampled rest, each
    image's ``samples`` completions drawn independently (KV cache; at most ``length`` pixels,
    so ``max_positions >= length`` reads every pixel).

    ``mbr > 1``: minimum Bayes risk decoding. Each of the ``samples`` completions is the one of
    ``mbr`` sampled candidates nearest on average to the others (:func:`mbr_select`, L1 over
    ``colours[id]``, the palette's (K, C) colour values; over the ids when not given, which
    suits grey levels only): the most typical completion under the model, where one sample is
    as often a rarer reading of the prompt as the model believes in it."""
    if mbr < 1:
        raise ValueError(f"mbr={mbr} is invalid: expected an int >= 1 (candidates a completion)")
    if mbr > 1 and greedy:
        raise ValueError("mbr > 1 with greedy=True: greedy candidates are all the same")
    if mbr > 1:
        draws = complete(
            model,
            prompt,
            length,
            samples=samples * mbr,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=generator,
        ).view(prompt.shape[0] * samples, mbr, length)
        values = draws.double() if colours is None else colours.to(draws.device)[draws].flatten(2)
        pick = mbr_select(values)
        return draws[torch.arange(len(draws), device=draws.device), pick].view(
            prompt.shape[0], samples, length
        )
    c = model.config
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt has shape {tuple(prompt.shape)}; expected (B, P) with P >= 1")
    new = length + 1 - prompt.shape[1]
    if new < 1:
        raise ValueError(
            f"the prompt holds {prompt.shape[1] - 1} pixels; expected fewer than length={length}"
        )
    ids = prompt.repeat_interleave(samples, dim=0)
    with torch.inference_mode():
        out = model.generate(
            ids,
            max_new_tokens=new,
            do_sample=not greedy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=generator,
        )
    pixels = out[:, 1 : 1 + length].clamp_max(c.palette_size - 1)
    return pixels.reshape(prompt.shape[0], samples, length)


def mbr_select(candidates: Tensor, p: float = 1.0) -> Tensor:
    """Minimum Bayes risk selection: candidates (B, N, ...) values (N draws of one
    distribution per row) -> (B,) index of the candidate whose summed L_p distance to the
    other N - 1 is least, argmin_i sum_j ||x_i - x_j||_p: the sample that risks least, with
    the other samples standing in for the model's distribution (Kumar & Byrne 2004)."""
    if candidates.ndim < 2 or candidates.shape[1] < 1:
        raise ValueError(
            f"candidates have shape {tuple(candidates.shape)}; expected (B, N, ...) with N >= 1"
        )
    x = candidates.flatten(2).double()
    return torch.cdist(x, x, p=p).sum(-1).argmin(-1)


def _igpt(name: str, description: str, **values: Any) -> None:
    register_preset(name, "igpt", description, **values)


_igpt(
    "imagegpt_small",
    "Hugging Face's openai/imagegpt-small (76M): D=512, H=8, N=24, 512 colour clusters + start, "
    "1024 positions (32 x 32), quick GELU, RMS norm, untied head",
)
_igpt(
    "igpt_digits",
    "an iGPT for the 8x8 digits (17 grey levels + start): D=128, H=4, N=4, 65 positions "
    "([start] + 64 pixels, so whole images classify too)",
    dim=128,
    heads=4,
    depth=4,
    vocab_size=18,
    max_positions=65,
    dropout=0.0,
    attn_dropout=0.0,
)
_igpt(
    "igpt_fashion_mnist",
    "an iGPT for Fashion-MNIST at 14x14 (16 grey levels + start): D=128, H=4, N=6, 197 positions",
    dim=128,
    heads=4,
    depth=6,
    vocab_size=17,
    max_positions=197,
    dropout=0.0,
    attn_dropout=0.0,
)
