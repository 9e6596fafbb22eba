"""The speech family from the command line, on tiny synthetic audio (tones as "words"): a
folder of WAV files per class and a CSV of file,transcript train one step each through
`tfam train speech`, `tfam predict RUN file.wav` answers, and a file that is not audio, empty
or silent is one error line naming it. Also CTC's greedy decoding and the word error rate on
hand cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tfam.data.audio import write_wav
from tfam.training.tasks.ctc import ctc_greedy, edit_distance, word_errors

RATE = 16_000
TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--max-steps", "2"]
TINY += ["--epochs", "1", "--threads", "1", "--quiet", "--no-progress"]


def tone(freq: float, seconds: float = 0.3, seed: int = 0) -> torch.Tensor:
    t = torch.arange(int(RATE * seconds)) / RATE
    g = torch.Generator().manual_seed(seed)
    return 0.5 * torch.sin(2 * math.pi * freq * t) + 0.01 * torch.randn(t.shape, generator=g)


@pytest.fixture
def tones(tmp_path: Path) -> Path:
    """tones/low/*.wav and tones/high/*.wav: 3 each."""
    root = tmp_path / "tones"
    for name, freq in (("low", 300.0), ("high", 2000.0)):
        (root / name).mkdir(parents=True)
        for i in range(3):
            write_wav(root / name / f"{i}.wav", tone(freq * (1 + 0.05 * i), seed=i), RATE)
    return root


@pytest.fixture
def clips(tmp_path: Path) -> Path:
    """clips.csv: file,transcript of tone sequences, "a" a low tone, "b" a high one."""
    root = tmp_path / "clips"
    root.mkdir()
    rows = ["file,transcript"]
    for i, text in enumerate(["ab", "ba", "a b", "bb", "aa", "ab a"]):
        wave = torch.cat([tone(300.0 if ch == "a" else 2000.0, 0.2, i) for ch in text])
        write_wav(root / f"{i}.wav", wave, RATE)
        rows.append(f"{i}.wav,{text}")
    (root / "clips.csv").write_text("\n".join(rows) + "\n")
    return root / "clips.csv"


def test_greedy_decoding_and_word_errors_by_hand() -> None:
    # Frames: a a _ a b b _ _ -> "a a b" (a blank separates the repeated a); padding ignored.
    ids = torch.tensor([[1, 1, 0, 1, 2, 2, 0, 0, 2, 2]])
    logits = torch.nn.functional.one_hot(ids, 3).float()
    assert ctc_greedy(logits, torch.tensor([8])) == [[1, 1, 2]]
    assert ctc_greedy(logits, torch.tensor([0])) == [[]]
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance([], [1, 2]) == 2
    # One substitution, one deletion over 4 reference words; an insertion counts too.
    assert word_errors("4 0 7", "4 1 7 2") == (2, 4)
    assert word_errors("1 2 3", "1 2") == (1, 2)
    assert word_errors("", "") == (0, 0)


def test_train_a_class_folder_then_predict(cli, tones, tmp_path) -> None:
    out = tmp_path / "run"
    code, stdout, err = cli(["train", "speech", "--data", tones, "--out", out, *TINY])
    assert code == 0, err
    assert (out / "model.safetensors").is_file() and (out / "speech.json").is_file()
    code, stdout, err = cli(["predict", out, tones / "high" / "0.wav", "--top-k", "2"])
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[0].startswith(str(tones / "high" / "0.wav"))
    assert sorted(line.split()[1] for line in lines[1:3]) == ["high", "low"]
    # One label per recording: frames normalised by the training part's per-band statistics
    # (kept in speech.json), and predict reads a file exactly as training did.
    from tfam.cli.speech import load_recording, speech_meta
    from tfam.data.sources.speech import audio_folder

    meta = speech_meta(out)
    assert meta["norm"] is not None and len(meta["norm"]["mean"]) == 80
    train = audio_folder(tones, "train")
    frames = torch.cat(train.features).double()
    assert frames.mean(0).abs().max() < 1e-4 and (frames.std(0) - 1).abs().max() < 1e-3
    seen = load_recording(str(tones / "high" / "0.wav"), 80, meta["norm"]).features
    held = audio_folder(tones, "val").features
    assert any(f.shape == seen.shape and torch.allclose(f, seen) for f in train.features + held)


def test_train_a_transcript_csv_then_predict(cli, clips, tmp_path) -> None:
    out = tmp_path / "run"
    code, stdout, err = cli(["train", "speech", "--data", clips, "--out", out, *TINY])
    assert code == 0, err
    code, stdout, err = cli(["predict", out, clips.parent / "0.wav"])
    assert code == 0, err
    # An untrained transcript is any string of the alphabet's characters, quoted.
    head, _, text = stdout.strip().partition(": ")
    assert head.startswith(str(clips.parent / "0.wav"))
    assert set(eval(text)) <= set("ab ")


def test_labels_is_for_the_spoken_digits(cli, tones, tmp_path, one_line) -> None:
    code, _, err = cli(["train", "speech", "--data", tones, "--labels", "phoneme", *TINY])
    assert code == 2 and "--labels" in one_line(err)


def test_a_file_that_is_not_audio_is_one_line(cli, tones, tmp_path, one_line) -> None:
    out = tmp_path / "run"
    assert cli(["train", "speech", "--data", tones, "--out", out, *TINY])[0] == 0
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    empty = tmp_path / "empty.wav"
    write_wav(empty, torch.zeros(0), RATE)
    silent = tmp_path / "silent.wav"
    write_wav(silent, torch.zeros(RATE // 2), RATE)
    for bad in (png, empty, silent):
        code, stdout, err = cli(["predict", out, tones / "low" / "0.wav", bad])
        assert code == 2 and stdout == "", (bad, stdout)
        assert str(bad) in one_line(err)
