"""`tfam train FAMILY --data FILE`: the user's own text files for every text family, end to end
(train a few steps, then predict / translate / generate / eval on the run), and each error
about a file as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TINY = ["--set", "dim=32", "--set", "depth=1", "--set", "heads=2", "--set", "ffn_dim=64"]
STEPS = ["--max-steps", "3", "--batch-size", "8", "--quiet"]

POS = ["a fine film", "great acting and a warm story", "i loved it", "a joy to watch"]
NEG = ["a dull film", "bad acting and a cold story", "i hated it", "a pain to watch"]
PAIRS = [("one", "uno"), ("two", "dos"), ("three", "tres"), ("four", "cuatro"), ("five", "cinco")]
STORY = "the cat sat on the mat and the dog ran in the park ."


def reviews_csv(path: Path, n: int = 12) -> Path:
    rows = ["text,label"] + [
        f'"{(POS if i % 2 else NEG)[i % 4]}",{"pos" if i % 2 else "neg"}' for i in range(n)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def pairs_jsonl(path: Path, n: int = 20) -> Path:
    lines = [
        json.dumps({"sentence1": POS[i % 4], "sentence2": NEG[i % 4], "label": i % 2})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def conllu(path: Path, n: int = 10) -> Path:
    block = (
        "# sent_id = {i}\n"
        "1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
        "2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
        "3\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\t_\n\n"
    )
    path.write_text("".join(block.format(i=i) for i in range(n)))
    return path


def tags_jsonl(path: Path, n: int = 10) -> Path:
    row = {"tokens": ["the", "cat", "runs"], "tags": ["DET", "NOUN", "VERB"]}
    path.write_text("".join(json.dumps(row) + "\n" for _ in range(n)))
    return path


def story(path: Path, n: int = 30) -> Path:
    path.write_text("".join(f"{STORY}\n" for _ in range(n)))
    return path


def pairs_tsv(path: Path, n: int = 20) -> Path:
    path.write_text("en\tes\n" + "".join(f"{a}\t{b}\n" for a, b in (PAIRS * n)[:n]))
    return path


def translation_jsonl(path: Path, n: int = 20) -> Path:
    rows = [json.dumps({"translation": {"en": a, "es": b}}) for a, b in (PAIRS * n)[:n]]
    path.write_text("\n".join(rows) + "\n")
    return path


def train(cli, family: str, data: Path, out: Path, *extra: str) -> dict:
    code, _, err = cli(["train", family, "--data", data, *TINY, *STEPS, "--out", out, *extra])
    assert code == 0, err
    return json.loads((out / "train_args.json").read_text())


# ------------------------------------------------------------------------------- classification
def test_bert_classifies_a_csv_then_predicts_and_evaluates(cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    saved = train(cli, "bert", reviews_csv(tmp_path / "reviews.csv"), out)
    assert saved["task"] == "sequence-classification" and saved["text_column"] is None
    labels = json.loads((out / "labels.json").read_text())
    assert labels["classes"] == ["neg", "pos"]
    code, text, err = cli(["predict", out, "a fine film"])
    assert code == 0, err
    assert "a fine film" in text and ("pos" in text and "neg" in text)
    code, text, err = cli(["eval", out])
    assert code == 0, err
    assert "reviews.csv val: 2 sentences" in text and "accuracy:" in text


def test_bert_sentence_pairs_with_val_and_test_files(cli, tmp_path: Path) -> None:
    data = pairs_jsonl(tmp_path / "train.jsonl")
    val = pairs_jsonl(tmp_path / "val.jsonl", 4)
    test = pairs_jsonl(tmp_path / "test.jsonl", 6)
    out = tmp_path / "run"
    code, text, err = cli(
        ["train", "bert", "--data", data, "--val", val, "--test", test, *TINY]
        + ["--max-steps", "2", "--batch-size", "8", "--out", out]
    )
    assert code == 0, err
    assert "20 train / 4 val / 6 test sentences" in text
    assert 'text column "sentence1,sentence2"' in text and f"val 4 (from {val})" in text
    code, text, err = cli(["eval", out])
    assert code == 0, err
    assert "test: 6 sentences" in text


def test_bert_classifier_from_minilm_uses_its_tokenizer(cli, tmp_path: Path) -> None:
    from tfam.data import minilm_dir

    try:
        minilm_dir()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    out = tmp_path / "run"
    code, text, err = cli(
        ["train", "bert", "--data", reviews_csv(tmp_path / "r.csv"), "--init", "minilm_l6"]
        + ["--preset", "minilm_l6", "--max-steps", "1", "--batch-size", "4", "--out", out]
    )
    assert code == 0, err
    assert "the given WordPieceTokenizer (30,522 ids)" in text
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 30522


# ---------------------------------------------------------------------------------- tagging
@pytest.mark.parametrize("kind", ["conllu", "jsonl"])
def test_bert_tags_conllu_and_jsonl(cli, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "run"
    if kind == "conllu":
        saved = train(cli, "bert", conllu(tmp_path / "t.conllu"), out, "--label-column", "xpos")
        tags = ["DT", "NN", "VBZ"]
    else:
        saved = train(cli, "bert", tags_jsonl(tmp_path / "t.jsonl"), out)
        tags = ["DET", "NOUN", "VERB"]
    assert saved["task"] == "token-classification"
    assert json.loads((out / "labels.json").read_text())["classes"] == sorted(tags)
    code, text, err = cli(["predict", out, "the cat runs"])
    assert code == 0, err
    assert "cat" in text
    code, text, err = cli(["eval", out])
    assert code == 0, err
    assert "words" in text


# ------------------------------------------------------------------------ language modelling
@pytest.mark.parametrize("shape", ["txt", "folder", "jsonl"])
def test_gpt_learns_text_then_generates_and_evaluates(cli, tmp_path: Path, shape: str) -> None:
    if shape == "txt":
        data = story(tmp_path / "story.txt")
    elif shape == "folder":
        data = tmp_path / "books"
        data.mkdir()
        story(data / "a.txt", 15)
        story(data / "b.txt", 15)
    else:
        data = tmp_path / "lines.jsonl"
        data.write_text("".join(json.dumps({"text": STORY}) + "\n" for _ in range(30)))
    out = tmp_path / "run"
    saved = train(cli, "gpt", data, out)
    assert saved["task"] == "causal-lm"
    code, text, err = cli(["generate", out, "--prompt", "the cat", "--max-new-tokens", "5"])
    assert code == 0, err
    assert text.startswith("the cat")
    code, text, err = cli(["eval", out])
    assert code == 0, err
    assert "nats/token" in text


def test_bert_pretrains_masked_lm_on_text(cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    saved = train(cli, "bert", story(tmp_path / "story.txt"), out)
    assert saved["task"] == "masked-lm"
    assert json.loads((out / "config.json").read_text())["head"] == "mlm"
    code, text, err = cli(["eval", out])
    assert code == 0, err
    assert "masked tokens" in text


def test_bert_pretrains_on_labelled_texts_then_fine_tunes_to_classify(cli, tmp_path: Path) -> None:
    """BERT's two stages from the CLI: masked-LM on the texts (their labels unused: the batches'
    class labels give way to the masking's), then --init from that run to classify, whose
    pooler (which the masked-LM run had no use for) is built new."""
    data = reviews_csv(tmp_path / "reviews.csv", n=24)
    pre = tmp_path / "pre"
    assert train(cli, "bert", data, pre, "--task", "mlm")["task"] == "masked-lm"
    assert json.loads((pre / "config.json").read_text())["pooler"] is False
    out = tmp_path / "run"
    code, _, err = cli(["train", "bert", "--data", data, *STEPS, "--init", pre, "--out", out])
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["head"] == "sequence" and config["pooler"] is True and config["dim"] == 32


def test_gpt_resume_reads_the_saved_file_options(cli, tmp_path: Path) -> None:
    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({"body": STORY, "n": i}) + "\n" for i in range(30)))
    out = tmp_path / "run"
    saved = train(cli, "gpt", data, out, "--text-column", "body")
    assert saved["text_column"] == "body"
    code, _, err = cli(
        ["train", "gpt", "--data", data, "--out", out, "--resume", "--max-steps", "4"]
    )
    assert code == 0, err
    code, text, err = cli(["eval", out])
    assert code == 0, err


# ------------------------------------------------------------------------------ translation
@pytest.mark.parametrize("kind", ["tsv", "jsonl"])
def test_transformer_translates_tsv_and_jsonl(cli, tmp_path: Path, kind: str) -> None:
    write = pairs_tsv if kind == "tsv" else translation_jsonl
    out = tmp_path / "run"
    saved = train(cli, "transformer", write(tmp_path / f"pairs.{kind}"), out)
    assert saved["task"] == "seq2seq"
    code, text, err = cli(["translate", out, "one", "--max-new-tokens", "4"])
    assert code == 0, err
    code, text, err = cli(["eval", out, "--beam", "1", "--max-new-tokens", "4"])
    assert code == 0, err
    assert "BLEU" in text


# ----------------------------------------------------------------------------------- errors
def _error(cli, one_line, argv: list) -> str:
    code, _, err = cli(argv)
    assert code == 2, err
    return one_line(err)


def test_file_errors_are_one_line(cli, one_line, tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": \n')
    line = _error(cli, one_line, ["train", "bert", "--data", bad_json])
    assert f"{bad_json}:2 is not valid JSON" in line
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,label\na,1\nb,0,extra\n")
    line = _error(cli, one_line, ["train", "bert", "--data", bad_csv])
    assert f"{bad_csv}:3 has 3 fields; the header has 2" in line
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine line\ncaf\xe9 au lait\n")
    line = _error(cli, one_line, ["train", "gpt", "--data", latin])
    assert f"{latin}:2 is not UTF-8 text (byte 0xe9 at column 4)" in line
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n  \n")
    line = _error(cli, one_line, ["train", "bert", "--data", empty])
    assert f"{empty} is empty" in line
    one = tmp_path / "one.csv"
    one.write_text("text,label\n" + "".join(f"text {i},yes\n" for i in range(6)))
    line = _error(cli, one_line, ["train", "bert", "--data", one])
    assert "every example has the label 'yes'" in line and "at least 2 classes" in line
    data = reviews_csv(tmp_path / "r.csv")
    line = _error(cli, one_line, ["train", "bert", "--data", data, "--label-column", "stars"])
    assert "--label-column 'stars' is invalid" in line and "its columns: text, label" in line
    line = _error(cli, one_line, ["train", "bert", "--data", data, "--text-column", "body"])
    assert "--text-column 'body' is invalid" in line


def test_family_and_option_errors_are_one_line(cli, one_line, tmp_path: Path) -> None:
    pairs = pairs_tsv(tmp_path / "my_pairs.tsv")
    line = _error(cli, one_line, ["train", "gpt", "--data", pairs])
    assert "MODEL 'gpt' cannot learn from" in line and "seq2seq" in line
    line = _error(
        cli, one_line, ["train", "bert", "--data", story(tmp_path / "s.txt"), "--task", "tag"]
    )
    assert "--task 'tag' is invalid" in line and "clm, mlm" in line
    line = _error(cli, one_line, ["train", "vit", "--data", "digits", "--text-column", "text"])
    assert "--text-column is invalid for --data digits" in line
    line = _error(cli, one_line, ["train", "gpt", "--data", tmp_path / "nothing.txt"])
    assert "--data" in line and "text file" in line
