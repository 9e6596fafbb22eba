"""Every kernel x every position scheme x every family: it trains a step (forward and backward,
finite), or refuses the pair in one line, as the kernel's declaration says.

Registry-driven: a kernel, a scheme or a family registered later joins without a new test. A
pair is refused only where the kernel declares the refusal: a scheme acting on the scores
(ALiBi, relative) with a kernel refusing ``bias`` is refused when the config is built
(:func:`tfam.config.check_attention_position`); a feature the family's forward asks for
(causal, a key mask, cross-attention's lengths) that the kernel refuses is refused at the call
(``AttentionKernel.check_call``). Anything else must run.
"""

from __future__ import annotations

import functools

import pytest
import torch

import tfam
from tfam.config import POSITION_SCHEMES
from tfam.layers.kernels import FEATURES, KERNELS
from tfam.models import MODEL_CLASSES, count_parameters, create_config, list_models


@functools.cache
def _smallest(family: str) -> str:
    names = [n for n in list_models() if create_config(n).family == family]
    return min(names, key=count_parameters)


# The families with attention layers (``Family.attends``): a CNN has no kernel to switch.
CASES = [
    (family, position, kernel)
    for family, cls in sorted(MODEL_CLASSES.items())
    if cls.attends
    for position in cls.config_class.position_names()
    for kernel in sorted(KERNELS)
]


def _build(family: str, position: str, kernel: str) -> tfam.models.TfamModel:
    name = _smallest(family)
    config = create_config(name)
    extra = {"vocab_size": min(config.vocab_size, 64)} if hasattr(config, "vocab_size") else {}
    return tfam.create_model(
        name,
        depth=1,
        dim=8 * config.heads,
        ffn_dim=16,
        position=position,
        attention=kernel,
        **extra,
    )


def _declared(kernel: str, message: str) -> bool:
    """The message is one of the kernel's declared refusals (Kernel.refusal's line)."""
    cls = KERNELS[kernel]
    return any(cls.refusal(f) and cls.refusal(f) in message for f in FEATURES if f in cls.refuses)


@pytest.mark.parametrize("family,position,kernel", CASES)
def test_kernel_position_family(family, position, kernel):
    torch.manual_seed(0)
    needs_bias = POSITION_SCHEMES[position].acts == "scores"
    try:
        model = _build(family, position, kernel)
    except ValueError as err:
        message = str(err)
        assert "\n" not in message, message
        assert needs_bias and "bias" in KERNELS[kernel].refuses, (
            f"{family}/{position}/{kernel} refused at build without a declared reason: {message}"
        )
        assert _declared(kernel, message) and repr(position) in message, message
        return
    assert not (needs_bias and "bias" in KERNELS[kernel].refuses), "a refused pair was built"
    model.train()
    inputs = model.example_inputs(batch_size=2)
    try:
        out = model(*inputs)
    except ValueError as err:
        message = str(err)
        assert "\n" not in message and _declared(kernel, message), (
            f"{family}/{position}/{kernel}: {message}"
        )
        return
    assert torch.isfinite(out).all(), f"{family}/{position}/{kernel}: not finite"
    out.float().square().mean().backward()
    for pname, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"{family}/{position}/{kernel}: {pname}"


def test_set_attention_refuses_a_bias_scheme_it_cannot_serve():
    refusing = sorted(k for k, cls in KERNELS.items() if "bias" in cls.refuses)
    if not refusing:
        pytest.skip("no registered kernel refuses a bias")
    model = tfam.create_model("gpt", dim=16, depth=1, heads=2, vocab_size=32, position="alibi")
    with pytest.raises(ValueError, match=r"position='alibi' adds a bias to every score") as err:
        model.set_attention(refusing[0])
    assert "\n" not in str(err.value)
    assert model.config.attention != refusing[0], "the refusal left the model unchanged"
