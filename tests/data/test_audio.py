"""The audio front end (tfam.data.audio): WAV files of every encoding read, frames counted,
the filterbank against a float64 reference written from its definition, resampling, the
training-time masks and noise, frame labels, and bad files refused in one line."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tfam.data.audio import (
    FRAME_LENGTH,
    FRAME_SHIFT,
    SAMPLE_RATE,
    AudioError,
    fbank,
    frame_labels,
    load_audio,
    mel,
    mix_at_snr,
    normalize,
    num_frames,
    read_wav,
    resample,
    spec_augment,
    write_wav,
)
from tfam.data.audio.resample import _direct, _sinc_kernel

# ---------------------------------------------------------------------------- WAV bytes by hand

PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE
GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"


def riff(
    payload: bytes,
    *,
    tag: int,
    channels: int,
    rate: int,
    bits: int,
    extensible: bool = False,
    before_data: bytes = b"",
    data_size: int | None = None,
) -> bytes:
    """A WAV file's bytes built field by field (independent of the reader under test)."""
    align = channels * bits // 8
    if extensible:
        fmt = struct.pack("<HHIIHH", EXTENSIBLE, channels, rate, rate * align, align, bits)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + GUID_TAIL
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    size = len(payload) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + before_data
    pad = b"\x00" if len(payload) & 1 and data_size is None else b""  # a placeholder size: no pad
    body += b"data" + struct.pack("<I", size) + payload + pad
    return b"RIFF" + struct.pack("<I", len(body)) + body


# The test signal in each encoding: integer codes and the floats the reader must give.
CODES = np.array([0, 1, -1, 1000, -1000, 12345, -12345, 30000, -32768, 32767], dtype=np.int64)


def encode(name: str, x16: np.ndarray) -> tuple[bytes, int, int, np.ndarray]:
    """(payload, tag, bits, expected float32) for 16-bit-scale codes ``x16`` in one encoding."""
    if name == "pcm8":
        u = (x16 >> 8) + 128  # 0..255, silence at 128
        return u.astype(np.uint8).tobytes(), PCM, 8, ((u - 128) / 128).astype(np.float32)
    if name == "pcm16":
        return x16.astype("<i2").tobytes(), PCM, 16, (x16 / 32768).astype(np.float32)
    if name == "pcm24":
        v = x16 * 256 + 77 * (x16 > 0) - 77 * ((x16 < 0) & (x16 > -32768))  # the low byte too
        b = (v & 0xFFFFFF).astype(np.uint32)
        raw = np.stack([b & 0xFF, (b >> 8) & 0xFF, (b >> 16) & 0xFF], 1).astype(np.uint8)
        return raw.tobytes(), PCM, 24, (v / 2**23).astype(np.float32)
    if name == "pcm32":
        v = x16 * 65536 + 4321 * (x16 > 0) - 4321 * ((x16 < 0) & (x16 > -32768))
        return v.astype("<i4").tobytes(), PCM, 32, (v / 2**31).astype(np.float32)
    if name == "float32":
        f = (x16 / 32768 * 0.9).astype("<f4")
        return f.tobytes(), FLOAT, 32, f.astype(np.float32)
    if name == "float64":
        f = (x16 / 32768 * 0.9).astype("<f8")
        return f.tobytes(), FLOAT, 64, f.astype(np.float32)
    raise AssertionError(name)


ENCODINGS = ["pcm8", "pcm16", "pcm24", "pcm32", "float32", "float64"]


@pytest.mark.parametrize("extensible", [False, True], ids=["plain", "extensible"])
@pytest.mark.parametrize("name", ENCODINGS)
def test_read_wav_every_encoding(tmp_path: Path, name: str, extensible: bool):
    payload, tag, bits, expected = encode(name, CODES)
    path = tmp_path / f"{name}.wav"
    path.write_bytes(
        riff(payload, tag=tag, channels=1, rate=22050, bits=bits, extensible=extensible)
    )
    waveform, rate = read_wav(path)
    assert rate == 22050 and waveform.dtype == torch.float32
    assert waveform.shape == (1, len(CODES))
    np.testing.assert_allclose(waveform[0].numpy(), expected, rtol=0, atol=1e-7)


