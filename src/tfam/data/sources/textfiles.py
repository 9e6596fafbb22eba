"""Reading the user's own text files, with the conventions of Hugging Face's example scripts,
and telling what they hold: :func:`read_user_text` -> :class:`TextFile`.

    tf = read_user_text("reviews.csv")               # a header row, then one example per row
    tf.kind                                          # "classify" (text + label columns)
    tf.texts[:2], tf.labels[:2]                      # ["a fine film", ...], ["pos", ...]
    read_user_text("pairs.tsv").pairs[0]             # ("hello", "hola"): kind "translate"
    read_user_text("story.txt").texts                # the non-empty lines: kind "text"
    read_user_text("tags.conllu", label_column="xpos").tags[0]   # one tag per word: "tag"

Formats: CSV and TSV (a header row, or none when the first row reads as an example: a field of
four words or more; its columns are then column1, column2, ...; TSV without quoting), JSON Lines (``.jsonl``, ``.json``,
``.ndjson``: one object a line), CoNLL-U (``.conllu``: any column as the tag, UPOS by default),
plain text (``.txt``, any other suffix, or a directory of ``.txt`` files: one example a
non-empty line). What a table holds is read from its columns (``text_column`` and
``label_column`` name them when the names are not the usual ones):

- ``translation``: a JSON Lines ``{"translation": {"en": ..., "es": ...}}`` (the languages by
  ``source_lang`` / ``target_lang``, else the object's two keys in order), source and target
  columns (``source``/``target``, ``src``/``tgt``, or the columns ``source_lang`` /
  ``target_lang`` name), or two text columns where neither is a label;
- ``tag``: a CoNLL-U file, or JSON Lines of ``tokens`` and ``tags`` (``ner_tags``,
  ``pos_tags``; or ``label_column``) lists;
- ``classify``: a text column (``text``, ``sentence``, ...; two for sentence pairs:
  ``sentence1``/``sentence2`` or ``text_column="a,b"``) and a label column (``label``,
  ``class``, ...), or exactly two columns of which one has few distinct values (the label);
- ``text``: a text column alone, or a plain text file.

Every error is one line naming the file and, where there is one, the line: a malformed line
(bad JSON, a wrong number of fields), bytes that are not UTF-8, an empty file, a column that
does not exist (the columns that do are listed).
"""

from __future__ import annotations

import csv
import json
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONLLU_COLUMNS",
    "FILE_KINDS",
    "TEXT_SUFFIXES",
    "TextFile",
    "is_text_folder",
    "read_text",
    "read_user_text",
]

FILE_KINDS = ("classify", "tag", "translate", "text")
TEXT_SUFFIXES = (".txt", ".text", ".md")
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
_TEXT_NAMES = ("text", "sentence", "content", "review", "document", "input", "utterance")
_PAIR_NAMES = (("sentence1", "sentence2"), ("premise", "hypothesis"), ("question", "answer"))
_LABEL_NAMES = ("label", "labels", "class", "category", "sentiment", "intent")
_TOKEN_NAMES = ("tokens", "words")
_TAG_NAMES = ("tags", "ner_tags", "pos_tags", "upos", "labels")
_SOURCE_TARGET = (("source", "target"), ("src", "tgt"))
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass
class TextFile:
    """What one of the user's files holds, read and checked.

    ``kind`` is one of :data:`FILE_KINDS`; by kind, ``texts`` (classify: a str, or a
    (str, str) pair with ``text_columns`` of two; text: the examples), ``labels`` (classify:
    str per text), ``words``/``tags`` (tag: per sentence), ``pairs`` (translate). ``columns``
    says which columns (or languages) were used, for the header and error messages.
    """

    path: Path
    kind: str
    texts: list[Any] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    words: list[list[str]] = field(default_factory=list)
    tags: list[list[str]] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len({"translate": self.pairs, "tag": self.words}.get(self.kind, self.texts))

    def used(self) -> str:
        """'text column "review", label column "stars"': the columns read, in words."""
        return ", ".join(f'{k} "{v}"' for k, v in self.columns.items())


