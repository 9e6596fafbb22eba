"""Hugging Face ImageGPT <-> tfam iGPT: random tiny configs built offline give the same logits
(causal image modelling), class logits (classification) and hidden states (the bare model) to
1e-5, the same greedy pixels, and survive a round trip; HF's parameter count of
openai/imagegpt-small equals the preset's."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.models.igpt import IGPT  # noqa: E402

ATOL = 1e-5
VOCAB = 17  # 16 palette ids + the start token

pytestmark = pytest.mark.usefixtures("one_thread")

HF_CLASSES = {
    "lm": transformers.ImageGPTForCausalImageModeling,
    "sequence": transformers.ImageGPTForImageClassification,
    "none": transformers.ImageGPTModel,
}


def hf_config(**values: object) -> transformers.ImageGPTConfig:
    base = dict(
        n_embd=24,
        n_layer=2,
        n_head=3,
        vocab_size=VOCAB,
        n_positions=20,
        num_labels=4,
        attn_implementation="eager",
    )
    base.update(values)
    return transformers.ImageGPTConfig(**base)


def randomize(module: nn.Module) -> nn.Module:
    """Unit-scale random weights (seeded by the caller): norm gains near 1, biases of 0.2,
    matrices std 1/sqrt(fan_in), embeddings of 0.5 (HF's ImageGPT norm gains start empty)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and "ln" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            elif "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)
    return module


def hf_model(head: str = "lm", seed: int = 0, **values: object) -> nn.Module:
    torch.manual_seed(seed)
    return randomize(HF_CLASSES[head](hf_config(**values))).eval()


def pixels(batch: int = 3, length: int = 12, seed: int = 1) -> torch.Tensor:
    """[start] + random pixel ids (B, L)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB - 1, (batch, length), generator=g)
    ids[:, 0] = VOCAB - 1
    return ids


@pytest.mark.parametrize("head", ["lm", "sequence", "none"])
def test_from_hf_gives_the_same_outputs(head: str) -> None:
    hf = hf_model(head)
    model = from_hf(hf)
    assert isinstance(model, IGPT) and model.config.head == head
    assert not model.training
    ids = pixels()
    with torch.no_grad():
        out = hf(input_ids=ids)
        theirs = out.last_hidden_state if head == "none" else out.logits
        ours = model(ids)
    expected = {"lm": (3, 12, VOCAB - 1), "sequence": (3, 4), "none": (3, 12, 24)}[head]
    assert ours.shape == theirs.shape == expected
    torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL)
    # Copies: changing the tfam model leaves HF's weights alone.
    with torch.no_grad():
        model.tok_embed.weight.add_(1.0)
    assert not torch.equal(
        model.tok_embed.weight,
        hf.state_dict()["wte.weight" if head == "none" else "transformer.wte.weight"],
    )


@pytest.mark.parametrize("head", ["lm", "sequence", "none"])
def test_to_hf_round_trip(head: str) -> None:
    torch.manual_seed(0)
    model = tfam.create_model(
        "igpt_digits", dim=24, heads=3, depth=2, head=head, num_labels=4
    ).eval()
    randomize(model)  # tfam names: "norm" gains near 1 through the ndim-1 rule
    hf = to_hf(model).eval()
    assert type(hf) is HF_CLASSES[head]
    ids = pixels(length=9)
    ids[:, 1:] = ids[:, 1:] % 17
    with torch.no_grad():
        out = hf(input_ids=ids)
        theirs = out.last_hidden_state if head == "none" else out.logits
        torch.testing.assert_close(model(ids), theirs, rtol=0, atol=ATOL)
        again = from_hf(hf).eval()
        torch.testing.assert_close(again(ids), model(ids), rtol=0, atol=ATOL)


def test_greedy_pixels_equal_hf_generate() -> None:
    hf = hf_model("lm")
    model = from_hf(hf)
    prompt = pixels(batch=2, length=4)
    with torch.no_grad():
        theirs = hf.generate(input_ids=prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
        ours = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(ours, theirs)


def test_imagegpt_small_has_hf_parameter_count() -> None:
    with torch.device("meta"):
        hf = transformers.ImageGPTForCausalImageModeling(transformers.ImageGPTConfig())
    assert hf.lm_head.weight.shape == (512, 512)  # vocab_size - 1 rows, untied
    assert tfam.models.count_parameters("imagegpt_small") == sum(p.numel() for p in hf.parameters())


def test_refusals_are_one_line() -> None:
    model = tfam.create_model("igpt_digits", dim=16, heads=2, depth=1, norm="layernorm")
    with pytest.raises(ValueError, match=r"^norm='layernorm' cannot be converted"):
        to_hf(model)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_hf(hf_model("lm", scale_attn_by_inverse_layer_idx=True))
