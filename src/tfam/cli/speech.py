"""What the commands do with a speech run (the ``speech`` family, ``inputs = "audio"``): its
recordings (a WAV file, or SPLIT:INDEX of the run's data), `tfam eval` on its data specialised
for the run's task and labels, and the pictures of `tfam viz attention` and `tfam viz frames`.

A speech run keeps what its outputs mean in ``speech.json`` (task, data, head, classes or
alphabet, frame labels); `tfam eval` reloads the data for that task (the spoken digits through
``DatasetEntry.for_task`` with the run's ``--labels`` and ``--data-root``; the user's folder or
CSV as trained, evaluated on its validation holdout) and reports per task:

- frame tagging: frame accuracy over real 10 ms frames, per label, per noise condition and
  per voice, the most confused labels, a confusion matrix PNG;
- speaker (utterance classification): accuracy, per voice (class), per condition, confusion PNG;
- transcription (CTC, greedy): word error rate (and the character error rate for a transcript
  of characters), per condition and per voice, utterances fully right, a few reference /
  hypothesis lines.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfam.cli.common import eval_split, note_chance

EXAMPLES_SHOWN = 5
MIN_SAMPLES = 400  # one 25 ms frame at 16 kHz: a recording shorter has no frame
PER_LABEL_SHOWN = 30  # a phoneme run has ~100 labels: the most frequent are printed, all saved
# The corpus's split for each speech task (tag and transcribe by voice, speaker by utterance).
CORPUS_TASKS = {
    "frame-classification": "tag",
    "utterance-classification": "speaker",
    "ctc": "transcribe",
}
_SAMPLE = re.compile(r"^(train|fit|val|test):(\d+)$")


# ---------------------------------------------------------------------------------------------
# The run and its data


def speech_meta(run_dir: Path) -> dict[str, Any]:
    """speech.json of a speech run: task, data, head, classes, alphabet, separator, n_mels,
    labels."""
    from tfam.data.sources.speech import SPEECH_FILE

    path = Path(run_dir) / SPEECH_FILE
    if not path.is_file():
        raise ValueError(f"{path} not found: a speech run keeps its labels there (tfam train)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(meta, dict) or not meta.get("task"):
        raise ValueError(f"{path}: expected a JSON object naming the run's task")
    return meta


def speech_entry(run_dir: Path, meta: dict[str, Any], data: str | None, root: str | None) -> Any:
    """The catalog entry a speech run is evaluated on: ``data`` (default: the run's) for the
    run's task, specialised as trained (the spoken digits' --labels and --data-root)."""
    from tfam.data import resolve_data
    from tfam.runs import train_args

    saved = train_args(run_dir)
    name = data or meta.get("data") or saved.get("data")
    if not name:
        raise ValueError(f"{run_dir} names no dataset (speech.json, train_args.json): pass --data")
    task = str(meta["task"])
    entry = resolve_data(name, run=run_dir)
    if task not in entry.tasks:
        raise ValueError(
            f"--data {entry.name} is a {entry.task} dataset, but {run_dir} was trained for "
            f"{task} on {meta.get('data')}: evaluate it on a {task} dataset"
        )
    labels = meta.get("labels") or saved.get("labels") or None
    root = root or saved.get("data_root")
    if entry.specialize is not None:
        return entry.for_task(task, root=root, labels=labels), root
    return entry, root


def check_outputs(data: Any, meta: dict[str, Any], name: str, run_dir: Path) -> None:
    """The dataset's labels (classes, or CTC's alphabet) must be the run's: one line if not."""
    for key in ("classes", "alphabet"):
        theirs, ours = list(getattr(data, key, []) or []), list(meta.get(key) or [])
        if ours and theirs != ours:
            raise ValueError(
                f"--data {name} has {key} {_listed(theirs)}, but {run_dir} was trained on "
                f"{_listed(ours)}: evaluate it on data with the run's {key}"
            )


def _listed(items: Sequence[str], shown: int = 6) -> str:
    head = ", ".join(map(str, items[:shown]))
    return f"[{head}{', ...' if len(items) > shown else ''}] ({len(items)})"


def condition(snr_db: float | None) -> str:
    """A noise condition's name: "clean", or "20 dB"."""
    return "clean" if snr_db is None else f"{snr_db:g} dB"


# ---------------------------------------------------------------------------------------------
# A recording: a WAV file, or SPLIT:INDEX of the run's data


