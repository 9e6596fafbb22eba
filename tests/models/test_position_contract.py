"""Every position scheme in every family that declares it, under one contract: a scheme or a
family registered later is covered without writing a test.

For each family and each name in its config's ``position_names()`` (derived from the scheme
registry and the family's declarations): a small model with that scheme runs forward and
backward with finite gradients on every parameter, the scheme is wired as it says it acts,
and ``save_pretrained``/``from_pretrained`` give equal outputs.
"""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.config import POSITION_SCHEMES
from tfam.layers import MultiHeadAttention, TransformerStack
from tfam.models import MODEL_CLASSES, count_parameters, create_config, list_models


def smallest_preset(family: str) -> str:
    names = [n for n in list_models() if create_config(n).family == family]
    return min(names, key=count_parameters)


def small(family: str, position: str) -> tfam.models.TfamModel:
    """The family's smallest preset, shrunk (as the preset contract does), with ``position``."""
    name = smallest_preset(family)
    heads = create_config(name).heads
    return tfam.create_model(
        name, depth=min(create_config(name).depth, 2), dim=8 * heads, ffn_dim=None,
        position=position,
    )  # fmt: skip


CASES = [
    (family, position)
    for family, cls in sorted(MODEL_CLASSES.items())
    for position in cls.config_class.position_names()
]


def test_every_family_declares_at_least_one_scheme():
    assert {family for family, _ in CASES} == set(MODEL_CLASSES)


@pytest.mark.parametrize("family,position", CASES)
def test_position_trains_wires_and_saves(family, position, tmp_path):
    torch.manual_seed(0)
    model = small(family, position)
    scheme = POSITION_SCHEMES[position]
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    stacks = [m for m in model.modules() if isinstance(m, TransformerStack)]
    # Wired as it says it acts, and only so.
    assert any(a.qk_transform is not None for a in attentions) == (scheme.acts == "qk")
    assert any(s.bias_provider is not None for s in stacks) == (scheme.acts == "scores")
    inputs = model.example_inputs(batch_size=2)
    model.train()
    out = model(*inputs)
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{family}/{position}: {pname} gets no gradient"
        assert torch.isfinite(p.grad).all(), f"{family}/{position}: {pname} is not finite"
    model.eval()
    with torch.no_grad():
        before = model(*inputs)
    model.save_pretrained(tmp_path / "m")
    loaded = tfam.from_pretrained(tmp_path / "m")
    assert loaded.config.position == position
    assert set(loaded.state_dict()) == set(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(loaded(*inputs), before, rtol=0, atol=0)
