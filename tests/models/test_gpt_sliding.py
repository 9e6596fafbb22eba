"""GPT generation past its context (issue 21, point 8): the window slides as nanoGPT crops its
input, and every decoding mode gives the tokens of the plain reference, which re-encodes the
last ``max_positions`` tokens (and their mask) at every step without any cache."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.generation import warp_logits
from tfam.layers.position import TokenPositions

CONTEXT = 12

pytestmark = pytest.mark.usefixtures("one_thread")
POSITIONS = ["learned", "sinusoidal", "rope", "alibi", "relative", "generated"]


def tiny(position: str) -> tfam.models.GPT:
    """Two blocks (a one-block model cannot tell a rolling cache from the crop) with weights
    large enough that attention decides tokens (at GPT-2's init_std of 0.02 a random model's
    tokens hardly depend on what it attends to)."""
    torch.manual_seed(0)
    return tfam.create_model(
        "gpt",
        dim=24,
        depth=2,
        heads=3,
        vocab_size=30,
        max_positions=CONTEXT,
        position=position,
        init_std=0.3,
    ).eval()


IDS = torch.tensor([[0, 0, 0, 5, 6, 7], [1, 2, 3, 4, 5, 6]])
MASK = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


def reference(
    model: tfam.models.GPT,
    ids: torch.Tensor,
    steps: int,
    mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    **warp: float,
) -> torch.Tensor:
    """nanoGPT's loop: crop the ids (and mask) to the last CONTEXT, run forward, take the last
    position's argmax (or a draw from the warped distribution)."""
    mask = torch.ones_like(ids) if mask is None else mask
    with torch.no_grad():
        for _ in range(steps):
            logits = model(ids[:, -CONTEXT:], attention_mask=mask[:, -CONTEXT:])[:, -1]
            if generator is None:
                token = logits.argmax(-1)
            else:
                probs = warp_logits(logits, **warp).softmax(-1)
                token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            ids = torch.cat([ids, token[:, None]], dim=1)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
    return ids


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_past_the_context_equals_the_reference(position: str, use_cache: bool):
    model = tiny(position)
    steps = 3 * CONTEXT  # the window slides 2-3 times over
    out = model.generate(
        IDS, attention_mask=MASK, max_new_tokens=steps, use_cache=use_cache, eos_token_id=[]
    )
    assert out.shape == (2, IDS.shape[1] + steps)
    assert torch.equal(out, reference(model, IDS, steps, MASK))
    # The padded row gives the tokens of its prompt alone, past the context too.
    alone = model.generate(IDS[:1, 3:], max_new_tokens=steps, eos_token_id=[])
    assert torch.equal(out[0, 3:], alone[0])


@pytest.mark.parametrize("position", POSITIONS)
def test_sampling_past_the_context_equals_the_reference(position: str):
    model = tiny(position)
    steps, warp = 2 * CONTEXT + 5, dict(temperature=1.3, top_k=20)
    out = model.generate(
        IDS,
        attention_mask=MASK,
        max_new_tokens=steps,
        do_sample=True,
        generator=torch.Generator().manual_seed(3),
        eos_token_id=[],
        **warp,
    )
    ref = reference(model, IDS, steps, MASK, torch.Generator().manual_seed(3), **warp)
    assert torch.equal(out, ref)


def test_beam_search_slides_as_its_uncached_self():
    model = tiny("rope")
    kwargs = dict(max_new_tokens=2 * CONTEXT, num_beams=3, eos_token_id=[], length_penalty=0.0)
    cached = model.generate(IDS, attention_mask=MASK, **kwargs)
    uncached = model.generate(IDS, attention_mask=MASK, use_cache=False, **kwargs)
    assert cached.shape == (2, IDS.shape[1] + 2 * CONTEXT)
    assert torch.equal(cached, uncached)


def test_a_prompt_longer_than_the_context_is_cropped():
    model = tiny("learned")
    prompt = torch.arange(2 * CONTEXT).remainder(30)[None]
    out = model.generate(prompt, max_new_tokens=5)
    assert torch.equal(out[:, : prompt.shape[1]], prompt)  # the whole prompt is returned
    assert torch.equal(out, reference(model, prompt, 5))


def test_within_the_context_every_step_after_the_prompt_reads_one_cached_token():
    """The path of cached decoding inside the context is unchanged: one new token a step, the
    cache kept; past the context, the window of CONTEXT tokens and no cache."""
    model = tiny("learned")
    seen: list[tuple[int, bool]] = []
    step = model.decode_step

    def spy(state, ids):
        seen.append((ids.shape[1], state.cache is not None))
        return step(state, ids)

    model.decode_step = spy  # type: ignore[method-assign]
    model.generate(IDS[1:], max_new_tokens=CONTEXT - IDS.shape[1], eos_token_id=[])
    assert seen == [(6, True)] + [(1, True)] * (CONTEXT - 7)
    assert model.decoding_window() == CONTEXT
    seen.clear()
    model.generate(IDS[1:], max_new_tokens=CONTEXT - 3, eos_token_id=[])
    assert seen == [(6, True)] + [(1, True)] * (CONTEXT - 6) + [(CONTEXT, False)] * 2


def test_the_encoder_decoder_keeps_its_limit():
    """No window: a learned table refuses a target past max_positions; sinusoids (the
    default) run past it."""
    torch.manual_seed(0)
    values = dict(dim=16, depth=1, heads=2, ffn_dim=32, vocab_size=20, max_positions=8)
    model = tfam.create_model("transformer", position="learned", **values).eval()
    assert model.decoding_window() is None
    with pytest.raises(ValueError, match="max_new_tokens=9 is invalid: the decoder has"):
        model.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=9)
    model = tfam.create_model("transformer", **values).eval()
    out = model.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=9, eos_token_id=[])
    assert out.shape == (1, 10)


def band_logits(model: tfam.models.GPT, ids: torch.Tensor) -> torch.Tensor:
    """What a rolling KV cache (the last CONTEXT keys and values kept) would compute for a
    relative scheme: at every block each token attends to the last CONTEXT tokens up to it,
    a band over the whole sequence. -> the last position's logits (B, V)."""
    length = ids.shape[1]
    i = torch.arange(length)
    band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < CONTEXT)
    where = TokenPositions(0, length)
    x = model.position.add(model.tok_embed(ids), where, model.pos_embed)
    x, _ = model.stack(x, mask=band[None, None], positions=where)
    return model.lm_head(model.norm(x))[:, -1]


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_a_rolling_cache_is_not_the_crop(position: str):
    """Why the window is re-encoded rather than its cache rolled: from the second block on, a
    kept key was computed while tokens now out of the window were still read, so the rolling
    cache's logits differ from the crop's (they agree for one block)."""
    seq = torch.randint(0, 30, (2, 3 * CONTEXT), generator=torch.Generator().manual_seed(0))
    model = tiny(position)
    with torch.no_grad():
        crop = model(seq[:, -CONTEXT:])[:, -1]
        assert (band_logits(model, seq) - crop).abs().max() > 0.1
        one_block = tiny(position)
        one_block.stack.blocks = one_block.stack.blocks[:1]
        torch.testing.assert_close(band_logits(one_block, seq), one_block(seq[:, -CONTEXT:])[:, -1])
