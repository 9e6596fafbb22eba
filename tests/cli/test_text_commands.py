"""`tfam generate`, `embed`, `predict`, `eval` and `train --task` on BERT and GPT runs, through
the real entry point (tfam.cli.main). Run directories are tiny models saved in tmp dirs with
their tokenizer.json (and labels.json); the train tests run a few steps on the real datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tfam
from tfam.data.text.tokenizer import CharTokenizer
from tfam.data.text.wordpiece import WordPieceTokenizer

TEXT = "And God said, Let there be light: and there was light."
VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] a fine film dull bad good ali eve geldi . , ! ##s ##ly the is"
).split()
TINY_BERT = dict(dim=16, depth=1, heads=2, ffn_dim=32, max_positions=16)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    """A tiny random GPT (context 32) with the CharTokenizer of TEXT beside it."""
    path = tmp_path_factory.mktemp("gpt")
    tok = CharTokenizer.train([TEXT])
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", dim=32, depth=2, heads=2, vocab_size=tok.vocab_size, max_positions=32
    )
    model.save_pretrained(path)
    tok.save(path)
    return path


def wordpiece(tmp: Path) -> WordPieceTokenizer:
    (tmp / "vocab").mkdir(exist_ok=True)
    (tmp / "vocab" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return WordPieceTokenizer(tmp / "vocab", max_length=16)


def bert_run(tmp: Path, head: str, classes: list[str], task: str) -> Path:
    """A tiny random BERT classifier with a WordPiece tokenizer and labels.json."""
    tok = wordpiece(tmp)
    torch.manual_seed(0)
    model = tfam.create_model(
        "bert", **TINY_BERT, vocab_size=tok.vocab_size, head=head, num_labels=len(classes)
    )
    path = tmp / head
    model.save_pretrained(path)
    tok.save(path)
    labels = {"task": task, "data": "hand-made", "classes": classes}
    (path / "labels.json").write_text(json.dumps(labels))
    return path


@pytest.fixture(scope="module")
def sentiment_dir(tmp_path_factory) -> Path:
    return bert_run(
        tmp_path_factory.mktemp("bert"),
        "sequence",
        ["negative", "positive"],
        "sequence-classification",
    )


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory) -> Path:
    return bert_run(
        tmp_path_factory.mktemp("bert"), "token", ["NOUN", "VERB", "PUNCT"], "token-classification"
    )


# --- generate ---------------------------------------------------------------------------------


def test_generate_greedy_equals_model_generate(cli, gpt_dir: Path) -> None:
    code, out, err = cli(
        ["generate", gpt_dir, "--prompt", "And God said", "--greedy", "--max-new-tokens", "12"]
    )
    assert code == 0, err
    tok = tfam.data.text.tokenizer.load_tokenizer(gpt_dir)
    model = tfam.from_pretrained(gpt_dir)
    prompt = tok.encode("And God said")
    ids = model.generate(torch.tensor([prompt]), max_new_tokens=12)
    assert out == "And God said" + tok.decode(ids[0, len(prompt) :].tolist()) + "\n"
    # Without the cache: the same tokens.
    code, again, _ = cli(
        ["generate", gpt_dir, "--prompt", "And God said", "--greedy", "--max-new-tokens", "12"]
        + ["--no-cache"]
    )
    assert code == 0 and again == out


def test_generate_seeded_sampling_is_reproducible(cli, gpt_dir: Path) -> None:
    argv = ["generate", gpt_dir, "--prompt", "And", "--max-new-tokens", "15", "--seed", "3"]
    argv += ["--top-k", "5", "--top-p", "0.9", "--temperature", "0.8", "--num-samples", "2"]
    code, first, err = cli(argv)
    assert code == 0, err
    _, second, _ = cli(argv)
    assert first == second
    assert first.count("--- sample ") == 2
    # Equal to model.generate with the same generator and settings.
    tok = tfam.data.text.tokenizer.load_tokenizer(gpt_dir)
    model = tfam.from_pretrained(gpt_dir)
    prompt = tok.encode("And")
    g = torch.Generator().manual_seed(3)
    ids = model.generate(
        torch.tensor([prompt] * 2),
        max_new_tokens=15,
        do_sample=True,
        temperature=0.8,
        top_k=5,
        top_p=0.9,
        generator=g,
    )
    expected = [f"And{tok.decode(row[len(prompt) :].tolist())}" for row in ids]
    assert first.splitlines()[1::2] == expected


def test_generate_stop_text_ends_the_continuation(cli, gpt_dir: Path) -> None:
    base = ["generate", gpt_dir, "--prompt", "And", "--max-new-tokens", "25", "--seed", "1"]
    _, full, _ = cli(base)
    continuation = full.rstrip("\n")[3:]
    stop = next(ch for ch in continuation if ch != " ")
    code, out, err = cli(base + ["--stop", stop])
    assert code == 0, err
    assert out == "And" + continuation[: continuation.index(stop) + 1] + "\n"


def test_generate_past_the_context_slides(cli, gpt_dir: Path) -> None:
    """--max-new-tokens above the context (32) and a prompt longer than it: the window slides
    (issue 21, point 8), the tokens those of model.generate."""
    tok = tfam.data.text.tokenizer.load_tokenizer(gpt_dir)
    model = tfam.from_pretrained(gpt_dir)
    for prompt_text, n in (("And God said", 80), (TEXT, 10)):
        argv = ["generate", gpt_dir, "--prompt", prompt_text, "--greedy"]
        code, out, err = cli(argv + ["--max-new-tokens", str(n)])
        assert code == 0, err
        prompt = tok.encode(prompt_text)
        ids = model.generate(torch.tensor([prompt]), max_new_tokens=n, eos_token_id=[])
        assert out == prompt_text + tok.decode(ids[0, len(prompt) :].tolist()) + "\n"
        # (An undertrained model's output may also get the repeated-token note.)
        context_note = (
            f"tfam: note: --prompt is {len(prompt)} tokens long, more than the model's "
            "context of max_positions=32: it reads the last 32\n"
        )
        assert (context_note in err) == (len(prompt) > 32), err
        assert "error" not in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--prompt", "And", "--top-p", "1.5"], "--top-p 1.5 is invalid"),
        (["--prompt", "And", "--top-p", "0"], "--top-p 0 is invalid"),
        (["--prompt", "And", "--temperature", "-1"], "--temperature -1 is invalid"),
        (["--prompt", "And", "--temperature", "0"], "--temperature 0 is invalid"),
        (["--prompt", "And", "--top-k", "0"], "--top-k 0 is invalid"),
        (["--prompt", "And", "--greedy", "--top-k", "3"], "--top-k is invalid with --greedy"),
        (["--prompt", "And", "--mbr", "8"], "--mbr 8 is invalid for a text run"),
        (["--prompt", "And Göd"], "'ö' (U+00F6)"),
        (["--prompt", ""], "no start token (bos_token_id=None)"),
        (["--ids", "5,6,999"], "id 999 is outside the model's vocabulary"),
        (["--ids", "5,x"], "'x' is not an int"),
        ([], "give the prompt"),
    ],
)
def test_generate_bad_input_is_one_line(cli, one_line, gpt_dir: Path, argv, named) -> None:
    code, out, err = cli(["generate", gpt_dir, *argv])
    assert code == 2
    assert named in one_line(err)
    assert out == ""


def test_generate_refuses_a_bert_run(cli, one_line, sentiment_dir: Path) -> None:
    code, _, err = cli(["generate", sentiment_dir, "--prompt", "a"])
    assert code == 2
    assert "generate needs a decoder-only language model" in one_line(err)
    assert "a bert" in err


def test_generate_with_ids_and_no_tokenizer(cli, gpt_dir: Path, tmp_path: Path) -> None:
    model = tfam.from_pretrained(gpt_dir)
    model.save_pretrained(tmp_path / "bare")
    code, _, err = cli(["generate", tmp_path / "bare", "--prompt", "And"])
    assert code == 2 and "has no tokenizer.json" in err and "--prompt" in err
    code, out, err = cli(
        ["generate", tmp_path / "bare", "--ids", "5,6", "--greedy"] + ["--max-new-tokens", "4"]
    )
    assert code == 0, err
    expected = model.generate(torch.tensor([[5, 6]]), max_new_tokens=4)[0].tolist()
    assert out.strip() == ",".join(map(str, expected))


# --- embed ------------------------------------------------------------------------------------


def test_embed_minilm_equals_the_packaged_embed(cli) -> None:
    minilm = pytest.importorskip("tfam.interop.minilm")
    try:
        minilm.minilm_dir()
    except FileNotFoundError:
        pytest.skip("the packaged MiniLM is not installed")
    sentences = ["A fine film.", "The plot drags, and the jokes fall flat."]
    code, out, err = cli(["embed", "minilm_l6", *sentences, "--format", "json"])
    assert code == 0, err
    record = json.loads(out)
    assert record["dim"] == 384 and record["sentences"] == sentences
    ours = torch.tensor(record["embeddings"])
    torch.testing.assert_close(ours, minilm.embed(sentences), atol=1e-6, rtol=0)
    code, out, _ = cli(["embed", "minilm_l6", sentences[0], "--normalize"])
    assert code == 0
    vector = torch.tensor([float(x) for x in out.split()])
    assert vector.shape == (384,)
    assert abs(float(vector.norm()) - 1) < 1e-4


def test_embed_run_directory_and_errors(cli, one_line, sentiment_dir, gpt_dir) -> None:
    from tfam.models.bert import mean_pool

    code, out, err = cli(["embed", sentiment_dir, "a fine film", "bad", "--format", "json"])
    assert code == 0, err
    model = tfam.from_pretrained(sentiment_dir)
    tok = tfam.data.text.tokenizer.load_tokenizer(sentiment_dir)
    ids, mask = tok(["a fine film", "bad"])
    expected = mean_pool(model.forward_features(ids, mask), mask)
    torch.testing.assert_close(torch.tensor(json.loads(out)["embeddings"]), expected)
    for argv, named in (
        (["embed", sentiment_dir, "fine", "  "], "TEXT 2 is empty"),
        (["embed", "bert_base", "x"], "preset without pretrained weights"),
        (["embed", gpt_dir, "x"], "embed needs a BERT"),
    ):
        code, _, err = cli(argv)
        assert code == 2
        assert named in one_line(err)


# --- predict ----------------------------------------------------------------------------------


def test_predict_sentence_classes(cli, sentiment_dir: Path) -> None:
    code, out, err = cli(["predict", sentiment_dir, "a fine film.", "bad"])
    assert code == 0, err
    model = tfam.from_pretrained(sentiment_dir)
    tok = tfam.data.text.tokenizer.load_tokenizer(sentiment_dir)
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    for block, text in zip(blocks, ["a fine film.", "bad"]):
        lines = block.splitlines()
        assert lines[0] == text
        with torch.no_grad():
            probs = model(torch.tensor([tok.encode(text)])).softmax(-1)[0]
        shown = {ln.split()[1]: float(ln.split()[2]) for ln in lines[1:]}
        assert set(shown) == {"negative", "positive"}
        assert shown["negative"] == pytest.approx(float(probs[0]), abs=1e-4)
        ranked = [ln.split()[1] for ln in lines[1:]]
        assert ranked[0] == ("positive" if probs[1] > probs[0] else "negative")


def test_predict_tags_each_word_by_its_first_piece(cli, tagger_dir: Path) -> None:
    code, out, err = cli(["predict", tagger_dir, "Ali eve geldi.", "--tags"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Ali eve geldi."
    words = [ln.split()[0] for ln in lines[1:]]
    assert words == ["Ali", "eve", "geldi", "."]
    model = tfam.from_pretrained(tagger_dir)
    tok = tfam.data.text.tokenizer.load_tokenizer(tagger_dir)
    ids, word_ids = tok.encode_words(words)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    classes = ["NOUN", "VERB", "PUNCT"]
    for w, line in enumerate(lines[1:]):
        first = word_ids.index(w)
        assert line.split()[1] == classes[int(logits[first].argmax())]


def test_predict_text_errors(cli, one_line, sentiment_dir, tagger_dir, tmp_path) -> None:
    code, _, err = cli(["predict", sentiment_dir, "a fine film", "--tags"])
    assert code == 2
    line = one_line(err)
    assert "--tags needs a token-classification run" in line
    assert "trained for sequence-classification" in line
    code, _, err = cli(["predict", tagger_dir, ""])
    assert code == 2 and "TEXT is empty" in one_line(err)
    bare = tmp_path / "bare"
    tfam.from_pretrained(sentiment_dir).save_pretrained(bare)
    (bare / "labels.json").write_text((sentiment_dir / "labels.json").read_text())
    code, _, err = cli(["predict", bare, "fine"])
    assert code == 2 and "has no tokenizer.json" in one_line(err)
    (bare / "tokenizer.json").write_text((sentiment_dir / "tokenizer.json").read_text())
    (bare / "labels.json").unlink()
    code, _, err = cli(["predict", bare, "fine"])
    assert code == 2 and "has no labels.json" in one_line(err)


# --- train, eval ------------------------------------------------------------------------------

TRAIN_TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--set", "ffn_dim=32"]
TRAIN_TINY += ["--batch-size", "8", "--init", "none", "--max-steps", "2", "--quiet"]


@pytest.fixture(scope="module")
def sentiment_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "sentiment"
    code = tfam.cli.main(["train", "bert", "--task", "sentiment", "--out", str(out), *TRAIN_TINY])
    assert code == 0
    return out


@pytest.mark.requires_data("sentiment", "minilm")
def test_train_task_writes_labels_and_eval_reads_them(cli, one_line, sentiment_run: Path) -> None:
    labels = json.loads((sentiment_run / "labels.json").read_text())
    assert labels == {
        "task": "sequence-classification",
        "data": "sentiment",
        "classes": ["negative", "positive"],
    }
    code, out, err = cli(["eval", sentiment_run, "--limit", "40"])
    assert code == 0, err
    assert "on sentiment test: first 40 of" in out
    numbers = json.loads((sentiment_run / "eval.json").read_text())
    # The accuracy by hand: the model's argmax on the first 40 test sentences.
    data = tfam.data.load_dataset("sentiment", "test")
    model = tfam.from_pretrained(sentiment_run)
    right = 0
    for i in range(40):
        ids, label = data[i]
        right += int(model(ids[None]).argmax(-1)) == int(label)
    assert numbers["acc"] == pytest.approx(right / 40)
    assert sum(row["count"] for row in numbers["per_class"]) == 40

    code, _, err = cli(["eval", sentiment_run, "--data", "turkish-pos"])
    assert code == 2
    line = one_line(err)
    assert "token-classification dataset" in line and "trained for sequence-classification" in line


def test_train_data_and_task_exclusive(cli, one_line, tmp_path) -> None:
    code, _, err = cli(["train", "bert", "--task", "sentiment", "--data", "sentiment"])
    line = one_line(err)
    assert code == 2 and "is invalid for --data sentiment: expected one of classify" in line
    code, _, err = cli(["train", "bert", "--out", tmp_path / "x"])
    assert code == 2 and "--data is required" in one_line(err)


@pytest.mark.requires_data("sentiment", "minilm", "turkish-pos")
def test_tagger_from_a_sentiment_run_says_the_head_is_fresh(cli, sentiment_run, tmp_path) -> None:
    argv = ["train", "bert", "--task", "pos", "--out", tmp_path / "pos", *TRAIN_TINY]
    argv[argv.index("none")] = str(sentiment_run)  # --init the sentiment run
    argv.remove("--quiet")
    code, out, err = cli(argv)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("init:")]
    classes = len(tfam.data.get_dataset("turkish-pos").classes)
    assert line.startswith(f"init: {sentiment_run} -> ")
    assert line.endswith(f"tensors copied, classifier reset (2 -> {classes} classes)"), line
    labels = json.loads((tmp_path / "pos" / "labels.json").read_text())
    assert labels["task"] == "token-classification"
    assert labels["classes"] == list(tfam.data.get_dataset("turkish-pos").classes)
    code, out, err = cli(["eval", tmp_path / "pos", "--limit", "5"])
    assert code == 0, err
    assert "words)" in out


@pytest.mark.requires_data("kjv")
def test_gpt_kjv_run_eval_and_generate(cli, tmp_path) -> None:
    out_dir = tmp_path / "kjv"
    argv = ["train", "gpt", "--data", "kjv", "--out", out_dir, "--set", "dim=16"]
    argv += ["--set", "depth=1", "--set", "heads=2", "--max-steps", "2", "--quiet"]
    code, _, err = cli(argv)
    assert code == 0, err
    assert not (out_dir / "labels.json").exists()
    code, out, err = cli(["eval", out_dir, "--limit", "4"])
    assert code == 0, err
    numbers = json.loads((out_dir / "eval.json").read_text())
    assert numbers["task"] == "causal-lm" and numbers["unit"] == "characters"
    assert numbers["bpc"] == pytest.approx(numbers["loss"] / torch.log(torch.tensor(2.0)).item())
    assert "bits per character" in out
    code, out, err = cli(["generate", out_dir, "--prompt", "And God said", "--max-new-tokens", "5"])
    assert code == 0, err
    assert out.startswith("And God said") and len(out.rstrip("\n")) == len("And God said") + 5


def test_help_has_examples(cli, capsys) -> None:
    for command, example in (
        ("generate", 'tfam generate runs/kjv --prompt "And God said"'),
        ("embed", 'tfam embed minilm_l6 "A fine film."'),
        ("predict", "--tags"),
        ("eval", "tfam eval runs/kjv"),
        ("train", "tfam train bert --task sentiment"),
    ):
        with pytest.raises(SystemExit):
            tfam.cli.main([command, "--help"])
        assert example in capsys.readouterr().out
