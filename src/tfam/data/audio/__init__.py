"""The audio front end: WAV files, resampling, 25 ms / 10 ms frames, log-mel filterbanks,
per-utterance normalisation, SpecAugment and noise at a signal-to-noise ratio.

from tfam.data.audio import load_audio, fbank, normalize
wave = load_audio("digits.wav")          # (samples,) float32 mono at 16 kHz
features = normalize(fbank(wave))         # (frames, 80): 98 frames a second
"""

from tfam.data.audio.augment import mix_at_snr, spec_augment
from tfam.data.audio.features import (
    FRAME_LENGTH,
    FRAME_SHIFT,
    LOG_FLOOR,
    N_FFT,
    SAMPLE_RATE,
    fbank,
    frame,
    frame_labels,
    mel,
    mel_filterbank,
    normalize,
    num_frames,
)
from tfam.data.audio.resample import resample
from tfam.data.audio.wav import SILENCE_THRESHOLD, AudioError, load_audio, read_wav, write_wav

__all__ = [
    "FRAME_LENGTH",
    "FRAME_SHIFT",
    "LOG_FLOOR",
    "N_FFT",
    "SAMPLE_RATE",
    "SILENCE_THRESHOLD",
    "AudioError",
    "fbank",
    "frame",
    "frame_labels",
    "load_audio",
    "mel",
    "mel_filterbank",
    "mix_at_snr",
    "normalize",
    "num_frames",
    "read_wav",
    "resample",
    "spec_augment",
    "write_wav",
]