def test_read_wav_stereo_layout_and_skipped_chunks(tmp_path: Path):
    left, right = CODES, -CODES // 2
    inter = np.stack([left, right], 1).reshape(-1).astype("<i2").tobytes()
    odd = b"LIST" + struct.pack("<I", 5) + b"INFO\x01" + b"\x00"  # odd size, padded
    path = tmp_path / "stereo.wav"
    path.write_bytes(riff(inter, tag=PCM, channels=2, rate=16000, bits=16, before_data=odd))
    waveform, rate = read_wav(path)
    assert waveform.shape == (2, len(CODES)) and rate == 16000
    np.testing.assert_array_equal(waveform[0].numpy(), (left / 32768).astype(np.float32))
    np.testing.assert_array_equal(waveform[1].numpy(), (right / 32768).astype(np.float32))


def test_read_wav_data_size_past_the_end(tmp_path: Path):
    """A streaming writer's placeholder size (0xFFFFFFFF) or a cut-off file: whole frames read."""
    payload = CODES.astype("<i2").tobytes()[:-1]  # the last sample cut in half
    path = tmp_path / "cut.wav"
    path.write_bytes(riff(payload, tag=PCM, channels=1, rate=16000, bits=16, data_size=0xFFFFFFFF))
    waveform, _ = read_wav(path)
    np.testing.assert_array_equal(waveform[0].numpy(), (CODES[:-1] / 32768).astype(np.float32))


def test_load_audio_mixes_stereo_down(tmp_path: Path):
    rng = np.random.default_rng(0)
    left, right = rng.integers(-20000, 20000, 1000), rng.integers(-20000, 20000, 1000)
    inter = np.stack([left, right], 1).reshape(-1).astype("<i2").tobytes()
    path = tmp_path / "stereo.wav"
    path.write_bytes(riff(inter, tag=PCM, channels=2, rate=16000, bits=16))
    mono = load_audio(path)
    assert mono.shape == (1000,) and mono.dtype == torch.float32
    np.testing.assert_allclose(mono.numpy(), (left + right) / 2 / 32768, atol=1e-7)


def test_write_wav_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    written = []  # durable writes go through atomic_write_bytes (its fsyncs skipped here: slow)
    monkeypatch.setattr(
        "tfam.data.audio.wav.atomic_write_bytes",
        lambda p, data: written.append(p) or Path(p).write_bytes(data),
    )
    x = torch.from_numpy(np.stack([CODES, CODES[::-1].copy()]) / 32768).float()
    write_wav(tmp_path / "out.wav", x, 8000)
    assert written == [tmp_path / "out.wav"]
    back, rate = read_wav(tmp_path / "out.wav")
    assert rate == 8000
    torch.testing.assert_close(back, x, rtol=0, atol=0)  # codes on the 16-bit grid: exact
    write_wav(tmp_path / "clip.wav", torch.tensor([2.0, -2.0, 0.5]), 16000, durable=False)
    assert len(written) == 1
    clipped = torch.tensor([32767 / 32768, -1.0, 0.5])  # clipped, not wrapped round
    torch.testing.assert_close(read_wav(tmp_path / "clip.wav")[0][0], clipped)