@dataclass
class Recording:
    """One input of a speech command. ``features`` (T, n_mels): the normalised log-mel frames
    the model reads; ``utterance``: the spoken digits' Utterance (digits, voice, snr_db, word
    and phoneme segments) when it is one; ``truth``: the true class or transcript, where
    known; ``frame_truth``: the true label per frame (a tagging sample)."""

    name: str
    features: Any
    utterance: Any = None
    truth: str | None = None
    frame_truth: list[str] | None = None
    notes: list[str] = field(default_factory=list)


def load_recording(path: str, n_mels: int = 80, norm: Any = None) -> Recording:
    """A WAV file as frames, normalised as the run's were (``norm``: speech.json's, None per
    utterance); a file that is not audio, empty, silent or shorter than one 25 ms frame (400
    samples at 16 kHz) is one ``AudioError`` line naming it."""
    from tfam.data.audio import AudioError, load_audio
    from tfam.data.sources.speech import features_of

    waveform = load_audio(path)
    n = int(waveform.shape[-1])
    if n < MIN_SAMPLES:
        raise AudioError(
            f"{path}: too short ({n} samples, {1000 * n / 16000:.1f} ms at 16 kHz); expected "
            f"at least {MIN_SAMPLES} samples (one 25 ms frame)"
        )
    return Recording(path, features_of(waveform, n_mels, _norm(norm)))


def _norm(saved: Any) -> Any:
    """speech.json's "norm" ({"mean": [...], "std": [...]} or null) as a FeatureNorm."""
    return None if not saved else (tuple(saved["mean"]), tuple(saved["std"]))


def is_sample(spec: str) -> bool:
    """Whether ``spec`` names a sample of a dataset (SPLIT:INDEX) rather than a file."""
    return bool(_SAMPLE.match(spec)) and not Path(spec).exists()


def dataset_recording(
    spec: str,
    name: str,
    task: str,
    labels: str | None,
    root: str | None,
    n_mels: int = 80,
    norm: Any = None,
) -> Recording:
    """SPLIT:INDEX of a speech dataset (``name``: spoken-digits, a user's audio folder or CSV)
    for ``task`` ("frame-classification", ...); the spoken digits give their Utterance."""
    from tfam.data import resolve_data
    from tfam.data.sources.speech import features_of

    m = _SAMPLE.match(spec)
    assert m is not None
    split, index = m[1], int(m[2])
    entry = resolve_data(name)
    if entry.specialize is not None:
        entry = entry.for_task(task, root=root, labels=labels)
    if split not in entry.splits:
        raise ValueError(
            f"{spec}: {entry.name} has no split {split!r}; expected one of "
            f"{', '.join(entry.splits)}"
        )
    if entry.name == "spoken-digits":
        from tfam.data.sources.spoken_digits import load_split

        utts = load_split(split, CORPUS_TASKS[task], root=root)
        _check_index(spec, index, len(utts), f"{entry.name} {split}")
        u = utts[index]
        frames = u.frame_words() if labels != "phoneme" else u.frame_phonemes()
        truth = {"utterance-classification": u.voice, "ctc": " ".join(u.digits)}.get(task)
        return Recording(
            f"{entry.name} {spec} ({u.id})", features_of(u.audio, n_mels, _norm(norm)), utterance=u,
            truth=truth, frame_truth=frames if task == "frame-classification" else None,
            notes=[f"digits {u.digits}", f"voice {u.voice}", condition(u.snr_db)],
        )  # fmt: skip
    data = entry.load(split, root=root)
    _check_index(spec, index, len(data), f"{entry.name} {split}")
    features, label = data[index]
    truth = None
    if getattr(data, "texts", None):
        truth = data.texts[index]
    elif isinstance(label, int) and data.classes:
        truth = data.classes[label]
    return Recording(f"{Path(entry.name).name} {spec}", features, truth=truth)


def _check_index(spec: str, index: int, size: int, what: str) -> None:
    if not 0 <= index < size:
        raise ValueError(f"{spec}: index {index} is out of range; {what} has {size} utterances")


