"""The eSpeak NG binding and the spoken-digit corpus: boundaries line up with the audio, a tiny
corpus builds and verifies its checksums, the splits keep held-out voices and utterances out."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("espeakng_loader", reason="eSpeak NG missing: pip install espeakng-loader")

from tfam.data.audio import SAMPLE_RATE, frame, frame_labels, num_frames  # noqa: E402
from tfam.data.audio.espeak import EspeakError, espeak_paths, synthesize  # noqa: E402
from tfam.data.sources import spoken_digits as sd  # noqa: E402

LANGUAGES = ("en", "es", "cmn", "de", "fr")
TINY = {"hours": 0.015, "languages": ("en", "cmn"), "variants": ("m3", "f1", "m7")}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("spoken-digits")
    sd.build_corpus(root, progress=False, **TINY)
    return root


@pytest.mark.parametrize("language", LANGUAGES)
def test_binding_speaks_each_digit_as_one_word_in_order(language):
    s = synthesize("4 0 7", f"{language}+f1", word_gap=5)
    n = s.audio.shape[0]
    assert s.audio.dtype == torch.float32 and s.sample_rate == SAMPLE_RATE
    assert 0.3 * SAMPLE_RATE < n < 3 * SAMPLE_RATE
    assert [w.label for w in s.words] == ["4", "0", "7"]
    for seg in s.words + s.phonemes:
        assert 0 <= seg.start < seg.end <= n
    for a, b in zip(s.words, s.words[1:]):
        assert a.end <= b.start
    for a, b in zip(s.phonemes, s.phonemes[1:]):
        assert a.end <= b.start
    # every phoneme lies inside a word, every word holds one
    assert all(any(w.start <= p.start and p.end <= w.end for w in s.words) for p in s.phonemes)


@pytest.mark.parametrize("language", LANGUAGES)
def test_frames_labelled_silence_are_much_quieter_than_word_frames(language):
    s = synthesize("1 2 3 4 5 6 7 8 9 0", f"{language}+m3", rate=175, word_gap=15)
    labels = frame_labels(s.words, s.audio.shape[0])
    energy = frame(s.audio.double()).pow(2).mean(-1)
    assert len(labels) == energy.shape[0] == num_frames(s.audio.shape[0])
    silent = torch.tensor([label == "sil" for label in labels])
    assert 0.1 < silent.float().mean() < 0.7
    ratio_db = 10 * torch.log10(energy[~silent].mean() / energy[silent].mean())
    assert ratio_db > 10, f"{language}: word frames only {ratio_db:.1f} dB above silence"


def test_unknown_voice_and_bad_parameters_are_one_line():
    with pytest.raises(EspeakError, match="no voice 'xx-nowhere'"):
        synthesize("1", "xx-nowhere")
    with pytest.raises(ValueError, match=r"rate=20 is invalid"):
        synthesize("1", "en", rate=20)


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # import raises ImportError
    with pytest.raises(EspeakError, match="pip install espeakng-loader"):
        espeak_paths()


def test_default_voices_and_held_out_sets():
    test, val = sd.held_out_voices()
    every = {f"{lang}+{v}" for lang in sd.LANGUAGES for v in sd.VARIANTS}
    assert len(every) >= 24 and len(sd.LANGUAGES) >= 5
    assert len(test) >= 4 and not set(test) & set(val)
    assert {v.split("+")[1][0] for v in test} == {"m", "f"}  # male and female held out
    assert len(every - set(test) - set(val)) == 20


def test_tiny_corpus_labels_line_up(tiny):
    manifest = sd.read_manifest(tiny)
    assert manifest["settings"]["hours"] == TINY["hours"]
    assert manifest["hours"] >= TINY["hours"]
    utterances = [u for split in sd.SPLITS for u in sd.load_split(split, "tag", root=tiny)]
    assert len(utterances) == manifest["utterances"]
    assert {u.snr_db for u in utterances} == set(sd.SNR_LEVELS)
    for u in utterances:
        n = u.audio.shape[0]
        assert 1 <= len(u.digits) <= sd.MAX_DIGITS
        assert [w.label for w in u.words] == list(u.digits)  # one word segment per digit
        for seg in u.words + u.phonemes:
            assert 0 <= seg.start < seg.end <= n
        assert all(p.label.startswith(u.language + ":") for p in u.phonemes)
        assert len(u.frame_words()) == len(u.frame_phonemes()) == num_frames(n)
        assert set(u.frame_words()) - {"sil"} == set(u.digits)
        assert u.frame_words()[0] == "sil" and u.frame_words()[-1] == "sil"  # edge silence
        assert float(u.audio.abs().max()) <= 1.0


def test_splits_keep_held_out_voices_and_utterances_apart(tiny):
    test_voices, val_voices = sd.held_out_voices(TINY["languages"], TINY["variants"])
    for task in ("tag", "transcribe"):
        train = {u.voice for u in sd.load_split("train", task, root=tiny)}
        assert train and not train & (set(test_voices) | set(val_voices))
        assert {u.voice for u in sd.load_split("test", task, root=tiny)} == set(test_voices)
        assert {u.voice for u in sd.load_split("val", task, root=tiny)} == set(val_voices)
    speaker = {split: sd.load_split(split, "speaker", root=tiny) for split in sd.SPLITS}
    labels = sd.voices("speaker", root=tiny)
    assert set(labels) == {u.voice for u in speaker["train"]}
    assert speaker["test"] and {u.voice for u in speaker["test"]} <= set(labels)
    ids = {split: {u.id for u in us} for split, us in speaker.items()}
    assert not ids["train"] & ids["test"] and not ids["train"] & ids["val"]
    assert not ids["val"] & ids["test"]


@pytest.mark.parametrize("colour", sd.NOISE_COLOURS)
def test_snr_measured_back_against_the_clean_speech(tiny, colour):
    clean = next(u for u in sd.load_split("train", "tag", root=tiny) if u.snr_db is None)
    c = clean.audio.double().numpy()
    for snr in (20.0, 10.0, 5.0):
        rng = np.random.default_rng(int(snr))
        x = sd._to_pcm(sd._add_noise(c.copy(), snr, colour, rng)).astype(np.float64) / 32767
        speech = (x @ c) / (c @ c) * c  # the clean part of the mix (it may have been rescaled)
        measured = 10 * np.log10((speech**2).mean() / ((x - speech) ** 2).mean())
        assert abs(measured - snr) < 0.3, f"{colour}: measured {measured:.2f} dB, set {snr} dB"


def test_noisy_utterances_are_noisier(tiny):
    # the noise is in the stored audio: the quiet edges are louder the lower the SNR
    edge = {}
    for u in sd.load_split("train", "tag", root=tiny) + sd.load_split("test", "tag", root=tiny):
        a = u.audio.double()
        first = u.words[0].start - 400
        edge.setdefault(u.snr_db, []).append(float(a[:first].pow(2).mean() / a.pow(2).mean()))
    means = [np.mean(edge[snr]) for snr in sd.SNR_LEVELS]
    assert means == sorted(means) and means[0] < 1e-3 < means[-1]


def test_manifest_verifies_and_a_corrupted_file_is_detected_and_rebuilt(tiny, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(tiny, root)
    manifest = sd.read_manifest(root)
    assert sd._verify(root, manifest) is None
    audio = root / "audio.npy"
    data = bytearray(audio.read_bytes())
    data[-7] ^= 0xFF  # one sample changed
    audio.write_bytes(bytes(data))
    sd._VERIFIED.clear()
    problem = sd._verify(root, manifest)
    assert problem is not None and "audio.npy" in problem and "sha256" in problem
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sd.load_split("test", "tag", root=root)
    assert any("rebuilding" in str(w.message) for w in caught)
    rebuilt = sd.read_manifest(root)
    assert rebuilt["utterances"] == manifest["utterances"] and sd._verify(root, rebuilt) is None
