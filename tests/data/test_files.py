"""The user's own text files: what each format is read as, the splits, the tokenizer, the
datasets each task gets, and the one-line errors naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tfam  # noqa: F401  (tells from_files the families' tasks)
from tfam.data import TaggingDataset, from_files, resolve_data
from tfam.data.sources.files import (
    HOLDOUT_SEED,
    TextClassDataset,
    TextLines,
    TokenWindows,
    load_user_text,
    train_byte_bpe,
    vocab_target,
)
from tfam.data.sources.seq2seq import Seq2SeqDataset
from tfam.data.sources.textfiles import is_text_folder, read_user_text
from tfam.data.text.tokenizer import BPETokenizer, load_tokenizer
from tfam.data.text.wordpiece import WordPieceTokenizer
from tfam.training.tasks import task_for

WORDS = "the cat sat on a mat while dogs ran far into green parks".split()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(5)) for i in range(n)]


# ------------------------------------------------------------------------- what a file holds
def test_tables_are_read_by_their_columns(tmp_path: Path) -> None:
    csv = write(tmp_path / "a.csv", 'text,label\n"hello, world",pos\nbye,neg\n')
    tf = read_user_text(csv)
    assert (tf.kind, tf.texts, tf.labels) == ("classify", ["hello, world", "bye"], ["pos", "neg"])
    # No usual names: two columns, one with few values, is text + label.
    rows = "".join(f"{s}\t{'ab'[i % 2]}\n" for i, s in enumerate(sentences(12)))
    tf = read_user_text(write(tmp_path / "b.tsv", "review\tstars\n" + rows))
    assert tf.kind == "classify" and tf.columns == {
        "text column": "review",
        "label column": "stars",
    }
    # Two text columns, neither a label: translation pairs.
    tf = read_user_text(write(tmp_path / "c.tsv", "en\tes\none\tuno\ntwo\tdos\n"))
    assert tf.kind == "translate" and tf.pairs == [("one", "uno"), ("two", "dos")]
    pair = json.dumps({"sentence1": "a b", "sentence2": "c d", "label": 1})
    tf = read_user_text(write(tmp_path / "d.jsonl", pair + "\n" + pair + "\n"))
    assert tf.kind == "classify" and tf.texts[0] == ("a b", "c d") and tf.labels == ["1", "1"]
    tf = read_user_text(
        write(tmp_path / "e.jsonl", json.dumps({"body": "x y"}) + "\n"), text_column="body"
    )
    assert tf.kind == "text" and tf.texts == ["x y"]


def test_translation_tagging_and_plain_text(tmp_path: Path) -> None:
    row = {"translation": {"en": "one", "es": "uno", "fr": "un"}}
    path = write(tmp_path / "t.jsonl", json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="holds 3 languages .*--source-lang and --target-lang"):
        read_user_text(path)
    tf = read_user_text(path, source_lang="fr", target_lang="es")
    assert tf.pairs == [("un", "uno")]
    tags = json.dumps({"tokens": ["a", "b"], "ner_tags": ["O", "B"]})
    tf = read_user_text(write(tmp_path / "g.jsonl", tags + "\n"))
    assert (tf.kind, tf.words, tf.tags) == ("tag", [["a", "b"]], [["O", "B"]])
    conllu = "1\ta\ta\tDET\tDT\t_\t0\troot\t_\t_\n1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n\n"
    path = write(tmp_path / "x.conllu", conllu)
    assert read_user_text(path).tags == [["DET"]]
    assert read_user_text(path, label_column="deprel").tags == [["root"]]
    with pytest.raises(ValueError, match="--label-column 'nope' is invalid .* upos, xpos"):
        read_user_text(path, label_column="nope")
    folder = tmp_path / "books"
    folder.mkdir()
    write(folder / "1.txt", "first  line\n\nsecond\n")
    write(folder / "2.txt", "third\n")
    assert is_text_folder(folder) and not is_text_folder(tmp_path / "t.jsonl")
    assert read_user_text(folder).texts == ["first line", "second", "third"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.jsonl", '{"text": "a"}\n[1, 2]\n', r"a.jsonl:2 is a JSON list"),
        ("b.jsonl", '{"text": "a"}\n\n{"text": \n', r"b.jsonl:3 is not valid JSON \("),
        (
            "c.csv",
            "text,label\na,1\nb\n",
            r"c.csv:3 has 1 fields; the header has 2 \(text, label\)",
        ),
        ("d.csv", "text,label\n", r"d.csv has a header row but no examples"),
        ("e.txt", " \n\n", r"e.txt is empty"),
        ("f.conllu", "1\ta\tb\n", r"f.conllu:1 has 3 tab-separated fields"),
        ("g.csv", "text,label\na,\n", r"g.csv:2 has no single label in column 'label'"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, name, content, message) -> None:
    with pytest.raises(ValueError, match=message):
        read_user_text(write(tmp_path / name, content))


def test_bytes_that_are_not_utf8_are_named(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"text,label\nok,1\nna\xefve,0\n")
    with pytest.raises(
        ValueError, match=r"latin.csv:3 is not UTF-8 text \(byte 0xef at column 3\)"
    ):
        read_user_text(path)


def test_missing_columns_name_the_columns_that_exist(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "body,stars,id\nx,1,1\ny,2,2\n")
    with pytest.raises(
        ValueError, match="cannot tell which column is the text; its columns: body, stars, id"
    ):
        read_user_text(path)
    with pytest.raises(
        ValueError, match="--label-column 'label' is invalid .* columns: body, stars, id"
    ):
        read_user_text(path, text_column="body", label_column="label")
    tf = read_user_text(path, text_column="body", label_column="stars")
    assert tf.texts == ["x", "y"] and tf.labels == ["1", "2"]


# -------------------------------------------------------------------------- splits and facts
def reviews(path: Path, n: int = 40) -> Path:
    lines = [f"{s},{'pos' if i % 4 else 'neg'}" for i, s in enumerate(sentences(n))]
    return write(path, "text,label\n" + "\n".join(lines) + "\n")


def test_classifier_entry_holds_out_ten_percent_per_class(tmp_path: Path) -> None:
    entry = from_files(reviews(tmp_path / "r.csv"), family="bert")
    assert (
        entry.task == "sequence-classification" and entry.is_folder and entry.tasks == (entry.task,)
    )
    train, val = entry.load("train"), entry.load("val")
    assert isinstance(train, TextClassDataset) and (len(train), len(val)) == (36, 4)
    assert sorted(val.labels) == [0, 1, 1, 1]  # 10 neg -> 1, 30 pos -> 3
    assert entry.test_split is None and entry.splits == ("train", "val")
    again = from_files(tmp_path / "r.csv", family="bert").load("val")
    assert again.texts == val.texts  # the fixed seed
    info = entry.info
    assert (info.classes, info.num_labels, info.head) == (("neg", "pos"), 2, "sequence")
    assert info.vocab_size == train.tokenizer.vocab_size and isinstance(
        train.tokenizer, WordPieceTokenizer
    )
    lengths = sorted(train.lengths)
    assert info.max_length == lengths[int(0.95 * len(lengths))]
    assert f"seed {HOLDOUT_SEED}" in info.description and "WordPiece trained" in info.description
    batch = train.get_batch([0, 1])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}


def test_val_and_test_files_are_used_as_given(tmp_path: Path) -> None:
    val = reviews(tmp_path / "v.csv", 8)
    test = reviews(tmp_path / "t.csv", 12)
    entry = from_files(reviews(tmp_path / "r.csv"), val=val, test=test)
    assert [len(entry.load(s)) for s in ("train", "val", "test")] == [40, 8, 12]
    assert entry.test_split == "test" and entry.info.test_size == 12
    other = write(tmp_path / "o.csv", "text,label\nx,maybe\ny,no\n")
    with pytest.raises(
        ValueError, match="--val .*o.csv has labels that --data .* has not: 'maybe', 'no'"
    ):
        from_files(tmp_path / "r.csv", val=other)
    text = write(tmp_path / "s.txt", "a b\n")
    with pytest.raises(ValueError, match="holds lines of text, but --data .* holds labelled texts"):
        from_files(tmp_path / "r.csv", val=text)


def test_one_class_and_one_example_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "one.csv", "text,label\na,x\nb,x\nc,x\n")
    with pytest.raises(
        ValueError, match=r"every example has the label 'x' \(label column 'label'\)"
    ):
        from_files(path)
    with pytest.raises(ValueError, match="holds 1 example: expected at least 2 .* --val FILE"):
        from_files(write(tmp_path / "single.txt", "just one line\n"), family="gpt")


def test_text_is_windows_for_gpt_and_lines_for_bert(tmp_path: Path) -> None:
    path = write(tmp_path / "story.txt", "\n".join(sentences(60)) + "\n")
    gpt = from_files(path, family="gpt")
    train = gpt.load("train")
    assert gpt.task == "causal-lm" and isinstance(train, TokenWindows)
    assert isinstance(train.tokenizer, BPETokenizer) and train.context == gpt.info.max_length
    batch = train.get_batch([0])
    assert batch["input_ids"].shape == batch["labels"].shape == (1, train.context)
    assert torch.equal(batch["input_ids"][0, 1:], batch["labels"][0, :-1])
    assert task_for("causal-lm", train).unit == "tokens"
    bert = from_files(path, family="bert")
    lines = bert.load("train")
    assert bert.task == "masked-lm" and isinstance(lines, TextLines) and bert.info.head == "mlm"
    task = task_for("masked-lm", lines)
    batch = task.augment(
        task.get_batch(lines, torch.arange(4)), None, torch.Generator().manual_seed(0), lines
    )
    assert (
        "labels" in batch and (batch["labels"] != -100).any()
    )  # masked by the task: 15%, 80/10/10
    assert from_files(path, task="mlm").task == "masked-lm"
    with pytest.raises(
        ValueError, match="--task 'translate' is invalid .* expected one of clm, mlm"
    ):
        from_files(path, task="translate")
    with pytest.raises(ValueError, match="MODEL 'transformer' cannot learn from"):
        from_files(path, family="transformer")
    with pytest.raises(ValueError, match="needs a tokenizer of plain text .* BERT's WordPiece"):
        from_files(path, family="gpt", tokenizer=lines.tokenizer)
    with pytest.raises(ValueError, match="task masked-lm needs a WordPiece tokenizer"):
        from_files(path, family="bert", tokenizer=train.tokenizer)


def test_tagging_and_translation_datasets(tmp_path: Path) -> None:
    row = json.dumps({"tokens": ["the", "cat"], "tags": ["DET", "NOUN"]})
    tags = from_files(write(tmp_path / "t.jsonl", (row + "\n") * 10))
    assert isinstance(tags.load("train"), TaggingDataset) and tags.info.classes == ("DET", "NOUN")
    assert tags.info.head == "token"
    pairs = write(tmp_path / "p.tsv", "en\tes\n" + "one two\tuno dos\nthree\ttres\n" * 5)
    entry = from_files(pairs)
    train = entry.load("train")
    assert entry.task == "seq2seq" and isinstance(train, Seq2SeqDataset)
    assert (entry.info.bos_token_id, entry.info.eos_token_id, entry.info.pad_token_id) == (1, 2, 0)
    assert train.pairs[0] == ("one two", "uno dos")


def test_byte_level_bpe_spells_unseen_text_and_round_trips(tmp_path: Path) -> None:
    target, words = vocab_target(sentences(20))
    assert words == len(WORDS) and target == 300 + words
    tok = train_byte_bpe(sentences(20), target)
    assert tok.vocab_size <= target and tok.encode("") == []
    ids = tok.encode("the cat sat in Zürich")
    assert tok.unk_id not in ids and tok.decode(ids) == "the cat sat in Zürich"
    tok.save(tmp_path)
    back = load_tokenizer(tmp_path)
    assert isinstance(back, BPETokenizer) and back.encode("the cat") == tok.encode("the cat")


def test_a_run_lends_its_options_and_tokenizer(tmp_path: Path) -> None:
    data = write(
        tmp_path / "d.jsonl", "".join(json.dumps({"body": s}) + "\n" for s in sentences(30))
    )
    first = from_files(data, family="gpt", text_column="body")
    run = tmp_path / "run"
    first.load("train").tokenizer.save(run)
    args = {"family": "gpt", "data": str(data), "task": "causal-lm", "text_column": "body"}
    write(run / "train_args.json", json.dumps(args))
    again = resolve_data(data, run=run)
    assert again.task == "causal-lm" and again.info.vocab_size == first.info.vocab_size
    assert again.info.max_length == first.info.max_length
    assert torch.equal(again.load("val").ids, first.load("val").ids)
    assert "the given BPETokenizer" in again.info.description
    # load_user_text with a run's directory as its tokenizer, directly
    assert (
        load_user_text(data, text_column="body", tokenizer=run).tokenizer.vocab_size
        == first.info.vocab_size
    )


def test_a_table_without_a_header_row_is_read_as_examples(tmp_path: Path) -> None:
    """A TSV of sentence pairs with no header: its first row is an example, not column names
    (a header of whole sentences was the newcomer's first TSV)."""
    from tfam.data.sources.textfiles import read_user_text

    path = tmp_path / "pairs.tsv"
    path.write_text(
        "In the beginning God created the heaven.\tEn el principio crió Dios los cielos.\n"
        "And the earth was without form.\tY la tierra estaba desordenada.\n",
        encoding="utf-8",
    )
    tf = read_user_text(path)
    assert tf.kind == "translate"
    assert tf.pairs[0] == (
        "In the beginning God created the heaven.",
        "En el principio crió Dios los cielos.",
    )
    assert len(tf.pairs) == 2
    named = tmp_path / "named.tsv"
    named.write_text("source\ttarget\nthe cat\tel gato\n", encoding="utf-8")
    assert read_user_text(named).pairs == [("the cat", "el gato")]
