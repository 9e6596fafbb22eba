"""`tfam convert` for BERT and GPT-2: tiny random Hugging Face models saved with save_pretrained,
converted to tfam and back through the real entry point, compared by output to 1e-5."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import tfam  # noqa: E402

ATOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    """Weights far from HF's init (biases and norms included), so a weight copied to the wrong
    place shows in the outputs."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) / max(p[0].numel(), 4) ** 0.5)
    return module.eval()


def bert_config(**values: object) -> transformers.BertConfig:
    base = dict(
        vocab_size=53,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,  # odd head count: head width 8
        intermediate_size=40,
        max_position_embeddings=16,
        num_labels=3,
    )
    base.update(values)
    return transformers.BertConfig(**base)


def ids_and_mask() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 53, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return ids, mask


HF_BERTS = {
    "BertModel": lambda c: transformers.BertModel(c, add_pooling_layer=True),
    "BertForTokenClassification": transformers.BertForTokenClassification,
    "BertForSequenceClassification": transformers.BertForSequenceClassification,
}


@pytest.mark.parametrize("kind", list(HF_BERTS))
def test_bert_hf_to_tfam_and_back(cli, tmp_path, kind: str) -> None:
    torch.manual_seed(0)
    config = bert_config(id2label={0: "NOUN", 1: "VERB", 2: "PUNCT"})
    hf = randomized(HF_BERTS[kind](config))
    hf.save_pretrained(tmp_path / "hf")
    code, out, err = cli(["convert", "hf-to-tfam", tmp_path / "hf", tmp_path / "tfam"])
    assert code == 0, err
    assert "(ok," in out and "tfam BERT" in out

    model = tfam.from_pretrained(tmp_path / "tfam")
    ids, mask = ids_and_mask()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden = model.forward_features(ids, mask.bool())
        torch.testing.assert_close(hidden, theirs.hidden_states[-1], atol=ATOL, rtol=0)
        if kind == "BertModel":
            assert model.config.head == "none"
            torch.testing.assert_close(model.pool(hidden), theirs.pooler_output, atol=ATOL, rtol=0)
        else:
            torch.testing.assert_close(
                model(ids, attention_mask=mask.bool()), theirs.logits, atol=ATOL, rtol=0
            )
    if kind != "BertModel":
        labels = json.loads((tmp_path / "tfam" / "labels.json").read_text())
        assert labels["classes"] == ["NOUN", "VERB", "PUNCT"]
        assert labels["task"] == (
            "token-classification" if "Token" in kind else "sequence-classification"
        )

    # ... and back: the HF directory written from the tfam one computes the same.
    code, out, err = cli(["convert", "tfam-to-hf", tmp_path / "tfam", tmp_path / "back"])
    assert code == 0, err
    assert kind in out
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert written["architectures"] == [kind]
    back = getattr(transformers, kind).from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask)
    if kind == "BertModel":
        torch.testing.assert_close(again.pooler_output, theirs.pooler_output, atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(again.logits, theirs.logits, atol=ATOL, rtol=0)
        assert back.config.id2label == {0: "NOUN", 1: "VERB", 2: "PUNCT"}


def test_gpt2_hf_to_tfam_and_back(cli, tmp_path) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=61, n_positions=20, n_embd=30, n_layer=2, n_head=5, n_inner=44
    )
    hf = randomized(transformers.GPT2LMHeadModel(config))
    hf.save_pretrained(tmp_path / "hf")
    code, out, err = cli(["convert", "hf-to-tfam", tmp_path / "hf", tmp_path / "tfam"])
    assert code == 0, err
    assert "tfam GPT" in out and "(ok," in out
    model = tfam.from_pretrained(tmp_path / "tfam")
    ids = torch.randint(0, 61, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = hf(input_ids=ids).logits
        torch.testing.assert_close(model(ids), theirs, atol=ATOL, rtol=0)

    code, out, err = cli(["convert", "tfam-to-hf", tmp_path / "tfam", tmp_path / "back"])
    assert code == 0, err
    assert "GPT2LMHeadModel" in out
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids).logits, theirs, atol=ATOL, rtol=0)


def test_tfam_bert_run_to_hf_names_its_classes(cli, tmp_path) -> None:
    """A tfam sequence classifier with labels.json -> BertForSequenceClassification whose
    id2label are the run's classes; the labels and tokenizer files travel along."""
    torch.manual_seed(0)
    model = tfam.create_model(
        "bert",
        dim=16,
        depth=1,
        heads=2,
        ffn_dim=32,
        vocab_size=40,
        max_positions=12,
        head="sequence",
        num_labels=2,
    )
    model.save_pretrained(tmp_path / "run")
    labels = {
        "task": "sequence-classification",
        "data": "sentiment",
        "classes": ["negative", "positive"],
    }
    (tmp_path / "run" / "labels.json").write_text(json.dumps(labels))
    code, out, err = cli(["convert", "tfam-to-hf", tmp_path / "run", tmp_path / "hf"])
    assert code == 0, err
    hf = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf")
    assert hf.config.id2label == {0: "negative", 1: "positive"}
    assert json.loads((tmp_path / "hf" / "labels.json").read_text()) == labels


def test_convert_refuses_unknown_architectures(cli, one_line, tmp_path) -> None:
    torch.manual_seed(0)
    transformers.BertForNextSentencePrediction(bert_config()).save_pretrained(tmp_path / "nsp")
    code, _, err = cli(["convert", "hf-to-tfam", tmp_path / "nsp", tmp_path / "out"])
    assert code == 2
    line = one_line(err)
    assert "architectures=['BertForNextSentencePrediction']" in line
    assert "BertForSequenceClassification" in line
