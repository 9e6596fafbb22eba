"""tfam's GPT on its own: left padding, the KV cache for every position kind, clear errors."""

from __future__ import annotations

import pytest
import torch

import tfam


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(position: str = "learned", **overrides: object) -> tfam.models.GPT:
    torch.manual_seed(0)
    values = dict(dim=24, depth=2, heads=3, vocab_size=30, max_positions=20, position=position)
    return tfam.create_model("gpt", **{**values, **overrides}).eval()


IDS = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
MASK = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


@pytest.mark.parametrize("position", ["learned", "rope", "alibi", "none", "relative", "generated"])
def test_left_padding_and_cache_for_every_position_kind(position: str):
    model = tiny(position)
    with torch.no_grad():
        padded = model(IDS, attention_mask=MASK)
        alone = model(IDS[:1, 2:])
    assert torch.allclose(padded[0, 2:], alone[0], atol=1e-5, rtol=0)
    cached = model.generate(IDS, attention_mask=MASK, max_new_tokens=8, use_cache=True)
    uncached = model.generate(IDS, attention_mask=MASK, max_new_tokens=8, use_cache=False)
    single = model.generate(IDS[:1, 2:], max_new_tokens=8)
    assert cached.shape == (2, 14)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached[0, 2:], single[0])


def test_generate_stops_at_eos_and_pads():
    model = tiny()
    first = model.generate(IDS[1:], max_new_tokens=3)[0, 6]
    out = model.generate(IDS[1:], max_new_tokens=5, eos_token_id=int(first), pad_token_id=0)
    assert out.shape == (1, 7) and out[0, 6] == first


def test_ids_outside_the_vocabulary_are_refused():
    model = tiny()
    with pytest.raises(ValueError, match=r"\[0, 30\)"):
        model(torch.tensor([[1, 30]]))
    with pytest.raises(ValueError, match=r"\[0, 30\)"):
        model.generate(torch.tensor([[-1, 2]]), max_new_tokens=2)


def test_context_limit_is_named():
    model = tiny()
    with pytest.raises(ValueError, match="max_positions=20"):
        model(torch.zeros(1, 21, dtype=torch.long))
    # generate slides past the context (tests/models/test_gpt_sliding.py)
    assert model.generate(IDS, max_new_tokens=15, eos_token_id=[]).shape == (2, 21)


def test_config_checks_special_ids():
    with pytest.raises(ValueError, match="eos_token_id=30 is invalid"):
        tiny(eos_token_id=30)
    assert tiny(pad_token_id=None, eos_token_id=29).config.eos_token_id == 29


def test_gpt2_preset_has_124m_parameters():
    assert tfam.models.count_parameters("gpt2") == 124_439_808
    assert tfam.models.count_parameters("gpt2_medium") == 354_823_168