def run_recordings(
    run_dir: Path, specs: Sequence[str], meta: dict[str, Any], root: str | None = None
) -> list[Recording]:
    """Each spec (a WAV file or SPLIT:INDEX of the run's data) read before any output."""
    n_mels = int(meta.get("n_mels", 80))
    out = []
    for spec in specs:
        if is_sample(spec):
            from tfam.runs import train_args

            saved = train_args(run_dir)
            out.append(
                dataset_recording(
                    spec, str(meta.get("data") or saved.get("data")), str(meta["task"]),
                    meta.get("labels") or None, root or saved.get("data_root"), n_mels,
                    meta.get("norm"),
                )
            )  # fmt: skip
        else:
            out.append(load_recording(spec, n_mels, meta.get("norm")))
    return out


# ---------------------------------------------------------------------------------------------
# tfam eval on a speech run


def run_eval(args: argparse.Namespace, source: Any) -> int:
    """`tfam eval DIR` of a speech run: the task's numbers on its data's test split (the
    user's audio: its validation holdout), a confusion matrix PNG for the classifiers."""
    from tfam.cli.common import device_from
    from tfam.training.results import write_json

    run_dir = Path(args.dir)
    meta = speech_meta(run_dir)
    task = str(meta["task"])
    entry, root = speech_entry(run_dir, meta, args.data, args.root)
    split = eval_split(args, entry)
    data = entry.load(split, root=root)
    check_outputs(data, meta, entry.name, run_dir)
    total = len(data)
    n = total if args.limit is None else min(args.limit, total)
    if n == 0:
        raise ValueError(f"{entry.name} {split} holds no utterances")
    device = device_from(args)
    model = source.load(device).eval()
    outputs = _forward_all(model, data, n, device, args.batch_size)
    shown = f"first {n} of {total}" if n < total else f"{total}"
    frames = int(sum(int(data.lengths[i]) for i in range(n)))
    length = f"{frames / 6000:.1f} minutes" if frames >= 6000 else f"{frames / 100:.1f} s"
    print(
        f"model {run_dir} on {entry.name} {split}: {shown} utterances, {length} "
        f"({frames:,} frames of 10 ms)"
    )
    numbers: dict[str, Any] = {
        "model_dir": str(run_dir), "dataset": entry.name, "task": task, "split": split,
        "num_utterances": n, "split_size": total, "frames": frames,
    }  # fmt: skip
    if meta.get("labels"):
        numbers["labels"] = meta["labels"]
    groups = _groups(data, n)
    if task == "utterance-classification":
        groups.pop("voice", None)  # the voice is the class: its table is the per-class one
    if task == "ctc":
        numbers.update(_report_ctc(data, n, outputs, groups))
    else:
        frame_task = task == "frame-classification"
        result = _report_classes(data, n, outputs, groups, frame_task)
        numbers.update(result["numbers"])
        out = Path(args.out) if args.out else run_dir / "confusion.png"
        from tfam.viz import plot_confusion

        what = "frames" if frame_task else "utterances"
        plot_confusion(
            result["confusion"], data.classes, out,
            title=f"Confusion matrix ({what}): {run_dir.name}, {entry.name} {split}",
        )  # fmt: skip
        sys.stdout.flush()
        note_chance(numbers["acc"], result["confusion"].sum(dim=1).tolist(), split)
        numbers["confusion_png"] = str(out)
        print()
        print(f"confusion matrix: {out}")
    write_json(run_dir / "eval.json", numbers)
    print(f"numbers: {run_dir / 'eval.json'}")
    return 0


def _forward_all(model: Any, data: Any, n: int, device: Any, batch_size: int | None) -> list[Any]:
    """Each of the first ``n`` utterances' float32 output on the CPU: (T, K) frame logits cut
    to its frames, (K,) utterance logits, or (T', K) CTC logits cut to its output frames;
    batches sorted by length and bounded by padded frames."""
    import torch

    from tfam.training.batching import eval_index_batches
    from tfam.training.tasks.audio import collate_audio

    head = model.config.head
    lengths = data.lengths[:n]
    batches = eval_index_batches(n, batch_size or 64, lengths, 32_000)
    outputs: list[Any] = [None] * n
    with torch.inference_mode():
        for idx in batches:
            features, mask = collate_audio([data[int(i)] for i in idx])
            out = model(features.to(device), attention_mask=mask.to(device)).float().cpu()
            real = mask.sum(dim=1)
            kept = model.config.output_lengths(real) if head == "ctc" else real
            for row, i in enumerate(idx.tolist()):
                outputs[i] = out[row] if head == "utterance" else out[row, : int(kept[row])]
    return outputs


