"""`tfam translate`, and eval / viz attention / predict on seq2seq runs: a tiny copy-task run
(trained for a few steps through `tfam train`, or built directly and saved beside the copy
dataset's tokenizer), its outputs, and every bad input as one line."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

import tfam
import tfam.cli
from tfam.data import list_datasets, load_dataset

TINY = {"dim": 32, "depth": 1, "heads": 2, "ffn_dim": 64, "max_positions": 40}


# The copy and reverse datasets come from the data catalog; tests that train or evaluate on
# one need it, the others build a run directory with their own tokenizer.
needs_copy = pytest.mark.skipif(
    "copy" not in list_datasets(), reason="the copy dataset is not in the catalog"
)
TEXTS = ["a b c d", "j i h", "c c a b e f g h i", "b", "e d c b a j"]


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory) -> Path:
    """A run directory as `tfam train` leaves it for a copy task, built directly (fast): an
    untrained tiny encoder–decoder, a character tokenizer beside it and train_args.json."""
    from tfam.data.text.tokenizer import CharTokenizer

    tok = CharTokenizer("abcdefghij", spaced=True)
    torch.manual_seed(0)
    model = tfam.create_model(
        "transformer",
        vocab_size=tok.vocab_size,
        pad_token_id=tok.pad_id,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        **TINY,
    )
    run_dir = tmp_path_factory.mktemp("runs") / "copy"
    model.save_pretrained(run_dir)
    tok.save(run_dir)
    (run_dir / "train_args.json").write_text(json.dumps({"family": "transformer", "data": "copy"}))
    return run_dir


def _sample_text(n: int = 0) -> str:
    return TEXTS[n]


def _direct(run_dir: Path, text: str, beam: int = 4) -> str:
    """What translate should print for ``text``: tokens + <eos>, generate, cut at <eos>."""
    from tfam.data.text.tokenizer import load_tokenizer

    tok = load_tokenizer(run_dir)
    model = tfam.from_pretrained(run_dir).eval()
    src = torch.tensor([tok.encode(text) + [tok.eos_id]])
    n = min(src.shape[1] + 50, model.config.max_positions - 1)
    with torch.no_grad():
        out = model.generate(src, max_new_tokens=n, num_beams=beam, length_penalty=0.6)[0, 1:]
    ids = out.tolist()
    ids = ids[: ids.index(tok.eos_id)] if tok.eos_id in ids else ids
    return tok.decode([i for i in ids if i != tok.pad_id])


@needs_copy
def test_train_saves_tokenizer_then_translate(cli, tmp_path: Path) -> None:
    out = tmp_path / "trained"
    code, stdout, err = cli(
        ["train", "transformer", "--data", "copy", "--out", out]
        + [x for k, v in TINY.items() for x in ("--set", f"{k}={v}")]
        + ["--epochs", "1", "--max-steps", "3", "--warmup-steps", "1", "--threads", "1"]
        + ["--no-progress"]
    )
    assert code == 0, err
    assert (out / "tokenizer.json").is_file() and (out / "model.safetensors").is_file()
    saved = json.loads((out / "train_args.json").read_text())
    assert saved["data"] == "copy" and saved["family"] == "transformer"
    # The saved tokenizer is the dataset's, byte for byte.
    from tfam.data.text.tokenizer import load_tokenizer

    tok, data_tok = load_tokenizer(out), load_dataset("copy", "train").tokenizer
    text = load_dataset("copy", "test").pairs[0][0]
    assert tok.encode(text) == data_tok.encode(text) and tok.vocab_size == data_tok.vocab_size

    code, stdout, err = cli(["translate", out, text, "--beam", "2"])
    assert code == 0, err
    assert stdout.splitlines() == [_direct(out, text, beam=2)]


def test_translate_arguments_and_stdin(cli, copy_run: Path, monkeypatch) -> None:
    texts = [_sample_text(i) for i in range(5)]
    expect = [_direct(copy_run, t) for t in texts]
    # Several arguments, batched by length (batch 2), come back in input order.
    code, out, err = cli(["translate", copy_run, *texts, "--batch-size", "2", "--device", "cpu"])
    assert code == 0, err
    assert out.splitlines() == expect
    # Options before the sentences work too (argparse alone would stop at the first option).
    code, out, err = cli(["translate", copy_run, "--beam", "4", *texts[:2]])
    assert code == 0, err
    assert out.splitlines() == expect[:2]
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage error
        cli(["translate", copy_run, "--beam", "4", "--bogus", texts[0]])
    assert exit_info.value.code == 2
    # No TEXT (and '-'): one line per stdin line.
    for extra in ([], ["-"]):
        monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(texts[:3]) + "\n"))
        code, out, err = cli(["translate", copy_run, *extra])
        assert code == 0, err
        assert out.splitlines() == expect[:3]


def test_translate_bad_input_is_one_line(cli, one_line, copy_run: Path, tmp_path: Path) -> None:
    text = _sample_text()
    for empty in ("", "   \t "):
        code, out, err = cli(["translate", copy_run, empty])
        assert code == 2 and out == "" and "is empty" in one_line(err)
    code, _, err = cli(["translate", copy_run, text, "--beam", "0"])
    assert code == 2 and "--beam 0 is invalid" in one_line(err)

    # Longer than the model's positions: the limit is named; --truncate cuts and translates.
    long = " ".join([text] * 40)
    code, _, err = cli(["translate", copy_run, long])
    line = one_line(err)
    assert code == 2 and "at most 39" in line and "--truncate" in line
    code, out, err = cli(["translate", copy_run, long, "--truncate"])
    assert code == 0 and len(out.splitlines()) == 1
    assert "truncated to the first 39" in err and "Traceback" not in err

    # A script the tokenizer never saw: unknown pieces, a note, still one translation.
    code, out, err = cli(["translate", copy_run, "Бытие 漢字 ᚠᚢᚦ"])
    assert code == 0 and len(out.splitlines()) == 1, err
    assert "Traceback" not in err

    # No tokenizer.json beside the model: say what writes it.
    bare = tmp_path / "bare"
    shutil.copytree(copy_run, bare)
    (bare / "tokenizer.json").unlink()
    code, _, err = cli(["translate", bare, text])
    line = one_line(err)
    assert code == 2 and "no tokenizer.json" in line and "tfam train" in line

    # A run that is not a seq2seq one: say what it is.
    vit_dir = tmp_path / "vit"
    tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=16, depth=1, heads=2
    ).save_pretrained(vit_dir)
    (vit_dir / "train_args.json").write_text(
        json.dumps({"family": "vit", "data": "digits", "title": "vit on digits"})
    )
    code, _, err = cli(["translate", vit_dir, text])
    line = one_line(err)
    assert (
        code == 2 and "seq2seq" in line and "vit image-classification run (vit on digits)" in line
    )

    code, _, err = cli(["translate", tmp_path / "missing", text])
    assert code == 2 and "not found" in one_line(err)


@needs_copy
def test_eval_seq2seq_prints_bleu_and_chrf(cli, copy_run: Path) -> None:
    code, out, err = cli(["eval", copy_run, "--limit", "6", "--beam", "2"])
    assert code == 0, err
    assert "first 6 of" in out
    bleu = [ln for ln in out.splitlines() if ln.startswith("BLEU: ")]
    chrf = [ln for ln in out.splitlines() if ln.startswith("chrF: ")]
    assert len(bleu) == 1 and len(chrf) == 1 and "tok:13a" in bleu[0]
    assert "reference:" in out and "translation:" in out
    numbers = json.loads((copy_run / "eval.json").read_text())
    assert numbers["num_sentences"] == 6 and numbers["dataset"] == "copy"
    assert numbers["bleu"] == pytest.approx(float(bleu[0].split()[1]), abs=0.01)
    assert 0 <= numbers["chrf"] <= 100 and numbers["split"] == "test"
    lines = Path(numbers["translations"]).read_text().splitlines()
    pairs = load_dataset("copy", "test").pairs[:6]
    # The scores are sacrebleu's on exactly these hypotheses and references.
    import sacrebleu

    assert numbers["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(lines, [[r for _, r in pairs]]).score
    )
    assert len(lines) == 6 and lines[0] == _direct(copy_run, pairs[0][0], beam=2)

    code, _, err = cli(["eval", copy_run, "--beam", "0"])
    assert code == 2 and "--beam 0" in err


def test_viz_attention_draws_alignment(cli, copy_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "align.png"
    text = _sample_text()
    code, stdout, err = cli(["viz", "attention", copy_run, text, "--out", out, "--layer", "1"])
    assert code == 0, err
    assert stdout.splitlines()[0] == _direct(copy_run, text, beam=1)
    assert str(out) in stdout
    with Image.open(out) as png:
        assert png.format == "PNG" and png.size[0] > 300 and png.size[1] > 200
    code, _, err = cli(["viz", "attention", copy_run, text, "--layer", "3"])
    assert code == 2 and "--layer 3 is invalid" in err
    code, _, err = cli(["viz", "attention", copy_run, "  "])
    assert code == 2 and "empty" in err


def test_predict_translates_seq2seq_runs(cli, copy_run: Path) -> None:
    text = _sample_text(1)
    code, out, err = cli(["predict", copy_run, text])
    assert code == 0, err
    assert out.splitlines() == [_direct(copy_run, text)]


def test_help_lists_translate_with_examples(cli, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        tfam.cli.main(["--help"])
    text = capsys.readouterr().out
    assert info.value.code == 0 and "translate" in text and "tfam translate runs/" in text
    for command in ("list", "explain", "train", "eval", "predict", "translate", "viz", "convert"):
        with pytest.raises(SystemExit) as info:
            tfam.cli.main([command, "--help"])
        assert info.value.code == 0
        assert "example" in capsys.readouterr().out, command
    with pytest.raises(SystemExit):
        tfam.cli.main(["translate", "--help"])
    text = capsys.readouterr().out
    assert "--beam" in text and "--length-penalty" in text and "stdin" in text
