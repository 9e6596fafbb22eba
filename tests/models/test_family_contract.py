"""Every registered family, and every position scheme in every family that declares it, under
one contract: a family or a scheme registered later is covered without writing a test.

For each family (``MODEL_CLASSES``; a small version of its smallest preset):
``forward_head(forward_features(x))`` equals ``forward(x)``, and ``return_attention=True`` gives
one :class:`~tfam.models.AttentionWeights` of (B, H, Lq, Lk) maps whose rows are distributions.

For each family and each name in its config's ``position_names()`` (derived from the scheme
registry and the family's declarations): a small model with that scheme runs forward and
backward with finite gradients on every parameter, the scheme is wired as it says it acts,
and ``save_pretrained``/``from_pretrained`` give equal outputs.

For each family, on a small real instance: ``explain``'s total equals the parameter count
(each parameter once) and leaves the model as it was; every registered kernel, switched in
by ``set_attention``, gives ``math``'s outputs and gradients when it declares itself exact;
and for each converter the family declares (``Family.converters``), ``to_hf`` then
``from_hf`` gives a model with equal outputs (1e-5) that the registered ``compare`` agrees
with. (One training step on each task a family declares is in
``tests/training/test_task_contract.py``, beside the tiny datasets of each task.)
"""

from __future__ import annotations

import functools

import pytest
import torch

import tfam
from tfam.config import POSITION_SCHEMES
from tfam.layers import MultiHeadAttention, TokenBatchNorm, TransformerStack
from tfam.layers.kernels import KERNELS
from tfam.models import (
    MODEL_CLASSES,
    AttentionWeights,
    count_parameters,
    create_config,
    list_models,
)


@functools.cache
def smallest_preset(family: str) -> str:
    names = [n for n in list_models() if create_config(n).family == family]
    return min(names, key=count_parameters)


def small(family: str, **overrides: object) -> tfam.models.TfamModel:
    """The family's smallest preset, shrunk (as the preset contract does), with overrides."""
    name = smallest_preset(family)
    config = create_config(name)
    return tfam.create_model(name, **MODEL_CLASSES[family].small_overrides(config), **overrides)


FAMILIES = sorted(MODEL_CLASSES)
# The families with attention layers (``Family.attends``): the attention parts of the contract
# (``return_attention``, every kernel through ``set_attention``) are theirs.
ATTENDING = [f for f in FAMILIES if MODEL_CLASSES[f].attends]