def _groups(data: Any, n: int) -> dict[str, list[str]]:
    """Per utterance, the group it belongs to by noise condition and by voice, where known."""
    groups: dict[str, list[str]] = {}
    if getattr(data, "snr_db", None):
        groups["condition"] = [condition(s) for s in data.snr_db[:n]]
    if getattr(data, "voices", None):
        groups["voice"] = list(data.voices[:n])
    return groups


def _ordered(names: Sequence[str]) -> list[str]:
    """Groups in order: clean, then by falling SNR; voices alphabetically."""
    unique = set(names)

    def key(name: str) -> tuple[int, float, str]:
        if name == "clean":
            return (0, 0.0, "")
        if name.endswith(" dB"):
            return (1, -float(name[:-3]), "")
        return (2, 0.0, name)

    return sorted(unique, key=key)


def _table(title: str, rows: list[tuple[str, int, int]], unit: str) -> list[dict[str, Any]]:
    """Print rows (name, count, right) as name / count / correct / accuracy; return them."""
    width = max(5, len(title), *(len(r[0]) for r in rows))
    print()
    print(f"{title:<{width}}  {unit:>8}  {'correct':>8}  {'accuracy':>8}")
    out = []
    for name, count, right in rows:
        acc = f"{100 * right / count:.2f}%" if count else "-"
        print(f"{name:<{width}}  {count:>8}  {right:>8}  {acc:>8}")
        out.append({"name": name, "count": count, "correct": right,
                    "acc": right / count if count else None})  # fmt: skip
    return out


def _report_classes(
    data: Any, n: int, outputs: list[Any], groups: dict[str, list[str]], frame_task: bool
) -> dict[str, Any]:
    """Frame tagging or utterance classification: accuracy, per label, per group, confusion."""
    import torch

    classes = list(data.classes)
    k = len(classes)
    confusion = torch.zeros(k, k, dtype=torch.long)
    by_group: dict[str, dict[str, list[int]]] = {g: {} for g in groups}
    loss_sum, counted = 0.0, 0
    for i in range(n):
        logits, label = outputs[i], data[i][1]
        target = torch.as_tensor(label, dtype=torch.long).reshape(-1)
        logits = logits.reshape(-1, k)
        keep = target >= 0
        target, logits = target[keep], logits[keep]
        guess = logits.argmax(dim=-1)
        loss_sum += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
        counted += int(target.numel())
        confusion += torch.bincount(target * k + guess, minlength=k * k).reshape(k, k)
        right = int((guess == target).sum())
        for g, names in groups.items():
            cell = by_group[g].setdefault(names[i], [0, 0])
            cell[0] += int(target.numel())
            cell[1] += right
    correct = int(confusion.trace())
    acc = correct / counted if counted else math.nan
    unit = "frames" if frame_task else "utterances"
    what = "frame accuracy" if frame_task else "accuracy"
    print(f"{what}: {100 * acc:.2f}% ({correct:,}/{counted:,} {unit})")
    print(f"loss: {loss_sum / max(counted, 1):.4f}")
    numbers: dict[str, Any] = {"acc": acc, "loss": loss_sum / max(counted, 1), "counted": counted,
                               "correct": correct, "unit": unit}  # fmt: skip
    for g in groups:
        rows = [(name, *by_group[g][name]) for name in _ordered(list(by_group[g]))]
        numbers[f"per_{g}"] = _table(g, rows, unit)
    totals = confusion.sum(dim=1).tolist()
    label_rows = [(c, int(totals[j]), int(confusion[j, j])) for j, c in enumerate(classes)]
    shown = label_rows
    title = "label" if frame_task else "class"
    if len(label_rows) > PER_LABEL_SHOWN:
        shown = sorted(label_rows, key=lambda r: -r[1])[:PER_LABEL_SHOWN]
        title = f"label ({PER_LABEL_SHOWN} most frequent of {len(label_rows)}; all in eval.json)"
    _table(title, shown, unit)
    numbers["per_class"] = [
        {"name": c, "count": t, "correct": r, "acc": r / t if t else None} for c, t, r in label_rows
    ]
    off = confusion.clone()
    off.fill_diagonal_(0)
    pairs = [(int(v), divmod(int(j), k)) for v, j in zip(*off.flatten().topk(min(3, k * k)))]
    confused = [(classes[t], classes[p], v) for v, (t, p) in pairs if v > 0]
    if confused:
        print()
        print("most confused (true -> predicted): "
              + ", ".join(f"{t} -> {p} ({v:,})" for t, p, v in confused))  # fmt: skip
        numbers["most_confused"] = [{"true": t, "predicted": p, "count": v}
                                    for t, p, v in confused]  # fmt: skip
    return {"numbers": numbers, "confusion": confusion}


