"""No silent failure (issue 21, point 6) through the commands: an untrained translation run
answers with a `tfam: note:` beside its (empty) output, and a classifier at chance gets one
from the trainer's summary and from `tfam eval`."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import tfam
from tfam.cli.text import note_outputs

TINY_VIT = ["--set", "patch_size=4", "--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]


def notes(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("tfam: note: ")]


def untrained_copy_run(root: Path) -> Path:
    """An untrained tiny encoder–decoder saved as `tfam train` leaves a copy-task run."""
    from tfam.data.text.tokenizer import CharTokenizer

    tok = CharTokenizer("abcdefghij", spaced=True)
    torch.manual_seed(0)
    model = tfam.create_model(
        "transformer", vocab_size=tok.vocab_size, pad_token_id=tok.pad_id,
        bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, dim=32, depth=1, heads=2,
        ffn_dim=64, max_positions=40,
    )  # fmt: skip
    run_dir = root / "copy"
    model.save_pretrained(run_dir)
    tok.save(run_dir)
    (run_dir / "train_args.json").write_text(json.dumps({"family": "transformer", "data": "copy"}))
    return run_dir


def test_untrained_translation_prints_a_note(cli, tmp_path: Path) -> None:
    run_dir = untrained_copy_run(tmp_path)
    code, stdout, err = cli(["translate", run_dir, "a b c d", "j i h", "--device", "cpu"])
    assert code == 0, err
    outputs = stdout.split("\n")[:2]
    assert outputs == ["", ""]  # the untrained model ends at once: two empty lines
    (line,) = notes(err)
    assert "2 of 2 outputs are empty or one token repeated" in line
    assert "the translation is empty" in line and "--max-minutes" in line


def test_untrained_generation_prints_a_note(cli, tmp_path: Path) -> None:
    from tfam.data.text.tokenizer import CharTokenizer

    tok = CharTokenizer("abcdefghij ")
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", vocab_size=tok.vocab_size, dim=32, depth=1, heads=2, max_positions=64
    )
    run_dir = tmp_path / "gpt"
    model.save_pretrained(run_dir)
    tok.save(run_dir)
    code, stdout, err = cli(
        ["generate", run_dir, "--prompt", "abc", "--greedy", "--max-new-tokens", "20"]
        + ["--device", "cpu"]
    )
    assert code == 0, err
    assert stdout == "abc" + "c" * 20 + "\n"  # greedy: the untrained model repeats itself
    (line,) = notes(err)
    assert "the generated text repeats one token ('c') for 20 of its 20 tokens" in line


def test_note_outputs_is_silent_for_good_outputs(capsys) -> None:
    assert note_outputs([[5, 6, 7], [8, 9]], ["c d e", "f g"], "translation") is None
    assert capsys.readouterr().err == ""
    text = note_outputs([[5, 5, 5, 5]], None, "generated text")
    assert text is not None and "the generated text repeats one token (id 5)" in text
    assert capsys.readouterr().err == f"tfam: note: {text}\n"


def test_classifier_at_chance_gets_a_note_in_train_and_eval(
    cli, image_folder: Path, tmp_path: Path
) -> None:
    # A learning rate of ~0 leaves the untrained model: its accuracy is chance.
    out = tmp_path / "run"
    code, stdout, err = cli(
        ["train", "vit", "--data", image_folder, "--out", out, "--threads", "1", "--quiet"]
        + ["--epochs", "1", "--batch-size", "6", "--lr", "1e-12", "--min-lr", "0", *TINY_VIT]
        + ["--set", "init_std=1e-6"]
    )
    assert code == 0, err
    (line,) = notes(err)
    assert "validation accuracy" in line and "is at chance" in line and "--max-minutes" in line
    assert "peak memory" in stdout
    record = json.loads((out / "results.json").read_text())
    assert record["peak_memory"]["rss"] > 10**7

    code, stdout, err = cli(["eval", out, "--device", "cpu", "--out", tmp_path / "c.png"])
    assert code == 0, err
    (line,) = notes(err)
    assert "split accuracy" in line and "is at chance" in line
