"""Bibles from SWORD zText modules (Debian's ``sword-text-*`` packages), verse by verse.

    for ref, text in read_verses("engKJV2006eb"):   # ref = VerseRef("Gen", 1, 1)
        ...
    pairs = parallel_verses("engKJV2006eb", "spaRV1909eb")  # [(ref, english, spanish), ...]

The compressed module files and their versification are read by ``pysword`` (a small,
pure-Python reader); this module adds what it lacks: each verse with its reference in canonical
order (missing verses kept as "" so references never shift), markup stripped to plain text (no
tags, entities, USFM markers or runs of whitespace left), a decompression cache, the module
search path, and one-line errors that name the Debian package to install.
"""

from __future__ import annotations

import functools
import html
import os
import re
import struct
import unicodedata
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "MODULE_PACKAGES",
    "VerseRef",
    "book_names",
    "find_module",
    "parallel_verses",
    "read_verses",
    "sword_paths",
]

# The modules tfam uses and the Debian package that installs each (``make data`` installs them).
MODULE_PACKAGES: dict[str, str] = {
    "engKJV2006eb": "sword-text-kjv",
    "spaRV1909eb": "sword-text-sparv",
}


class VerseRef(NamedTuple):
    """A verse reference: OSIS book abbreviation ("Gen", "Matt", ...), chapter, verse."""

    book: str
    chapter: int
    verse: int

    def __str__(self) -> str:
        return f"{self.book} {self.chapter}:{self.verse}"


def sword_paths() -> list[Path]:
    """Where modules are looked for, in order: /usr/share/sword (Debian), ~/.sword (a user's
    own installs), then each directory of $SWORD_PATH (``:``-separated)."""
    paths = [Path("/usr/share/sword"), Path.home() / ".sword"]
    paths += [Path(p) for p in os.environ.get("SWORD_PATH", "").split(os.pathsep) if p]
    return paths


def _conf_names(path: Path) -> dict[str, Path]:
    """Module name (lower case) -> its .conf file, for one SWORD directory."""
    out: dict[str, Path] = {}
    mods = path / "mods.d"
    if not mods.is_dir():
        return out
    for conf in sorted(mods.glob("*.conf")):
        try:
            head = conf.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = re.search(r"^\[([^\]]+)\]", head, re.MULTILINE)
        if match:
            out[match.group(1).strip().lower()] = conf
    return out


def find_module(name: str) -> tuple[Path, str]:
    """(SWORD directory, module name as its .conf spells it) of the first directory in
    :func:`sword_paths` that holds ``name`` (case does not matter)."""
    for path in sword_paths():
        conf = _conf_names(path).get(name.lower())
        if conf is not None:
            spelled = re.search(
                r"^\[([^\]]+)\]", conf.read_text(encoding="utf-8", errors="replace"), re.M
            )
            return path, spelled.group(1).strip() if spelled else name
    package = MODULE_PACKAGES.get(name) or next(
        (p for m, p in MODULE_PACKAGES.items() if m.lower() == name.lower()), None
    )
    where = ", ".join(str(p) for p in sword_paths())
    hint = (
        f"install it with: sudo apt-get install {package} (or: make data)"
        if package
        else "install a SWORD module of that name"
    )
    raise FileNotFoundError(f"SWORD module {name!r} not found in {where}; {hint}")


# What a damaged module raises inside pysword when it is opened (missing or unreadable data
# files, a bad .conf); pysword itself reads a damaged block as an empty verse.
_BROKEN = (OSError, EOFError, ValueError, IndexError, KeyError, struct.error, zlib.error)


@functools.lru_cache(maxsize=8)
def _open_bible(name: str):  # noqa: ANN202  (a pysword SwordBible)
    try:
        from pysword.modules import SwordModules
    except ImportError as err:  # a runtime dependency; say how to get it
        raise ImportError("reading SWORD Bibles needs pysword: pip install pysword") from err
    path, spelled = find_module(name)
    try:
        modules = SwordModules(str(path))
        modules.parse_modules()
        bible = modules.get_bible_from_module(spelled)
    except _BROKEN as err:
        raise ValueError(
            f"SWORD module {name!r} in {path} cannot be read ({type(err).__name__}: {err}); "
            "reinstall it"
        ) from None
    # pysword decompresses a verse's whole block (a book here) for every verse it reads: 4.8 min
    # for two Bibles on this 2-core machine. Remembering the last blocks makes it seconds.
    bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
    return bible