def _report_ctc(
    data: Any, n: int, outputs: list[Any], groups: dict[str, list[str]]
) -> dict[str, Any]:
    """Transcription: greedy CTC decoding; WER (CER for characters) overall and per group;
    utterances fully right; a few reference / hypothesis lines."""
    import torch

    from tfam.training.tasks.ctc import CTC, ctc_greedy, edit_distance, word_errors

    task = CTC.for_dataset(data)
    chars = task.separator == ""
    errors = words = char_errors = chars_total = exact = 0
    loss_sum, symbols = 0.0, 0
    by_group: dict[str, dict[str, list[int]]] = {g: {} for g in groups}
    examples = []
    for i in range(n):
        logits, ids = outputs[i], torch.as_tensor(data[i][1], dtype=torch.long)
        (hyp_ids,) = ctc_greedy(logits[None], torch.tensor([logits.shape[0]]))
        hyp, ref = task.text(hyp_ids), task.text(ids.tolist())
        e, w = word_errors(hyp, ref)
        errors, words, exact = errors + e, words + w, exact + (hyp == ref)
        if chars:
            char_errors += edit_distance(hyp, ref)
            chars_total += len(ref)
        log_probs = logits.log_softmax(dim=-1)[:, None]  # (T', 1, K)
        loss_sum += float(
            torch.nn.functional.ctc_loss(
                log_probs, ids[None], torch.tensor([logits.shape[0]]), torch.tensor([len(ids)]),
                reduction="sum", zero_infinity=True,
            )
        )  # fmt: skip
        symbols += len(ids)
        for g, names in groups.items():
            cell = by_group[g].setdefault(names[i], [0, 0, 0, 0])
            cell[0], cell[1], cell[2], cell[3] = (
                cell[0] + e,
                cell[1] + w,
                cell[2] + 1,
                cell[3] + (hyp == ref),
            )
        if len(examples) < EXAMPLES_SHOWN:
            tag = " / ".join(f"{names[i]}" for names in groups.values())
            examples.append({"reference": ref, "hypothesis": hyp, "errors": e, "group": tag})
    wer = errors / words if words else math.nan
    print(f"word error rate: {100 * wer:.2f}% ({errors:,} errors / {words:,} reference words; "
          "greedy CTC decoding)")  # fmt: skip
    numbers: dict[str, Any] = {"wer": wer, "word_errors": errors, "words": words}
    if chars:
        cer = char_errors / chars_total if chars_total else math.nan
        print(f"character error rate: {100 * cer:.2f}% ({char_errors:,} / {chars_total:,})")
        numbers["cer"] = cer
    print(f"utterances fully right: {100 * exact / n:.2f}% ({exact}/{n})")
    print(f"loss: {loss_sum / max(symbols, 1):.4f} per target symbol")
    numbers.update({"utterances_right": exact, "loss": loss_sum / max(symbols, 1)})
    for g in groups:
        cells = by_group[g]
        names = _ordered(list(cells))
        width = max(9, len(g), *(len(x) for x in names))
        print()
        print(f"{g:<{width}}  {'utts':>6}  {'words':>7}  {'errors':>7}  {'WER':>7}  {'right':>7}")
        rows = []
        for name in names:
            e, w, u, r = cells[name]
            shown = f"{100 * e / w:.2f}%" if w else "-"
            print(f"{name:<{width}}  {u:>6}  {w:>7}  {e:>7}  {shown:>7}  {100 * r / u:>6.1f}%")
            rows.append({"name": name, "utterances": u, "words": w, "errors": e,
                         "wer": e / w if w else None, "right": r})  # fmt: skip
        numbers[f"per_{g}"] = rows
    print()
    print("examples (reference / hypothesis):")
    for ex in examples:
        mark = "ok" if ex["errors"] == 0 else f"{ex['errors']} error{'s' * (ex['errors'] > 1)}"
        print(f"  {ex['group']}  ({mark})" if ex["group"] else f"  ({mark})")
        print(f"    ref: {ex['reference']}")
        print(f"    hyp: {ex['hypothesis']}")
    numbers["examples"] = examples
    return numbers