def greedy_by_forward(model: tfam.models.GPT, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The plain loop: the whole sequence through ``forward`` (the parameters' own layout) at
    every step, the last position's argmax appended."""
    with torch.no_grad():
        for _ in range(steps):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def test_sampling_with_a_seeded_generator_is_reproducible():
    model = tiny()
    kwargs = dict(attention_mask=MASK, max_new_tokens=10, do_sample=True, eos_token_id=[])
    runs = [
        model.generate(IDS, generator=torch.Generator().manual_seed(seed), top_k=8, **kwargs)
        for seed in (1, 1, 2)
    ]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])  # the draws do depend on the generator
    hot = model.generate(
        IDS, generator=torch.Generator().manual_seed(1), temperature=50.0, **kwargs
    )
    cold = model.generate(
        IDS, generator=torch.Generator().manual_seed(1), temperature=1e-4, **kwargs
    )
    # Near-zero temperature is greedy; a very hot one is not.
    assert torch.equal(
        cold, model.generate(IDS, attention_mask=MASK, max_new_tokens=10, eos_token_id=[])
    )
    assert not torch.equal(hot, cold)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(top_k=0), r"top_k=0 is invalid: expected None or an int >= 1"),
        (dict(top_k=2.5), r"top_k=2.5 is invalid"),
        (dict(top_p=0.0), r"top_p=0.0 is invalid: expected None or a number in \(0, 1\]"),
        (dict(top_p=1.01), r"top_p=1.01 is invalid"),
        (dict(temperature=0.0), r"temperature=0.0 is invalid: expected a finite number > 0"),
        (dict(temperature=-0.5), r"temperature=-0.5 is invalid"),
        (dict(temperature=float("inf")), r"temperature=inf is invalid"),
        (dict(max_new_tokens=0), r"max_new_tokens=0 is invalid"),
        (dict(do_sample=True, num_beams=2), r"num_beams=2 is invalid: beam search"),
    ],
)
def test_bad_sampling_settings_are_named(kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        tiny().generate(IDS, attention_mask=MASK, **{"max_new_tokens": 3, **kwargs})


def test_a_stop_token_ends_its_row_and_pads_it_while_others_go_on():
    model = tiny()
    steps, pad, length = 8, 29, IDS.shape[1]
    free = model.generate(IDS, attention_mask=MASK, max_new_tokens=steps, eos_token_id=[])
    new = free[:, length:].tolist()

    def first(row: list[int], token: int) -> int:
        return row.index(token) if token in row else steps

    # A stop token that row 0 makes before row 1 does (or row 1 never does): row 0 stops
    # while row 1 goes on.
    picks = [t for t in new[0] if t != pad and first(new[0], t) < first(new[1], t)]
    assert picks, "the tiny model should give the two rows different tokens"
    eos = picks[0]
    stop = [first(row, eos) for row in new]  # index of each row's stop token among new ones
    for given in (eos, [eos]):  # one id or a list of ids
        out = model.generate(
            IDS, attention_mask=MASK, max_new_tokens=steps, eos_token_id=given, pad_token_id=pad
        )
        assert out.shape[1] == length + min(steps, max(stop) + 1)
        for i, s in enumerate(stop):
            kept = length + min(s + 1, steps)  # up to and with the stop token
            assert torch.equal(out[i, :kept], free[i, :kept])
            assert (out[i, kept:] == pad).all() and out[i, kept:].numel() == out.shape[1] - kept
        assert out[0, length + stop[0]] == eos and (out[0, length + stop[0] + 1 :] == pad).all()
        assert out.shape[1] - length > stop[0] + 1  # row 1 went on after row 0 stopped
    # Every row stopped: decoding ends early, and the output is a contiguous tensor.
    one = model.generate(IDS[1:], max_new_tokens=steps, eos_token_id=int(free[1, length]))
    assert one.shape == (1, length + 1) and one.is_contiguous()


def test_generate_equals_the_plain_forward_loop_and_leaves_the_weights_as_they_were():
    """generate lays the matrices out for decoding; the tokens are those of argmax over
    ``forward``, and the parameters come back with their own storage, also after an error
    and after a weight changes in place (the kept copies must follow)."""
    model = tiny()
    prompt = IDS[1:]
    before = {n: (p.data_ptr(), p.stride()) for n, p in model.named_parameters()}
    expected = greedy_by_forward(model, prompt, 8)
    for use_cache in (True, False):
        assert torch.equal(model.generate(prompt, max_new_tokens=8, use_cache=use_cache), expected)
    assert {n: (p.data_ptr(), p.stride()) for n, p in model.named_parameters()} == before
    assert model.lm_head.weight is model.tok_embed.weight
    with torch.no_grad():  # an in-place change: the kept decoding copies are stale now
        model.stack.blocks[1].mlp.fc2.weight.mul_(-3.0)
        model.tok_embed.weight[:, :4].mul_(2.0)
    changed = greedy_by_forward(model, prompt, 8)
    assert not torch.equal(changed, expected)
    assert torch.equal(model.generate(prompt, max_new_tokens=8), changed)
    with pytest.raises(ValueError, match=r"\[0, 30\)"):
        model.generate(torch.tensor([[1, 30]]), max_new_tokens=2)
    assert {n: (p.data_ptr(), p.stride()) for n, p in model.named_parameters()} == before
    model.keep_decoding_weights = False
    model.__dict__.pop("_decoding_copies_kept", None)
    assert torch.equal(model.generate(prompt, max_new_tokens=8), changed)
    assert "_decoding_copies_kept" not in model.__dict__
