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


@pytest.mark.parametrize("position", ["learned", "rope", "alibi", "none"])
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
    with pytest.raises(ValueError, match="max_positions=20.*at most 14 new tokens"):
        model.generate(IDS, max_new_tokens=15)
    with pytest.raises(ValueError, match="max_positions=20"):
        model(torch.zeros(1, 21, dtype=torch.long))
    assert model.generate(IDS, max_new_tokens=14).shape == (2, 20)


def test_config_checks_special_ids():
    with pytest.raises(ValueError, match="eos_token_id=30 is invalid"):
        tiny(eos_token_id=30)
    assert tiny(pad_token_id=None, eos_token_id=29).config.eos_token_id == 29


def test_gpt2_preset_has_124m_parameters():
    assert tfam.models.count_parameters("gpt2") == 124_439_808
    assert tfam.models.count_parameters("gpt2_medium") == 354_823_168
