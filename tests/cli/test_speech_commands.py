"""Every command a user tries on a speech run, on a tiny spoken-digit corpus (a few seconds of
eSpeak NG audio, two steps of training): `tfam eval` reports what training reported for the
same split and model (frame accuracy, WER) with its tables and the confusion PNG; `tfam viz
attention` and `tfam viz frames` write their pictures (the local band visible in the printed
keys per query); `tfam predict` answers SPLIT:INDEX samples with their truth, and a file too
short for one frame is one line naming it. The user's audio folder is evaluated on its
validation holdout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("espeakng_loader", reason="eSpeak NG missing: pip install espeakng-loader")

from tfam.data.audio import write_wav  # noqa: E402
from tfam.data.sources import spoken_digits as sd  # noqa: E402

TINY_CORPUS = {"hours": 0.01, "languages": ("en",), "variants": ("m3", "f1", "m7")}
TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--max-steps", "2"]
TINY += ["--epochs", "1", "--threads", "1", "--quiet", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spoken-digits")
    sd.build_corpus(root, progress=False, **TINY_CORPUS)
    return root


@pytest.fixture(scope="module")
def tag_run(corpus, tmp_path_factory) -> Path:
    """A frame-tagging run (words) of two steps, shared by the tests that only read it."""
    import tfam.cli

    out = tmp_path_factory.mktemp("tag") / "run"
    argv = ["train", "speech", "--data", "spoken-digits", "--data-root", corpus, "--out", out]
    assert tfam.cli.main([str(a) for a in [*argv, *TINY]]) == 0
    return out


def train(cli, corpus: Path, out: Path, *extra: str) -> Path:
    argv = ["train", "speech", "--data", "spoken-digits", "--data-root", corpus, "--out", out]
    code, _, err = cli([*argv, *extra, *TINY])
    assert code == 0, err
    return out


def test_eval_a_tag_run_reports_frames_by_label_and_condition(cli, corpus, tag_run) -> None:
    run = tag_run
    code, out, err = cli(["eval", run])
    assert code == 0, err
    assert "frame accuracy: " in out and "on spoken-digits test:" in out
    conditions = {sd_.snr_db for sd_ in sd.load_split("test", "tag", root=corpus)}
    numbers = json.loads((run / "eval.json").read_text())
    # The same split, model and frames as training's final evaluation: the same accuracy.
    trained = json.loads((run / "results.json").read_text())["test"]["acc"]
    assert math.isclose(numbers["acc"], trained, rel_tol=1e-9)
    assert [r["name"] for r in numbers["per_class"]] == ["sil", *"0123456789"]
    assert sum(r["count"] for r in numbers["per_class"]) == numbers["counted"]
    shown = {r["name"] for r in numbers.get("per_condition", [])}
    if len(conditions) > 1:
        assert shown == {"clean" if s is None else f"{s:g} dB" for s in conditions}
    assert (run / "confusion.png").stat().st_size > 1000


def test_eval_a_transcribe_run_reports_wer_and_examples(cli, corpus, tmp_path) -> None:
    run = train(cli, corpus, tmp_path / "ctc", "--task", "transcribe")
    code, out, err = cli(["eval", run])
    assert code == 0, err
    assert "word error rate: " in out and "    ref: " in out and "    hyp: " in out
    numbers = json.loads((run / "eval.json").read_text())
    trained = json.loads((run / "results.json").read_text())["test"]["wer"]
    assert math.isclose(numbers["wer"], trained, rel_tol=1e-9)
    refs = [" ".join(u.digits) for u in sd.load_split("test", "transcribe", root=corpus)]
    assert [e["reference"] for e in numbers["examples"]] == refs[: len(numbers["examples"])]


def test_viz_attention_and_frames_of_a_speech_run(cli, corpus, tag_run, tmp_path) -> None:
    run = tag_run
    code, out, err = cli(["viz", "attention", run, "test:0", "--out", tmp_path / "att.png"])
    assert code == 0, err
    # local attention, window 16: a query sees at most 33 keys, however long the utterance.
    keys = out.split("keys with weight per query: ")[1].split()[0]
    low, high = (int(x) for x in keys.split(".."))
    assert 17 <= low <= high <= 33 and (tmp_path / "att.png").stat().st_size > 1000
    code, out, err = cli(["viz", "frames", run, "test:0", "--out", tmp_path / "run.png"])
    assert code == 0, err
    assert "words, phonemes, predicted words, errors" in out
    argv = ["viz", "frames", "spoken-digits", "val:0", "--root", corpus]
    code, out, err = cli([*argv, "--out", tmp_path / "data.png"])
    assert code == 0 and "(words, phonemes)" in out, err
    assert (tmp_path / "run.png").is_file() and (tmp_path / "data.png").is_file()


def test_predict_samples_and_one_line_errors(cli, corpus, tag_run, tmp_path, one_line) -> None:
    run = tag_run
    u = sd.load_split("test", "tag", root=corpus)[0]
    code, out, err = cli(["predict", run, "test:0"])
    assert code == 0, err
    assert f"digits {u.digits}" in out and "word segments" in out and "in order:" in out
    short = tmp_path / "short.wav"
    write_wav(short, 0.3 * torch.randn(399), 16_000)
    code, out, err = cli(["predict", run, "test:0", short])
    assert code == 2 and out == "" and "too short (399 samples" in one_line(err)
    code, out, err = cli(["predict", run, "test:999"])
    assert code == 2 and "test:999" in one_line(err)


def test_eval_of_an_audio_folder_run_uses_its_holdout(cli, tmp_path) -> None:
    root = tmp_path / "tones"
    g = torch.Generator().manual_seed(0)
    t = torch.arange(4800) / 16_000
    for name, freq in (("low", 300.0), ("high", 2000.0)):
        (root / name).mkdir(parents=True)
        for i in range(10):
            wave = 0.5 * torch.sin(2 * math.pi * freq * (1 + 0.02 * i) * t)
            write_wav(
                root / name / f"{i}.wav", wave + 0.01 * torch.randn(t.shape, generator=g), 16_000
            )
    run = tmp_path / "run"
    code, _, err = cli(["train", "speech", "--data", root, "--out", run, *TINY])
    assert code == 0, err
    code, out, err = cli(["eval", run])
    assert code == 0, err
    assert " val: 2 utterances" in out and "accuracy: " in out
    assert (run / "confusion.png").is_file()
