"""The converter registry: every hf_* module registers itself, its family lists it, and
from_hf / to_hf take a converter registered with one call (no dispatch to edit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import tfam
from tfam.interop import from_hf, registry, to_hf
from tfam.interop.registry import CONVERTERS, Converter, register_converter
from tfam.models import MODEL_CLASSES, Transformer
from tfam.models.base import INPUT_KINDS


def test_every_converter_module_registers_itself_with_its_family() -> None:
    assert {"vit", "bert", "gpt2"} <= set(CONVERTERS)
    for name, converter in CONVERTERS.items():
        assert converter.model_type == name
        assert converter in converter.family.converters
        assert converter.hf_classes and callable(converter.from_hf)
    # A family lists only its own converters (a subclass is another family).
    for cls in MODEL_CLASSES.values():
        assert all(c.family is cls for c in cls.converters)


def test_families_declare_what_the_command_line_asks() -> None:
    for cls in MODEL_CLASSES.values():
        assert cls.title and cls.inputs in INPUT_KINDS
        assert cls.tasks and all(isinstance(t, str) for t in cls.tasks)


def test_a_converter_joins_with_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "CONVERTERS", dict(CONVERTERS))
    monkeypatch.setattr(Transformer, "converters", ())
    model = tfam.create_model("transformer", dim=16, depth=1, heads=2, vocab_size=32)
    calls = []

    def fake_from_hf(hf_model, **options):  # noqa: ANN001, ANN202
        calls.append(("from", options))
        return model

    def fake_to_hf(m, **options):  # noqa: ANN001, ANN202
        calls.append(("to", options))
        return "an HF model"

    converter = register_converter(
        Converter("fake_type", Transformer, ("FakeModel",), fake_from_hf, fake_to_hf)
    )
    assert Transformer.converters == (converter,)
    hf = SimpleNamespace(config=SimpleNamespace(model_type="fake_type"))
    assert from_hf(hf, attention="math") is model
    assert to_hf(model, id2label=None) == "an HF model"
    assert calls == [("from", {"attention": "math"}), ("to", {"id2label": None})]
    # Registering again (a module reload) replaces it rather than listing it twice.
    register_converter(converter)
    assert Transformer.converters == (converter,)


def test_unknown_counterparts_are_one_line_naming_what_converts() -> None:
    hf = SimpleNamespace(config=SimpleNamespace(model_type="mystery"))
    with pytest.raises(ValueError, match=r"model_type='mystery'\) is invalid: .*'gpt2' \("):
        from_hf(hf)