_WS = re.compile(r"\s+")
_TAG = re.compile(r"<[^>]*>")
# OSIS elements whose content is not verse text (the ones pysword's OSISCleaner drops), empty
# or paired (never nested in these modules). pysword's cleaner gives the same text on both
# Bibles but runs ~100 regexes a verse: 3 s of a 4 s read.
_NOT_TEXT = "note|milestone|title|abbr|catchWord|index|rdg|rdgGroup|figure"
_DROP = re.compile(rf"<({_NOT_TEXT})\b[^>]*/>|<({_NOT_TEXT})\b.*?</\2\s*>", re.I | re.S)
_LINE_BREAK = re.compile(r'<[^>]+type="x-br"[^>]*>')  # poetry line ends: a space, not nothing
# USFM character markers left in the text by the modules' conversion (KJV: "the \\nd LORD").
_USFM = re.compile(r"\\\+?[a-z]+[0-9]*\*?")


def clean_text(text: str) -> str:
    """Plain verse text from OSIS markup: notes and titles dropped with their content, other
    tags dropped keeping their content (Strong's ``<w>``: "LORD<w>'s</w>" -> "LORD's"), USFM
    markers and pilcrows dropped, entities decoded, Unicode NFC, whitespace runs collapsed to
    one space, ends stripped."""
    text = _DROP.sub("", text)
    text = _LINE_BREAK.sub(" ", text)
    text = _TAG.sub("", text)
    text = _USFM.sub(" ", text)
    text = text.replace("¶", " ")  # the KJV's paragraph marks: layout, not words to translate
    text = html.unescape(text)
    text = unicodedata.normalize("NFC", text)
    return _WS.sub(" ", text).strip()


def book_names(module: str = "engKJV2006eb") -> list[str]:
    """OSIS abbreviations of the module's books in canonical order (Gen ... Rev)."""
    structure = _open_bible(module).get_structure()
    books = structure.get_books()
    return [b.osis_name for testament in ("ot", "nt") for b in books.get(testament, [])]


def read_verses(module: str, books: Sequence[str] | None = None) -> Iterator[tuple[VerseRef, str]]:
    """(reference, plain text) of every verse of ``module`` (or of ``books``, OSIS names) in
    canonical order. A verse the module lacks comes back as ``""``: the reference sequence is
    the module's versification, whole, so two modules of one versification zip verse by verse.
    """
    bible = _open_bible(module)
    structure = bible.get_structure()
    wanted = None if books is None else {b.lower() for b in books}
    for testament, testament_books in structure.get_books().items():
        for book in testament_books:
            if wanted is not None and book.osis_name.lower() not in wanted:
                continue
            # pysword's public get_iter skips missing verses, which would shift every later
            # reference; its per-index reader keeps them aligned.
            indices = structure.ref_to_indicies(books=[book.name])[testament]
            refs = [
                VerseRef(book.osis_name, c, v)
                for c, n in enumerate(book.chapter_lengths, start=1)
                for v in range(1, n + 1)
            ]
            if len(refs) != len(indices):
                raise ValueError(f"SWORD module {module!r}: {book.name} has an unexpected layout")
            for ref, index in zip(refs, indices):
                yield ref, clean_text(bible._text_for_index(testament, index) or "")


def parallel_verses(src_module: str, tgt_module: str) -> list[tuple[VerseRef, str, str]]:
    """(reference, source text, target text) of every verse both modules hold, aligned by
    reference in the source's canonical order; verses empty in either are dropped. Read once
    per process (a fresh list each call)."""
    return list(_parallel(src_module, tgt_module))


@functools.lru_cache(maxsize=4)
def _parallel(src_module: str, tgt_module: str) -> tuple[tuple[VerseRef, str, str], ...]:
    target = dict(read_verses(tgt_module))
    return tuple(
        (ref, text, target[ref])
        for ref, text in read_verses(src_module)
        if text and target.get(ref)
    )