def test_reader_agrees_with_scipy(tmp_path: Path):
    """An independent writer (SciPy, where installed; not a tfam dependency)."""
    wavfile = pytest.importorskip("scipy.io.wavfile")
    rng = np.random.default_rng(1)
    for dtype, scale in (
        (np.uint8, None),
        (np.int16, 32768),
        (np.int32, 2**31),
        (np.float32, 1),
        (np.float64, 1),
    ):
        if dtype is np.uint8:
            data = rng.integers(0, 256, (300, 2)).astype(np.uint8)
            expected = (data.astype(np.float64) - 128) / 128
        elif scale == 1:
            data = rng.uniform(-1, 1, (300, 2)).astype(dtype)
            expected = data.astype(np.float64)
        else:
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, (300, 2), endpoint=True).astype(dtype)
            expected = data.astype(np.float64) / scale
        wavfile.write(tmp_path / "s.wav", 11025, data)
        waveform, rate = read_wav(tmp_path / "s.wav")
        assert rate == 11025
        np.testing.assert_allclose(waveform.numpy().T, expected, rtol=1e-6, atol=1e-7)
    write_wav(tmp_path / "mine.wav", torch.tensor([0.25, -0.5]), 16000, durable=False)
    rate, data = wavfile.read(tmp_path / "mine.wav")
    assert rate == 16000 and data.tolist() == [8192, -16384]


def test_load_audio_resamples_to_16k(tmp_path: Path):
    n = 44100 // 2
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(n) / 44100)
    path = tmp_path / "cd.wav"
    path.write_bytes(riff(tone.astype("<f4").tobytes(), tag=FLOAT, channels=1, rate=44100, bits=32))
    x = load_audio(path)
    assert x.shape == (math.ceil(n * 16000 / 44100),)
    expected = 0.5 * np.sin(2 * np.pi * 440 * np.arange(x.shape[0]) / 16000)
    assert np.abs(x.numpy() - expected)[200:-200].max() < 2e-3


def test_load_audio_scales_a_loud_float_file_to_peak_one(tmp_path: Path):
    x = np.array([0.0, 3.0, -1.5, 0.75], dtype="<f4")
    path = tmp_path / "loud.wav"
    path.write_bytes(riff(x.tobytes(), tag=FLOAT, channels=1, rate=16000, bits=32))
    torch.testing.assert_close(load_audio(path), torch.tensor([0.0, 1.0, -0.5, 0.25]))


# ------------------------------------------------------------------------------ one-line errors

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(40)


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("picture.png", PNG, "not a WAV file (it looks like a PNG image)"),
        ("notes.txt", b"the digits one two three\n", "not a WAV file (it looks like text)"),
        ("empty.wav", b"", "empty file (0 bytes)"),
        ("header.wav", riff(b"", tag=PCM, channels=1, rate=16000, bits=16), "no samples"),
        ("zeros.wav", riff(bytes(3200), tag=PCM, channels=1, rate=16000, bits=16), "silent"),
        # one 16-bit step of hiss (3e-5) is still silence
        (
            "hiss.wav",
            riff(
                np.tile([1, -1], 800).astype("<i2").tobytes(),
                tag=PCM,
                channels=1,
                rate=16000,
                bits=16,
            ),
            "silent",
        ),  # fmt: skip
        (
            "mulaw.wav",
            riff(bytes(100), tag=7, channels=1, rate=8000, bits=8),
            "format tag 0x0007: mu-law",
        ),
        ("pcm12.wav", riff(bytes(100), tag=PCM, channels=1, rate=8000, bits=12), "12-bit PCM"),
        (
            "float16.wav",
            riff(bytes(100), tag=FLOAT, channels=1, rate=8000, bits=16),
            "16-bit IEEE float",
        ),
        (
            "nan.wav",
            riff(
                np.array([0.5, np.nan], "<f4").tobytes(), tag=FLOAT, channels=1, rate=8000, bits=32
            ),
            "NaN or infinite",
        ),  # fmt: skip
        ("avi.wav", b"RIFF" + struct.pack("<I", 4) + b"AVI ", "RIFF 'AVI' file, not WAVE"),
        ("nofmt.wav", b"RIFF" + struct.pack("<I", 12) + b"WAVEdata" + bytes(4), "no 'fmt ' chunk"),
    ],
)
def test_bad_files_get_one_line(tmp_path: Path, name: str, content: bytes, words: str):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(AudioError) as info:
        load_audio(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ") and words in message and "expected" in message
    assert isinstance(info.value, ValueError)


def test_missing_file_and_directory(tmp_path: Path):
    with pytest.raises(AudioError, match=r"nowhere\.wav: no such file"):
        load_audio(tmp_path / "nowhere.wav")
    with pytest.raises(AudioError, match="is a directory"):
        read_wav(tmp_path)


# -------------------------------------------------------------------------------------- frames


def test_frame_counts():
    assert [num_frames(n) for n in (0, 1, 399, 400, 559, 560, 16000)] == [0, 0, 0, 1, 1, 2, 98]
    assert (FRAME_LENGTH, FRAME_SHIFT, SAMPLE_RATE) == (400, 160, 16000)
    assert fbank(torch.randn(16000)).shape == (98, 80)
    assert fbank(torch.randn(399), n_mels=40).shape == (0, 40)
    assert fbank(torch.randn(400)).shape == (1, 80)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3000))