# ---------------------------------------------------------------------------------------------
# tfam viz attention (a speech run) and tfam viz frames

FRAMES_EPILOG = """examples:
  tfam viz frames spoken-digits test:0 --out frames.png     an utterance's word and phoneme segments
  tfam viz frames runs/spoken-digits test:3                 ... and the run's predictions beside them
  tfam viz frames runs/spoken-digits my_digits.wav          a recording: what the run hears in it
  tfam viz frames runs/words val:0                          a sample of your audio folder or CSV

SOURCE is a speech run directory or a speech dataset (spoken-digits, an audio folder or CSV).
Panels: the log-mel frames the model reads (80 bands, a 25 ms window every 10 ms), then rows of
labelled segments on the same time axis: the spoken digits' words and phonemes (from eSpeak's
events; every 10 ms frame takes the label at its centre), and for a run its output: a tagging
run's predicted labels per frame (and its errors in red where the truth is known), a
transcription run's CTC emissions (the frames where the best path leaves the blank, with the
decoded symbol), a speaker run's top class in the title.
"""


def is_speech_run(dir_arg: str) -> bool:
    """Whether ``dir_arg`` is a run directory of a model over audio (``inputs = "audio"``)."""
    from tfam.runs import resolve_model

    try:
        source = resolve_model(dir_arg, what="DIR", kinds=("dir",))
    except (ValueError, FileNotFoundError):
        return False
    return getattr(source.model_class, "inputs", "") == "audio"