@pytest.mark.parametrize("family", FAMILIES)
def test_features_then_head_equals_forward(family):
    """In float64, so the one path a family shortens (ViT's last block reading [CLS] alone)
    agrees to rounding; in float32 the others are bit-equal."""
    torch.manual_seed(0)
    model = small(family).double().eval()
    inputs = tuple(t.double() if t.is_floating_point() else t for t in model.example_inputs(2))
    with torch.no_grad():
        out = model(*inputs)
        features = model.forward_features(*inputs)
        head = model.forward_head(features)
    assert isinstance(features, torch.Tensor) and features.shape[0] == 2
    assert features.shape[-1] == model.feature_dim, "features are as wide as declared"
    torch.testing.assert_close(head, out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", ATTENDING)
def test_return_attention_is_one_type(family):
    torch.manual_seed(0)
    model = small(family).eval()
    inputs = model.example_inputs(2)
    with torch.no_grad():
        plain = model(*inputs)
        out, weights = model(*inputs, return_attention=True)
        features, again = model.forward_features(*inputs, return_attention=True)
    torch.testing.assert_close(out, plain)
    torch.testing.assert_close(model.forward_head(features), plain)
    assert isinstance(weights, AttentionWeights) and isinstance(again, AttentionWeights)
    assert weights.groups == again.groups and weights.main == weights.groups[0]
    assert len(weights) == len(weights[weights.main]) > 0
    assert list(weights) == list(weights[weights.main])
    heads = model.config.heads
    windows = type(model).attention_layout == "windows"
    # Windowed maps carry their block's heads (stages differ), blocks in module order.
    layer_heads = [m.heads for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for group in weights.groups:
        maps = weights[group]
        assert len(maps) > 0, group
        for i, w in enumerate(maps):
            if windows:  # (B * nW, H_block, Ws^2, Ws^2): each window's own attention
                assert w.ndim == 4 and w.shape[0] % 2 == 0, (group, i, tuple(w.shape))
                assert w.shape[1] == layer_heads[i], (group, i, tuple(w.shape))
            else:
                assert w.ndim == 4 and w.shape[:2] == (2, heads), (group, i, tuple(w.shape))
            if group != "cross":
                assert w.shape[-1] == w.shape[-2], (group, i, tuple(w.shape))
            # Every query row is a distribution over the keys.
            torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    if "cross" in weights:
        decoder, cross = weights["decoder"], weights["cross"]
        assert len(decoder) == len(cross)
        assert cross[0].shape[-2] == decoder[0].shape[-1], "cross queries are the target's"
        assert cross[0].shape[-1] == weights["encoder"][0].shape[-1], "cross keys the source's"
    with pytest.raises(KeyError, match="groups"):
        weights["no such group"]


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
    model = small(family, position=position)
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


def few_ids(name: str) -> dict:
    """A small vocabulary where the preset has one (keeps these tests fast)."""
    config = create_config(name)
    return {"vocab_size": min(config.vocab_size, 64)} if hasattr(config, "vocab_size") else {}


@pytest.mark.parametrize("family", FAMILIES)
def test_explain_total_equals_the_parameter_count(family):
    """On a small real instance (the preset contract checks the full sizes on meta): each
    parameter once, a tied one included, and explaining leaves the model as it was."""
    torch.manual_seed(0)
    model = small(family, **few_ids(smallest_preset(family)))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    table = tfam.explain(model)
    assert table.total_params == sum(p.numel() for p in model.parameters()) > 0
    assert all(v.device.type != "meta" for v in model.state_dict().values())
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


CONVERTERS = [
    (family, converter.model_type)
    for family, cls in sorted(MODEL_CLASSES.items())
    for converter in cls.converters
    if converter.to_hf is not None
]


def convertible(family: str, model_type: str) -> tuple[tfam.models.TfamModel, object]:
    """The first preset of the family (smallest first, shrunk) that the converter writes, in
    eval mode, with its Hugging Face counterpart; refusals (one ValueError line) are skipped."""
    converter = next(c for c in MODEL_CLASSES[family].converters if c.model_type == model_type)
    names = [n for n in list_models() if create_config(n).family == family]
    refusals = []
    for name in sorted(names, key=count_parameters):
        config = create_config(name)
        torch.manual_seed(0)
        model = tfam.create_model(
            name, **MODEL_CLASSES[family].small_overrides(config), **few_ids(name)
        ).eval()
        try:
            return model, converter.to_hf(model)
        except ValueError as err:
            refusals.append(f"{name}: {err}")
    pytest.fail(f"{family}: no preset converts to {model_type!r}: {'; '.join(refusals)}")


def test_families_with_a_converter_are_covered():
    assert {f for f, _ in CONVERTERS} == {
        f for f, cls in MODEL_CLASSES.items() if any(c.to_hf for c in cls.converters)
    }


@pytest.mark.filterwarnings("ignore::UserWarning")  # what HF lacks and eval never uses
@pytest.mark.parametrize("family,model_type", CONVERTERS)
def test_converter_round_trip(family, model_type):
    """to_hf then from_hf gives a tfam model with equal outputs (1e-5), and the registered
    compare agrees both ways. (A family without a converter has no case here.)"""
    pytest.importorskip("transformers", reason="the converters need transformers")
    converter = next(c for c in MODEL_CLASSES[family].converters if c.model_type == model_type)
    model, hf = convertible(family, model_type)
    hf.eval()
    again = converter.from_hf(hf).eval()
    assert type(again) is type(model)
    inputs = model.example_inputs(2)
    with torch.no_grad():
        torch.testing.assert_close(again(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)
        assert converter.compare(model, hf) <= 1e-5
        assert converter.compare(again, hf) <= 1e-5


KERNEL_CASES = [(family, kernel) for family in ATTENDING for kernel in sorted(KERNELS)]


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - set(ATTENDING)))
def test_a_family_without_attention_refuses_it_in_one_line(family):
    """``return_attention`` and ``set_attention`` on a family that does not attend: one
    ValueError line each, never a silent no-op."""
    model = small(family).eval()
    inputs = model.example_inputs(2)
    for call in (
        lambda: model(*inputs, return_attention=True),
        lambda: model.set_attention("math"),
    ):
        with pytest.raises(ValueError, match="attention") as err:
            call()
        assert "\n" not in str(err.value)


def _output_and_grads(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(*inputs)
    out.square().mean().backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("family,kernel", KERNEL_CASES)
def test_every_kernel_in_every_family(family, kernel):
    """``set_attention(kernel)`` in a real model of each family (float64): an exact kernel
    gives ``math``'s outputs and gradients; any other runs with finite outputs; a feature the
    kernel refuses and the family uses is one ValueError line naming the kernel."""
    cls = KERNELS.get(kernel)
    if cls is None:
        pytest.skip(f"kernel {kernel!r} was registered for another test module only")
    torch.manual_seed(0)
    model = small(family, **few_ids(smallest_preset(family))).double().eval()
    inputs = tuple(t.double() if t.is_floating_point() else t for t in model.example_inputs(2))
    model.set_attention("math")
    reference, reference_grads = _output_and_grads(model, inputs)
    try:
        model.set_attention(kernel)
        out, grads = _output_and_grads(model, inputs)
    except ValueError as err:
        assert cls.refuses, f"{kernel} refuses nothing but raised: {err}"
        assert "\n" not in str(err) and repr(kernel) in str(err), str(err)
        return
    assert model.config.attention == kernel
    assert all(
        m.kernel.name == kernel for m in model.modules() if isinstance(m, MultiHeadAttention)
    )
    assert torch.isfinite(out).all()
    if cls.exactness == "exact":
        torch.testing.assert_close(out, reference, rtol=1e-10, atol=1e-10)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, reference_grads[name], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("family", ATTENDING)
def test_batchnorm_in_every_family(family):
    """norm='batchnorm' (each feature over the batch's tokens) builds in every family with
    blocks: every norm is a TokenBatchNorm, forward and backward are finite in training mode,
    and evaluation (running statistics) gives finite outputs."""
    torch.manual_seed(0)
    model = small(family, norm="batchnorm", **few_ids(smallest_preset(family)))
    kinds = (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.BatchNorm1d)
    norms = [m for m in model.modules() if isinstance(m, kinds)]
    assert norms and all(isinstance(m, TokenBatchNorm) for m in norms)
    inputs = model.example_inputs(2)
    out, grads = _output_and_grads(model.train(), inputs)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads.values())
    with torch.no_grad():
        assert torch.isfinite(model.eval()(*inputs)).all()


@pytest.mark.parametrize("norm", ["batchnorm", "none"])
def test_explain_counts_batchnorm_and_no_norm(norm):
    """explain claims every parameter once with either norm (a ViT and a BERT)."""
    for family in ("vit", "bert"):
        model = small(family, norm=norm, **few_ids(smallest_preset(family)))
        if norm == "none":
            kinds = (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.BatchNorm1d)
            assert not any(isinstance(m, kinds) for m in model.modules())
        assert tfam.explain(model).total_params == sum(p.numel() for p in model.parameters())