def test_frames_agree_everywhere(n: int):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    assert fbank(x, n_mels=8).shape == (num_frames(n), 8)
    assert len(frame_labels([], n)) == num_frames(n)
    assert fbank(torch.stack([x, x]), n_mels=8).shape == (2, num_frames(n), 8)  # batch axes kept


# ------------------------------------------------------------------------------------ the fbank


def reference_fbank(
    x: np.ndarray, n_mels: int, window: str, preemph: float, remove_dc: bool
) -> np.ndarray:
    """fbank from its definition in float64 numpy, one frame and one filter at a time."""
    n_fft, sr = 512, 16000
    i = np.arange(400)
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * i / 399)
    w = {"povey": hann**0.85, "hann": hann, "hamming": 0.54 - 0.46 * np.cos(2 * np.pi * i / 399)}[
        window
    ]

    def m(f):
        return 1127.0 * np.log(1.0 + f / 700.0)

    lo, hi = m(20.0), m(8000.0)
    step = (hi - lo) / (n_mels + 1)
    M = np.zeros((n_mels, n_fft // 2 + 1))
    for b in range(n_mels):
        left, centre, right = lo + b * step, lo + (b + 1) * step, lo + (b + 2) * step
        for k in range(n_fft // 2 + 1):
            mk = m(k * sr / n_fft)
            if left < mk <= centre:
                M[b, k] = (mk - left) / (centre - left)
            elif centre < mk < right:
                M[b, k] = (right - mk) / (right - centre)
    rows = []
    for t in range(1 + (len(x) - 400) // 160):
        f = x[160 * t : 160 * t + 400].copy()
        if remove_dc:
            f -= f.mean()
        if preemph:
            f = f - preemph * np.concatenate([f[:1], f[:-1]])
        power = np.abs(np.fft.rfft(f * w, n=n_fft)) ** 2
        rows.append(np.log(np.maximum(M @ power, 1e-10)))
    return np.array(rows)


@pytest.mark.parametrize(
    ("window", "preemph", "remove_dc"),
    [("povey", 0.97, True), ("hann", 0.0, False), ("hamming", 0.5, True)],
)
def test_fbank_matches_the_definition(window: str, preemph: float, remove_dc: bool):
    rng = np.random.default_rng(2)
    x = (
        0.3 * rng.standard_normal(3200)
        + 0.2 * np.sin(2 * np.pi * 700 * np.arange(3200) / 16000)
        + 0.05
    )
    x[1000:1800] = 0.0  # digital silence: the floor, not -inf
    expected = reference_fbank(x, 40, window, preemph, remove_dc)
    got = fbank(
        torch.from_numpy(x), n_mels=40, window=window, preemphasis=preemph, remove_dc=remove_dc
    )
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-9)
    assert np.isfinite(expected).all() and (expected == np.log(1e-10)).any()  # the floor was hit
    got32 = fbank(
        torch.from_numpy(x).float(),
        n_mels=40,
        window=window,
        preemphasis=preemph,
        remove_dc=remove_dc,
    )
    assert got32.dtype == torch.float32
    loud = expected > np.log(1e-6)  # float32's rounding matters only near the floor
    np.testing.assert_allclose(got32.numpy()[loud], expected[loud], rtol=0, atol=2e-3)


@pytest.mark.parametrize("n_mels", [23, 40, 80])
def test_a_tone_lands_in_its_mel_band(n_mels: int):
    """A tone at band b's centre frequency puts the most energy in band b, for every band above
    the lowest few (where the band is narrower than the window's main lobe)."""
    edges = np.linspace(mel(20.0), mel(8000.0), n_mels + 2)
    centres_hz = 700.0 * (np.exp(edges[1:-1] / 1127.0) - 1.0)
    bands = [b for b in range(n_mels) if centres_hz[b] >= 250.0]
    t = torch.arange(4000, dtype=torch.float64) / 16000
    tones = torch.stack([0.5 * torch.sin(2 * math.pi * float(centres_hz[b]) * t) for b in bands])
    loudest = fbank(tones, n_mels=n_mels).mean(dim=-2).argmax(dim=-1)  # (len(bands),)
    assert loudest.tolist() == bands


def test_fbank_resamples_other_rates_first():
    x = torch.randn(8000, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(fbank(x, 8000), fbank(resample(x, 8000, 16000)))
    assert fbank(x, 8000).shape == (num_frames(16000), 80)


def test_fbank_against_torchaudio_kaldi_where_installed():
    """torchaudio's Kaldi fbank (optional): the same energies on the int16 scale (x 32768)."""
    kaldi = pytest.importorskip("torchaudio.compliance.kaldi")
    x = 0.3 * torch.randn(8000, generator=torch.Generator().manual_seed(4))
    theirs = kaldi.fbank(x[None] * 32768, num_mel_bins=80, dither=0.0, energy_floor=0.0)
    ours = fbank(x) + 2 * math.log(32768)  # log(E * 32768^2)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-3)


def test_normalize():
    x = torch.randn(50, 8, dtype=torch.float64) * torch.arange(1, 9) + torch.arange(8)
    y = normalize(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(8, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        y.var(0, unbiased=False), torch.full((8,), 1.0, dtype=torch.float64), rtol=1e-4, atol=0
    )
    assert torch.equal(normalize(torch.full((1, 8), 3.0)), torch.zeros(1, 8))  # one frame, no NaN
    assert torch.isfinite(normalize(torch.ones(10, 4))).all()
    torch.testing.assert_close(
        normalize(torch.stack([x, 2 * x + 1])), torch.stack([y, y]), rtol=0, atol=1e-4
    )


# ---------------------------------------------------------------------------------- resampling


def tone(freq: float, rate: int, seconds: float = 0.5) -> torch.Tensor:
    n = int(rate * seconds)
    return torch.sin(2 * math.pi * freq * torch.arange(n, dtype=torch.float64) / rate)


# Tones up to ~0.6 of the lower Nyquist: the Hann-windowed sinc of 6 zero crossings (torchaudio's
# default) rolls off from there (44.1 kHz -> 16 kHz: 6.5 kHz comes out 7% low).
@pytest.mark.parametrize(("orig", "freq"), [(44100, 1000.0), (44100, 4500.0), (8000, 1000.0),
                                            (8000, 2200.0), (48000, 440.0), (44099, 1000.0)])  # fmt: skip
def test_a_tone_below_nyquist_survives(orig: int, freq: float):
    x = tone(freq, orig)
    y = resample(x, orig, 16000)
    assert y.shape == (math.ceil(x.shape[0] * 16000 / orig),) and y.dtype == torch.float64
    expected = tone(freq, 16000)[: y.shape[0]]
    assert (y - expected)[100:-100].abs().max() < 5e-3  # the edges see zeros beyond the signal


@pytest.mark.parametrize("freq", [10000.0, 12000.0, 15000.0])
def test_a_tone_above_the_new_nyquist_is_removed(freq: float):
    x = tone(freq, 44100)  # above 8 kHz: would alias to 16 - freq kHz
    y = resample(x, 44100, 16000)
    rms = y[100:-100].square().mean().sqrt()
    assert rms < 0.01 * x.square().mean().sqrt()  # at least 40 dB down


def test_resample_forms_agree_and_keep_shapes():
    x = torch.randn(2, 3, 1000, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    y = resample(x, 22050, 16000)
    assert y.shape == (2, 3, math.ceil(1000 * 16000 / 22050))
    # The direct sum at each output time equals the polyphase bank's strided convolution.
    direct = _direct(x.reshape(6, 1000), 441, 320, 6, 0.99, y.shape[-1]).reshape(y.shape)
    torch.testing.assert_close(y, direct, rtol=0, atol=1e-12)
    assert resample(x.float(), 22050, 16000).dtype == torch.float32
    assert resample(x, 16000, 16000) is x
    kernel, width = _sinc_kernel(1, 2, 6, 0.99)
    assert kernel.shape == (2, 1, 2 * width + 1)
    torch.testing.assert_close(
        kernel.sum(-1), torch.full((2, 1), 1.0, dtype=torch.float64), rtol=0, atol=2e-2
    )
    with pytest.raises(ValueError, match="orig_rate must be a positive"):
        resample(x, 0, 16000)


def test_resample_matches_torchaudio_where_installed():
    functional = pytest.importorskip("torchaudio.functional")
    x = torch.randn(3000, generator=torch.Generator().manual_seed(6))
    for orig, new in ((44100, 16000), (8000, 16000), (22050, 16000)):
        torch.testing.assert_close(
            resample(x, orig, new), functional.resample(x, orig, new), rtol=0, atol=1e-5
        )


# ------------------------------------------------------------------------- augmentation, noise


@pytest.mark.parametrize("snr_db", [20.0, 10.0, 5.0, 0.0, -3.0])
def test_mix_at_snr_measures_back(snr_db: float):
    g = torch.Generator().manual_seed(7)
    signal = 0.3 * torch.sin(torch.arange(5000) * 0.05)
    noise = torch.randn(1300, generator=g)  # shorter: repeated
    mixed = mix_at_snr(signal, noise, snr_db)
    added = (mixed - signal).double()
    measured = 10 * math.log10(float(signal.double().square().mean() / added.square().mean()))
    assert measured == pytest.approx(snr_db, abs=1e-4)
    batch = mix_at_snr(torch.stack([signal, 2 * signal]), torch.randn(2, 9000, generator=g), snr_db)
    for row, s in zip(batch, (signal, 2 * signal), strict=True):
        p = float(s.double().square().mean() / (row - s).double().square().mean())
        assert 10 * math.log10(p) == pytest.approx(snr_db, abs=1e-4)
    with pytest.raises(ValueError, match="signal is silent"):
        mix_at_snr(torch.zeros(100), noise, snr_db)


def masked_runs(mask: torch.Tensor) -> list[int]:
    """Lengths of the runs of True in a 1-D bool tensor."""
    runs, count = [], 0
    for v in [*mask.tolist(), False]:
        if v:
            count += 1
        elif count:
            runs.append(count)
            count = 0
    return runs


def test_spec_augment_masks_the_stated_widths():
    x = torch.randn(100, 40, generator=torch.Generator().manual_seed(8)) + 10.0  # never 0
    freq_widths, time_widths = [], []
    for seed in range(150):
        g = torch.Generator().manual_seed(seed)
        y = spec_augment(x, freq_masks=1, freq_width=7, time_masks=1, time_width=30,
                         max_time_ratio=0.15, generator=g)  # fmt: skip
        zero = y == 0
        bands, frames = zero.all(0), zero.all(1)
        assert torch.equal(zero, bands[None, :] | frames[:, None])  # whole bands, whole frames
        assert torch.equal(y[~zero], x[~zero])
        fr, tr = masked_runs(bands), masked_runs(frames)
        assert len(fr) <= 1 and len(tr) <= 1
        freq_widths.append(fr[0] if fr else 0)
        time_widths.append(tr[0] if tr else 0)
    assert set(freq_widths) == set(range(8))  # f ~ U{0..7}, every width seen
    assert set(time_widths) == set(range(16))  # t ~ U{0..min(30, 0.15 * 100)}
    assert torch.equal(x, torch.randn(100, 40, generator=torch.Generator().manual_seed(8)) + 10.0)


def test_spec_augment_is_deterministic_and_batched():
    x = torch.randn(3, 120, 80, generator=torch.Generator().manual_seed(9)) + 10.0
    a = spec_augment(x, generator=torch.Generator().manual_seed(1))
    b = spec_augment(x, generator=torch.Generator().manual_seed(1))
    c = spec_augment(x, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a[0] == 0, a[1] == 0)  # each utterance draws its own masks
    zero = (a[0] == 0).all(0)
    assert sum(masked_runs(zero)) <= 2 * 27
    m = spec_augment(x[0], freq_masks=1, freq_width=80, time_masks=0, value="mean",
                     generator=torch.Generator().manual_seed(3))  # fmt: skip
    changed = (m != x[0]).any(0)
    assert torch.allclose(m[:, changed], x[0].mean().expand(120, int(changed.sum())))
    with pytest.raises(ValueError, match="freq_width must be"):
        spec_augment(x, freq_width=-1)


def test_spec_augment_leaves_the_padding_alone():
    x = torch.randn(4, 60, 10, generator=torch.Generator().manual_seed(10)) + 10.0
    lengths = torch.tensor([60, 30, 5, 0])
    for seed in range(20):
        y = spec_augment(x, freq_masks=0, time_masks=3, time_width=20, max_time_ratio=0.5, value="mean",
                         lengths=lengths, generator=torch.Generator().manual_seed(seed))  # fmt: skip
        for item, n in enumerate(lengths.tolist()):
            assert torch.equal(y[item, n:], x[item, n:])
            changed = (y[item, :n] != x[item, :n]).all(1)  # whole masked frames
            assert sum(masked_runs(changed)) <= 3 * min(20, n // 2)
    with pytest.raises(ValueError, match="lengths must give"):
        spec_augment(x, lengths=[60, 61, 1, 1])


# --------------------------------------------------------------------------------- frame labels


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    label: str


def test_frame_labels_at_the_boundaries():
    # Frame t's centre is 160 t + 200: frame 0 -> 200, frame 1 -> 360, frame 2 -> 520.
    n = 400 + 160 * 4  # 5 frames
    assert frame_labels([(200, 360, "a")], n) == ["a", "sil", "sil", "sil", "sil"]
    assert frame_labels([(201, 361, "a")], n) == ["sil", "a", "sil", "sil", "sil"]
    assert frame_labels([(0, 10_000, "x")], n, silence="-") == ["x"] * 5
    assert frame_labels([(0, 200, "a")], n) == ["sil"] * 5  # the end is exclusive
    segs = [Segment(0, 521, "one"), Segment(521, 2000, "two"), Segment(360, 361, "tiny")]
    assert frame_labels(segs, n) == ["one", "tiny", "one", "two", "two"]  # later segments win
    assert frame_labels([(0, 100, "a")], 399) == []
    with pytest.raises(ValueError, match="ends before it starts"):
        frame_labels([(500, 100, "a")], n)