def register_frames(sub: Any) -> None:
    """`tfam viz frames SOURCE INPUT` (a subcommand of `tfam viz`)."""
    from tfam.cli.common import add_device_option

    texts = (
        "a recording's log-mel frames with its word and phoneme segments and a speech run's output",
        "The log-mel frames of a recording or a speech dataset's utterance, with its labelled "
        "segments (words, phonemes) and a speech run's predictions on the same time axis.",
        FRAMES_EPILOG,
    )
    p = sub.add_parser(
        "frames", help=texts[0], description=texts[1], epilog=texts[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("dir", metavar="SOURCE", help="a speech run directory, or spoken-digits")
    p.add_argument(
        "image", metavar="INPUT", help="a WAV file, or SPLIT:INDEX (e.g. test:0) of the data"
    )
    p.add_argument("--out", metavar="PNG", default=None, help="default: DIR/frames.png, or "
                   "frames.png for a dataset")  # fmt: skip
    p.add_argument(
        "--labels", default=None, metavar="KIND",
        help="a dataset SOURCE: the frame labels of its samples (spoken-digits: word, phoneme)",
    )  # fmt: skip
    p.add_argument("--root", metavar="DIR", default=None, help="where to look for dataset files")
    add_device_option(p)
    p.set_defaults(func=run_viz_frames)


def _title(rec: Recording, extra: str = "") -> str:
    notes = f"  [{', '.join(rec.notes)}]" if rec.notes else ""
    return f"{rec.name}{notes}{extra}"


def run_viz_attention(args: argparse.Namespace) -> int:
    """`tfam viz attention DIR INPUT` of a speech run: per-head attention of block --layer
    over the frames, under the log-mel frames (the words marked, where known)."""
    import torch

    from tfam.cli.common import device_from, layer_index
    from tfam.runs import resolve_model
    from tfam.viz.speech import plot_speech_attention, segments_in_seconds

    run_dir = Path(args.dir)
    meta = speech_meta(run_dir)
    (rec,) = run_recordings(run_dir, [args.image], meta, args.root)
    model = resolve_model(args.dir, what="DIR", kinds=("dir",)).load(device_from(args)).eval()
    c = model.config
    layer = layer_index(args.layer, c.depth)
    device = next(model.parameters()).device
    with torch.inference_mode():
        _, weights = model.forward_features(rec.features[None].to(device), return_attention=True)
    w = weights[layer][0].float().cpu()  # (H, T', T')
    window = (c.attention_options or {}).get("window")
    step = 10 * c.subsampling
    kernel = f"{c.attention} attention" + (
        f", window \u00b1{window} frames (\u00b1{window * step} ms)" if window is not None else ""
    )
    segments = segments_in_seconds(rec.utterance.words) if rec.utterance is not None else []
    out = Path(args.out) if args.out else run_dir / "attention.png"
    title = _title(rec, f"\nblock {layer % c.depth + 1}/{c.depth}, {kernel}; frames of {step} ms")
    plot_speech_attention(rec.features, w, out, subsampling=c.subsampling, segments=segments,
                          title=title)  # fmt: skip
    keys = (w > 1e-6).sum(dim=-1)
    print(
        f"attention of {rec.name}: block {layer % c.depth + 1}/{c.depth}, {w.shape[0]} heads over "
        f"{w.shape[-1]} frames of {step} ms ({kernel}); keys with weight per query: "
        f"{int(keys.min())}..{int(keys.max())} of {w.shape[-1]}"
    )
    print(f"picture: {out}")
    return 0


def run_viz_frames(args: argparse.Namespace) -> int:
    """`tfam viz frames SOURCE INPUT`: the frames with the corpus's segments and a run's
    output."""
    import torch

    from tfam.cli.common import device_from
    from tfam.viz.speech import plot_frames, runs_of, segments_in_seconds

    source = str(args.dir)
    run = is_speech_run(source)
    model = meta = None
    if run:
        if args.labels is not None:
            raise ValueError("--labels is for a dataset SOURCE; a run uses the labels it was "
                             "trained on")  # fmt: skip
        from tfam.runs import resolve_model

        meta = speech_meta(Path(source))
        (rec,) = run_recordings(Path(source), [args.image], meta, args.root)
        model = resolve_model(source, what="DIR", kinds=("dir",)).load(device_from(args)).eval()
    elif is_sample(args.image):
        from tfam.data import resolve_data

        entry = resolve_data(source)
        if entry.task not in CORPUS_TASKS:
            raise ValueError(
                f"SOURCE {source!r} is neither a speech run directory nor a speech dataset "
                f"({entry.name} is a {entry.task} dataset): expected a run of `tfam train "
                "speech` or spoken-digits"
            )
        rec = dataset_recording(args.image, source, entry.task, args.labels, args.root)
    else:
        if not Path(source).exists():
            from tfam.data import resolve_data

            resolve_data(source)  # an unknown name is one line naming the valid ones
        rec = load_recording(args.image)
    tiers: list[tuple[str, Any]] = []
    if rec.utterance is not None:
        tiers.append(("words", segments_in_seconds(rec.utterance.words)))
        tiers.append(("phonemes", segments_in_seconds(rec.utterance.phonemes, strip=True)))
    extra = ""
    if model is not None and meta is not None:
        device = next(model.parameters()).device
        with torch.inference_mode():
            out = model(rec.features[None].to(device)).float().cpu()[0]
        head = model.config.head
        if head == "frames":
            labels = [meta["classes"][i] for i in out[: rec.features.shape[0]].argmax(-1).tolist()]
            kind = meta.get("labels") or "label"
            strip = kind == "phoneme"
            shown = [lab.split(":", 1)[-1] if strip else lab for lab in labels]
            tiers.append((f"predicted {kind}s", runs_of(shown)))
            if rec.frame_truth is not None:
                wrong = ["" if p != t else "sil" for p, t in zip(labels, rec.frame_truth)]
                right = wrong.count("sil")
                tiers.append(("errors", runs_of(wrong)))
                extra = f"\nframe accuracy {100 * right / len(wrong):.1f}% ({right}/{len(wrong)})"
        elif head == "ctc":
            step = model.config.subsampling * 0.01
            best = out.argmax(-1).tolist()
            emitted, last = [], 0
            for j, k in enumerate(best):
                if k != 0 and k != last:
                    emitted.append((j * step, (j + 1) * step, meta["alphabet"][k - 1]))
                last = k
            sep = meta.get("separator", "")
            tiers.append(("CTC emissions", emitted))
            extra = f"\ntranscript: {sep.join(e[2] for e in emitted)!r}"
        else:
            probs = out.softmax(-1)
            p, k = probs.max(-1)
            extra = f"\npredicted speaker/class: {meta['classes'][int(k)]} ({float(p):.2f})"
        if rec.truth is not None and head != "frames":
            extra += f", true: {rec.truth!r}"
    default = Path(source) / "frames.png" if run else Path("frames.png")
    target = Path(args.out) if args.out else default
    plot_frames(rec.features, target, tiers=tiers, title=_title(rec, extra))
    print(f"frames of {rec.name}: {len(tiers)} rows of segments ({', '.join(t for t, _ in tiers)})"
          if tiers else f"frames of {rec.name}")  # fmt: skip
    print(f"picture: {target}")
    return 0