def read_text(path: str | os.PathLike) -> str:
    """The file as text: UTF-8 (a byte-order mark dropped), else a one-line ValueError naming
    the file, the line and the byte; an empty (or blank) file is an error too."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{path} cannot be read: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(
            f"{path}:{line} is not UTF-8 text (byte 0x{data[err.start]:02x} at column {column}): "
            "save the file as UTF-8"
        ) from None
    if not text.strip():
        raise ValueError(f"{path} is empty: expected at least one example")
    return text


def is_text_folder(path: str | os.PathLike) -> bool:
    """Whether a directory holds ``.txt`` files and no images (a folder of text for a
    language model; a directory of images is an image folder)."""
    path = Path(path)
    if not path.is_dir():
        return False
    found = False
    for f in path.rglob("*"):
        suffix = f.suffix.lower()
        if suffix in _IMAGE_SUFFIXES:
            return False
        found = found or (suffix in TEXT_SUFFIXES and f.is_file())
    return found


def _norm(text: Any) -> str:
    return " ".join(unicodedata.normalize("NFC", str(text)).split())


# -- tables -----------------------------------------------------------------------------------
@dataclass
class _Table:
    path: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    lines: list[int]

    def column(self, name: str, what: str) -> str:
        if name not in self.columns:
            raise ValueError(
                f"{what} {name!r} is invalid for {self.path}: it has no such column; its columns: "
                f"{', '.join(self.columns)}"
            )
        return name

    def values(self, name: str, *, text: bool = True) -> list[Any]:
        out = []
        for row, line in zip(self.rows, self.lines):
            value = row.get(name)
            if value is None or (text and not _norm(value)):
                raise ValueError(f"{self.path}:{line} has no value in column {name!r}")
            out.append(_norm(value) if text else value)
        return out


def _is_header(fields: list[str]) -> bool:
    """Whether a table's first row names its columns: column names are short; a field of four
    or more words, or over 64 characters, is an example (a file without a header row, whose
    columns are then column1, column2, ...)."""
    return all(len(f.split()) < 4 and len(f.strip()) <= 64 for f in fields)


def _read_csv(path: Path, delimiter: str) -> _Table:
    text = read_text(path)
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    reader = csv.reader(text.splitlines(keepends=True), delimiter=delimiter, quoting=quoting)
    header: list[str] | None = None
    rows, lines = [], []
    try:
        for fields in reader:
            if not fields or not any(f.strip() for f in fields):
                continue
            if header is None:
                if not _is_header(fields):  # a file without a header row: columns by number
                    header = [f"column{i + 1}" for i in range(len(fields))]
                else:
                    header = [f.strip() for f in fields]
                    if len(set(header)) != len(header):
                        raise ValueError(
                            f"{path}:{reader.line_num} (the header) names a column twice"
                        )
                    continue
            if len(fields) != len(header):
                raise ValueError(
                    f"{path}:{reader.line_num} has {len(fields)} fields; the header has "
                    f"{len(header)} ({', '.join(header)})"
                )
            rows.append(dict(zip(header, fields)))
            lines.append(reader.line_num)
    except csv.Error as err:
        raise ValueError(f"{path}:{reader.line_num} is not valid CSV: {err}") from None
    if header is None or not rows:
        raise ValueError(f"{path} has a header row but no examples")
    return _Table(path, header, rows, lines)


def _read_jsonl(path: Path) -> _Table:
    text = read_text(path)
    columns: dict[str, None] = {}
    rows, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}:{number} is not valid JSON ({err.msg} at column {err.colno}): JSON Lines "
                "hold one object a line"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(
                f"{path}:{number} is a JSON {type(row).__name__}; JSON Lines hold one object a line"
            )
        columns.update(dict.fromkeys(row))
        rows.append(row)
        lines.append(number)
    return _Table(path, list(columns), rows, lines)


def _labels(table: _Table, name: str) -> list[str]:
    out = []
    for value, line in zip(table.values(name, text=False), table.lines):
        if isinstance(value, (list, dict)) or not str(value).strip():
            raise ValueError(f"{table.path}:{line} has no single label in column {name!r}")
        out.append(str(value).strip())
    return out


def _distinct(table: _Table, name: str) -> int:
    return len({str(r.get(name, "")).strip() for r in table.rows})


def _is_label_of(table: _Table, label: str, text: str) -> bool:
    """Whether column ``label`` reads as the label of column ``text``: few distinct values
    (at most a quarter of the rows, 50 at most, 2 at least), and at most half of the text's."""
    n = _distinct(table, label)
    few = n <= max(2, min(50, len(table.rows) // 4)) and n < len(table.rows)
    return few and 2 * n <= _distinct(table, text)


def _split_columns(text_column: str | None) -> list[str]:
    return [c.strip() for c in text_column.split(",") if c.strip()] if text_column else []


def _table_file(
    table: _Table,
    text_column: str | None,
    label_column: str | None,
    source_lang: str | None,
    target_lang: str | None,
) -> TextFile:
    path, cols = table.path, table.columns
    given = [table.column(c, "--text-column") for c in _split_columns(text_column)]
    if len(given) > 2:
        raise ValueError(f"--text-column {text_column!r} is invalid: expected one column or two")
    if label_column is not None:
        table.column(label_column, "--label-column")
    # Translation: Hugging Face's {"translation": {"en": ..., "es": ...}}.
    if "translation" in cols and isinstance(table.rows[0].get("translation"), dict):
        return _translation_objects(table, source_lang, target_lang)
    if source_lang or target_lang:
        if not (source_lang and target_lang):
            raise ValueError("--source-lang and --target-lang go together: give both")
        src = table.column(source_lang, "--source-lang")
        tgt = table.column(target_lang, "--target-lang")
        return _pairs_file(table, src, tgt)
    # Tagging: JSON Lines of token and tag lists.
    tokens = given[0] if given else next((c for c in _TOKEN_NAMES if c in cols), None)
    if tokens and isinstance(table.rows[0].get(tokens), list):
        tags = label_column or next((c for c in _TAG_NAMES if c in cols), None)
        if tags is None:
            raise ValueError(
                f"{path} has a {tokens!r} list but no tag column ({', '.join(_TAG_NAMES)}): name "
                f"it with --label-column; its columns: {', '.join(cols)}"
            )
        return _tagging_table(table, tokens, tags)
    label = label_column or next((c for c in _LABEL_NAMES if c in cols), None)
    texts = given or next(([a, b] for a, b in _PAIR_NAMES if a in cols and b in cols), [])
    texts = texts or [c for c in _TEXT_NAMES if c in cols][:1]
    if not texts and not label:
        for src, tgt in _SOURCE_TARGET:
            if src in cols and tgt in cols:
                return _pairs_file(table, src, tgt)
        if len(cols) == 1:
            texts = cols
        elif len(cols) == 2:
            a, b = cols
            if _is_label_of(table, b, a) or _is_label_of(table, a, b):
                label = b if _is_label_of(table, b, a) else a
                texts = [a if label == b else b]
            else:
                return _pairs_file(table, a, b)
    if texts and label is None and len(cols) == 2 and not given:
        other = next(c for c in cols if c not in texts)
        label = other if _is_label_of(table, other, texts[0]) else None
    if not texts and label is not None:
        rest = [c for c in cols if c != label]
        texts = rest if len(rest) == 1 else []
    if not texts:
        raise ValueError(
            f"{path}: cannot tell which column is the text; its columns: {', '.join(cols)}: name "
            "it with --text-column (and the label with --label-column; translation pairs with "
            "--source-lang/--target-lang)"
        )
    columns = {"text column": ",".join(texts)}
    values = [table.values(c) for c in texts]
    rows = values[0] if len(values) == 1 else list(zip(*values))
    if label is None:
        return TextFile(path, "text", texts=values[0], columns=columns)
    columns["label column"] = label
    return TextFile(path, "classify", texts=rows, labels=_labels(table, label), columns=columns)


def _pairs_file(table: _Table, src: str, tgt: str) -> TextFile:
    pairs = list(zip(table.values(src), table.values(tgt)))
    return TextFile(
        table.path,
        "translate",
        pairs=pairs,
        columns={"source column": src, "target column": tgt},
    )


def _translation_objects(
    table: _Table, source_lang: str | None, target_lang: str | None
) -> TextFile:
    first = table.rows[0]["translation"]
    langs = list(first)
    if source_lang is None and target_lang is None:
        if len(langs) != 2:
            raise ValueError(
                f"{table.path}:{table.lines[0]} holds {len(langs)} languages "
                f"({', '.join(langs)}): choose two with --source-lang and --target-lang"
            )
        source_lang, target_lang = langs
    if not (source_lang and target_lang):
        raise ValueError("--source-lang and --target-lang go together: give both")
    pairs = []
    for row, line in zip(table.rows, table.lines):
        obj = row.get("translation")
        if not isinstance(obj, dict):
            raise ValueError(f'{table.path}:{line} has no "translation" object')
        for lang in (source_lang, target_lang):
            if not _norm(obj.get(lang, "")):
                raise ValueError(
                    f"{table.path}:{line} has no {lang!r} text; its languages: "
                    f"{', '.join(obj) or 'none'}"
                )
        pairs.append((_norm(obj[source_lang]), _norm(obj[target_lang])))
    return TextFile(
        table.path,
        "translate",
        pairs=pairs,
        columns={"source language": source_lang, "target language": target_lang},
    )


def _tagging_table(table: _Table, tokens: str, tags: str) -> TextFile:
    out = TextFile(table.path, "tag", columns={"tokens column": tokens, "tags column": tags})
    table.column(tags, "--label-column")
    for row, line in zip(table.rows, table.lines):
        words, labels = row.get(tokens), row.get(tags)
        if not isinstance(words, list) or not isinstance(labels, list):
            raise ValueError(f"{table.path}:{line} needs lists in {tokens!r} and {tags!r}")
        if len(words) != len(labels) or not words:
            raise ValueError(
                f"{table.path}:{line} has {len(words)} tokens and {len(labels)} tags: expected "
                "as many, at least one"
            )
        out.words.append([str(w) for w in words])
        out.tags.append([str(t) for t in labels])
    return out


# -- CoNLL-U and plain text -------------------------------------------------------------------
def _conllu_file(path: Path, label_column: str | None) -> TextFile:
    column = (label_column or "upos").lower()
    if column not in CONLLU_COLUMNS[2:]:
        raise ValueError(
            f"--label-column {label_column!r} is invalid for the CoNLL-U file {path}: expected "
            f"one of {', '.join(CONLLU_COLUMNS[2:])}"
        )
    at = CONLLU_COLUMNS.index(column)
    out = TextFile(path, "tag", columns={"tag column": column})
    words: list[str] = []
    tags: list[str] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            if words:
                out.words.append(words)
                out.tags.append(tags)
            words, tags = [], []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise ValueError(
                f"{path}:{number} has {len(fields)} tab-separated fields; a CoNLL-U word line has 10"
            )
        if "-" in fields[0] or "." in fields[0]:
            continue  # a multiword token's range or an empty node: no word to tag
        words.append(fields[1])
        tags.append(fields[at])
    if words:
        out.words.append(words)
        out.tags.append(tags)
    if not out.words:
        raise ValueError(f"{path} holds no CoNLL-U word lines")
    return out


def _plain_text(path: Path) -> TextFile:
    if path.is_dir():
        files = sorted(
            f for f in path.rglob("*") if f.suffix.lower() in TEXT_SUFFIXES and f.is_file()
        )
    else:
        files = [path]
    if not files:
        raise ValueError(f"{path} holds no .txt files")
    texts = []
    for f in files:
        texts += [_norm(line) for line in read_text(f).splitlines() if line.strip()]
    return TextFile(path, "text", texts=texts, columns={"text": "every non-empty line"})


def read_user_text(
    path: str | os.PathLike,
    *,
    text_column: str | None = None,
    label_column: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> TextFile:
    """Read one of the user's files (or a directory of ``.txt`` files) and tell what it holds;
    see the module for the formats and rules."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if path.is_dir():
        return _plain_text(path)
    if suffix == ".conllu":
        return _conllu_file(path, label_column)
    if suffix in TABLE_SUFFIXES:
        table = _read_csv(path, TABLE_SUFFIXES[suffix])
    elif suffix in JSONL_SUFFIXES:
        table = _read_jsonl(path)
    else:
        return _plain_text(path)
    return _table_file(table, text_column, label_column, source_lang, target_lang)
