"""The text datasets of the catalog (sentiment, turkish-pos, kjv), the WordPiece tokenizer and
tokenizer.json round trips. Expected values are computed here from the source files with code
of the test's own (not the loaders'), except the fixed split fingerprints, which guard that a
split never moves."""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import importlib.util
import io
import re
import tarfile

import pytest
import torch

from tfam.data import TASK_FACTS, get_dataset, list_datasets
from tfam.data.sources import charlm, sentiment, sword, treebank
from tfam.data.text.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer
from tfam.data.text.wordpiece import WordPieceTokenizer, minilm_dir, minilm_tokenizer

# Data sets outside pip's reach: skipped with the reason when absent (tests/conftest.py).
needs_minilm = pytest.mark.requires_data("minilm")
needs_vader = pytest.mark.requires_data("sentiment", "minilm")
needs_treebank = pytest.mark.requires_data("turkish-pos", "minilm")
needs_kjv = pytest.mark.requires_data("kjv")
SPLITS = ("train", "val", "test")


# --- WordPiece and tokenizer.json round trips -------------------------------------------------


@needs_minilm
def test_wordpiece_encodes_like_the_packaged_tokenizer_file():
    from tokenizers import Tokenizer as HFTokenizer

    tok = minilm_tokenizer(16)
    reference = HFTokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    text = "The Rock is destined to be the 21st Century's new Conan."
    expected = reference.encode(text).ids
    assert tok.encode(text) == expected[:15] + [tok.sep_id]  # truncated to 16, [SEP] kept
    assert tok.encode("a fine film") == [101, 1037, 2986, 2143, 102]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert tok.vocab_size == 30522
    assert tok.decode(tok.encode("A Fine Film, really.")) == "a fine film, really."
    ids, mask = tok(["a fine film", "no"])
    assert ids.tolist() == [[101, 1037, 2986, 2143, 102], [101, 2053, 102, 0, 0]]
    assert mask.sum(1).tolist() == [5, 3]


@needs_minilm
def test_wordpiece_word_ids_mark_each_pieces_word():
    tok = minilm_tokenizer(64)
    words = ["Açıklanmayan", "soruların", "248.", "?"]
    ids, word_ids = tok.encode_words(words)
    assert word_ids[0] is None and word_ids[-1] is None
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    inner = word_ids[1:-1]
    assert sorted(set(inner)) == [0, 1, 2, 3] and inner == sorted(inner)
    # The pieces of each word spell it, as the tokenizer normalises it.
    for w, word in enumerate(words):
        pieces = [tok.id_to_token(i) for i, k in zip(ids, word_ids) if k == w]
        assert "".join(p.removeprefix("##") for p in pieces) == tok.normalize(word)
    cut_ids, cut_words, cut = tok.encode_words_flagged(words * 20)
    assert cut and len(cut_ids) == 64 and cut_words[-1] is None
    with pytest.raises(ValueError, match="list of words"):
        tok.encode_words("not a list")


def _round_trip(tok, tmp_path, texts):
    tok.save(tmp_path)
    back = load_tokenizer(tmp_path)
    assert type(back) is type(tok)
    assert back.vocab_size == tok.vocab_size
    assert back.to_json() == tok.to_json()
    for text in texts:
        assert back.encode(text) == tok.encode(text)
        assert back.decode(back.encode(text)) == tok.decode(tok.encode(text))
    return back


TEXTS = ["In the beginning God created the heaven and the earth.", "Jesus wept.", "zzz ¿qué?"]


def test_bpe_tokenizer_json_round_trip(tmp_path):
    _round_trip(BPETokenizer.train(TEXTS * 3, vocab_size=60), tmp_path, TEXTS)


def test_char_tokenizer_json_round_trip(tmp_path):
    back = _round_trip(CharTokenizer.train(TEXTS), tmp_path, TEXTS)
    assert back.token_to_id("G") != back.unk_id and back.token_to_id("Ж") == back.unk_id


@needs_minilm
def test_wordpiece_tokenizer_json_round_trip(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer

    tok = minilm_tokenizer(max_length=7)
    back = _round_trip(tok, tmp_path, TEXTS)
    assert isinstance(back, WordPieceTokenizer)
    assert back.max_length == 7 and len(back.encode(TEXTS[0])) == 7
    assert back.encode_words(["Jesus", "wept"]) == tok.encode_words(["Jesus", "wept"])
    assert back.special_ids == tok.special_ids
    # The file is Hugging Face's own format.
    assert HFTokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("wept").ids[0] == 101


# --- sentiment ---------------------------------------------------------------------------------


def _read_ratings_independently():
    """(id, mean, text) of the movie-review ratings file, read here without the loader."""
    path = sentiment.find_sentiment_sdist()
    with tarfile.open(path) as outer:
        inner_bytes = outer.extractfile(
            "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
        ).read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
        raw = inner.extractfile("hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt").read()
    rows = []
    for line in raw.decode("utf-8").splitlines():
        if line.strip():
            i, mean, text = line.split("\t")
            rows.append((int(i), float(mean), text.strip()))
    return rows


@pytest.fixture(scope="module")
def sentiment_splits():
    return {s: sentiment.load_sentiment(s) for s in SPLITS}


@needs_vader
def test_sentiment_splits_are_disjoint_stratified_and_fixed(sentiment_splits):
    rows = _read_ratings_independently()
    assert len(rows) == 10605
    ids = {s: ds.source_ids for s, ds in sentiment_splits.items()}
    seen = [set(v) for v in ids.values()]
    assert all(len(v) == len(set(v)) for v in ids.values())
    assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    # Every sentence with a non-zero mean is somewhere, once per distinct text.
    nonzero = {i for i, mean, _ in rows if mean != 0}
    assert seen[0] | seen[1] | seen[2] <= nonzero
    texts = collections.Counter(" ".join(t.lower().split()) for i, m, t in rows if m != 0)
    assert sum(len(v) for v in seen) == len(texts) == 10566
    # Stratified: each split's positive share within half a point of the whole.
    overall = sum(m > 0 for _, m, _ in rows if m != 0) / len(nonzero)
    for ds in sentiment_splits.values():
        assert abs(sum(ds.labels) / len(ds) - overall) < 0.005
    # Fixed: the run's --seed does not move it, and neither does anything else (fingerprint).
    again = get_dataset("sentiment").load("test", seed=123)
    assert again.source_ids == ids["test"]
    digest = hashlib.sha256(repr(sorted(ids["test"])).encode()).hexdigest()[:16]
    assert digest == "0314cd85720fb02c", digest
    # In hash order, not the file's label-by-label order: a prefix (eval --limit) is mixed.
    head = sentiment_splits["test"].labels[:50]
    assert 10 < sum(head) < 40


@needs_vader
def test_sentiment_label_balance_matches_the_file(sentiment_splits):
    rows = {i: (m, t) for i, m, t in _read_ratings_independently()}
    for split, ds in sentiment_splits.items():
        expected = collections.Counter(
            "positive" if rows[i][0] > 0 else "negative" for i in ds.source_ids
        )
        counts = ds.class_counts()
        assert counts == [expected["negative"], expected["positive"]]
        assert tuple(counts) == sentiment.SENTIMENT_COUNTS[split]
        # What describe() prints is the same balance.
        printed = dict(re.findall(r"(negative|positive) (\d+) \(", ds.describe()))
        assert printed == {"negative": str(counts[0]), "positive": str(counts[1])}
        for text, label, i in zip(ds.texts[:50], ds.labels[:50], ds.source_ids[:50]):
            assert text == rows[i][1] and label == int(rows[i][0] > 0)


@needs_vader
def test_a_sentiment_item_decodes_to_its_sentence(sentiment_splits):
    ds = sentiment_splits["val"]
    tok = ds.tokenizer
    assert ds.classes == ("negative", "positive") and ds.num_labels == 2
    assert ds.pad_token_id == 0 and ds.vocab_size == 30522
    for i in range(len(ds)):
        ids, label = ds[i]
        assert ids.dtype == torch.long and ids.ndim == 1 and len(ids) <= 128
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and label == ds.labels[i]
        if tok.unk_id in ids.tolist():
            continue  # an unknown piece decodes to nothing
        # Lower-cased, accents stripped; spacing around punctuation is the decoder's.
        assert tok.decode(ids).replace(" ", "") == tok.normalize(ds.texts[i]).replace(" ", "")
    plain = next(i for i, t in enumerate(ds.texts) if re.fullmatch(r"[A-Za-z ]+\.", t))
    # (runs of spaces in the file are one space after tokenization)
    assert ds.tokenizer.decode(ds[plain][0]) == " ".join(ds.texts[plain].lower().split())


@needs_vader
def test_sentiment_get_batch_pads_on_the_right(sentiment_splits):
    ds = sentiment_splits["test"]
    batch = ds.get_batch([3, 0, 7])
    lengths = [len(ds[i][0]) for i in (3, 0, 7)]
    assert batch["input_ids"].shape == (3, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths
    assert batch["labels"].tolist() == [ds.labels[i] for i in (3, 0, 7)]
    for row, i in enumerate((3, 0, 7)):
        assert torch.equal(batch["input_ids"][row, : lengths[row]], ds[i][0])
        assert (batch["input_ids"][row, lengths[row] :] == ds.pad_token_id).all()


def test_sentiment_split_rule_is_stratified_and_exact():
    ids = list(range(100, 140))
    labels = [0] * 30 + [1] * 10
    parts = sentiment.sentiment_split(ids, labels)
    assert sorted(sum(parts.values(), [])) == list(range(40))
    assert [sum(labels[i] for i in parts[s]) for s in SPLITS] == [8, 1, 1]
    assert [len(parts[s]) for s in SPLITS] == [32, 4, 4]
    assert sentiment.sentiment_split(ids, labels, split_seed=1) != parts


def test_sentiment_says_how_to_fetch_a_missing_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("TFAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TFAM_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as info:
        sentiment.load_sentiment("train")
    message = str(info.value)
    assert "pip download --no-deps --no-binary :all: vadersentiment==3.3.2" in message
    assert str(tmp_path / "cache" / "downloads") in message
    # A damaged archive is named too.
    (tmp_path / "vaderSentiment-3.3.2.tar.gz").write_bytes(b"not a tar file")
    with pytest.raises(ValueError, match="not a readable vadersentiment source archive"):
        sentiment.load_sentiment("train", root=tmp_path)


# --- turkish-pos -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pos_splits():
    return {s: treebank.load_turkish_pos(s) for s in SPLITS}


def _raw_treebank():
    """(sent_id, [(form, upos)]) per sentence and file, read here as the package's own reader
    splits files: on blank lines, the split from each sentence's position in its file."""
    out = {s: [] for s in SPLITS}
    dist = importlib.metadata.distribution("turkish-treebanks")
    for name in ("data/web.conllu", "data/wiki.conllu"):
        text = dist.locate_file(name).read_text(encoding="utf-8")
        blocks = [b.strip() for b in text.split("\n\n") if b.strip()]
        for index, block in enumerate(blocks):
            lines = block.split("\n")
            sent_id = lines[0].removeprefix("# sent_id = ")
            words = [
                tuple(ln.split("\t")[i] for i in (1, 3)) for ln in lines if not ln.startswith("#")
            ]
            split = "test" if index % 10 == 9 else "val" if index % 10 == 8 else "train"
            out[split].append((sent_id, words))
    return out


@needs_treebank
def test_pos_uses_the_treebanks_own_split(pos_splits):
    raw = _raw_treebank()
    for split, ds in pos_splits.items():
        assert ds.sent_ids == [sid for sid, _ in raw[split]]
        assert ds.words == [[w for w, _ in words] for _, words in raw[split]]
        assert ds.tags == [[t for _, t in words] for _, words in raw[split]]
        assert (len(ds), ds.num_tokens()) == treebank.TURKISH_POS_SIZES[split]
    ids = [set(ds.sent_ids) for ds in pos_splits.values()]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])


@needs_treebank
def test_pos_labels_sit_on_first_pieces_and_match_the_tags(pos_splits):
    ds = pos_splits["val"]
    tok = ds.tokenizer
    assert ds.classes == treebank.TREEBANK_TAGS and ds.num_labels == 14
    truncated = 0
    for i in range(len(ds)):
        ids, labels = ds[i]
        assert ids.shape == labels.shape and len(ids) <= 128
        _, word_ids = tok.encode_words(ds.words[i])
        first = [k is not None and (p == 0 or word_ids[p - 1] != k) for p, k in enumerate(word_ids)]
        assert ((labels != -100).tolist()) == first  # first pieces only; -100 elsewhere
        tagged = [ds.classes[y] for y in labels.tolist() if y != -100]
        words_seen = len(tagged)
        assert tagged == ds.tags[i][:words_seen]
        if words_seen < len(ds.words[i]):
            truncated += 1
            assert len(ids) == 128
    assert truncated == ds.truncated == 6
    assert (
        sum(len(w) for w in ds.words)
        - sum((y != -100).sum().item() for _, y in (ds[i] for i in range(len(ds))))
        == ds.dropped_tokens
    )
    batch = ds.get_batch([0, 1])
    assert (batch["labels"][~batch["attention_mask"]] == -100).all()


def test_read_conllu_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text(
        "# sent_id = a\n# text = vámonos al mar\n"
        "1-2\tvámonos\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "1\tvamos\tir\tVERB\t_\t_\t0\troot\t_\t_\n"
        "2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_\n"
        "2.1\tir\tir\tVERB\t_\t_\t_\t_\t_\t_\n"
        "3\tal\ta\tADP\t_\t_\t4\tcase\t_\t_\n\n"
        "# sent_id = b\n1\tmar\tmar\tNOUN\t_\t_\t0\troot\t_\t_\n",
        encoding="utf-8",
    )
    sentences = treebank.read_conllu(path)
    assert [(s.sent_id, s.words, s.tags) for s in sentences] == [
        ("a", ("vamos", "nos", "al"), ("VERB", "PRON", "ADP")),
        ("b", ("mar",), ("NOUN",)),
    ]
    path.write_text("1\tbad line\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"x.conllu:1 has 2 tab-separated fields"):
        treebank.read_conllu(path)


def test_pos_says_how_to_install_a_missing_treebank(tmp_path, monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(treebank.importlib.metadata, "distribution", absent)
    monkeypatch.setattr(treebank.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match=r"pip install turkish-treebanks==1\.0\.0"):
        treebank.load_turkish_pos("train")


@needs_minilm
def test_pos_refuses_a_tag_outside_its_classes():
    sentence = treebank.ConlluSentence("s", ("bir",), ("INTJ",))
    with pytest.raises(ValueError, match="INTJ"):
        treebank.TaggingDataset([sentence], minilm_tokenizer(16))


# --- kjv characters -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kjv_splits():
    return {s: charlm.load_kjv_chars(s) for s in SPLITS}


@needs_kjv
def test_kjv_windows_shift_inputs_to_targets_and_cover_the_text_once(kjv_splits):
    ds = kjv_splits["val"]
    assert ds.context == 128 and len(ds) == (ds.num_chars - 1) // 128
    first, second = ds[0], ds[1]
    assert first.shape == (129,) and first.dtype == torch.long
    assert first[-1] == second[0]  # the last target of a window is the next one's first input
    batch = ds.get_batch([0, 1, len(ds) - 1])
    assert batch["input_ids"].shape == batch["labels"].shape == (3, 128)
    assert torch.equal(batch["input_ids"][0], first[:-1]) and torch.equal(
        batch["labels"][0], first[1:]
    )
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    # The targets of all windows, in order, are the text's characters 1 .. num_targets, once each.
    targets = ds.get_batch(range(len(ds)))["labels"].reshape(-1)
    assert torch.equal(targets, ds.ids[1 : 1 + ds.num_targets])
    assert ds.num_chars - 1 - ds.num_targets < ds.context
    assert ds.tokenizer.decode(first) == ds.text[:129]


@needs_kjv
def test_kjv_held_out_books_are_not_in_train(kjv_splits):
    train, val, test = kjv_splits["train"], kjv_splits["val"], kjv_splits["test"]
    assert val.books == charlm.KJV_VAL_BOOKS and test.books == charlm.KJV_TEST_BOOKS
    assert not set(train.books) & (set(val.books) | set(test.books))
    assert len(train.books) == 66 - 9 and train.books[0] == "Gen" and train.books[-1] == "Phlm"
    # Verses read straight from the module land in their book's split, and only there.
    for book, split in (("Rev", "test"), ("Heb", "val"), ("Gen", "train")):
        verse = next(t for _, t in sword.read_verses(charlm.KJV_MODULE, [book]) if len(t) > 60)
        holders = [s for s, ds in kjv_splits.items() if verse in ds.text]
        assert holders == [split], (book, holders)
    info = get_dataset("kjv").info
    sizes = {"train": info.train_size, "val": info.val_size, "test": info.test_size}
    for split, ds in kjv_splits.items():
        assert ds.num_chars == charlm.KJV_SPLIT_CHARS[split] and len(ds) == sizes[split]
        assert ds.vocab_size == charlm.KJV_CHAR_VOCAB == info.vocab_size
    # The tokenizer is the training text's: every training character is known.
    assert train.unknown == 0 and set(train.tokenizer.symbols) == set(train.text)


def test_kjv_says_how_to_install_a_missing_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sword, "sword_paths", lambda: [tmp_path])
    charlm._book_texts.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="apt-get install sword-text-kjv"):
            charlm.load_kjv_chars("train")
    finally:
        charlm._book_texts.cache_clear()
        charlm._char_tokenizer.cache_clear()


def test_char_windows_refuse_bad_input():
    tok = CharTokenizer("ab ")
    with pytest.raises(ValueError, match="context"):
        charlm.CharWindows("ab ab", tok, context=0)
    with pytest.raises(ValueError, match="normalize_text"):
        charlm.CharWindows("ab  ab", tok, context=2)
    ds = charlm.CharWindows("abcab ba", tok, context=3)
    assert ds.unknown == 1 and len(ds) == 2 and ds.ids.tolist() == tok.encode("abcab ba")
    with pytest.raises(IndexError):
        ds[2]


# --- the catalog --------------------------------------------------------------------------------


def test_catalog_lists_the_text_datasets_with_their_tasks_and_facts():
    expected = {
        "sentiment": ("sequence-classification", "movie-reviews"),
        "turkish-pos": ("token-classification", "pos"),
        "kjv": ("causal-lm", None),
    }
    assert set(expected) <= set(list_datasets())
    for name, (task, alias) in expected.items():
        entry = get_dataset(name)
        assert entry.task == task
        if alias:
            assert get_dataset(alias) is entry
        assert entry.splits == SPLITS and entry.train_split == "train"
        assert (entry.val_split, entry.test_split) == ("val", "test")
        facts = {k: getattr(entry.info, k) for k in TASK_FACTS[task]}
        assert all(v is not None for v in facts.values()), facts
    assert get_dataset("sentiment").info.head == "sequence"
    assert get_dataset("turkish-pos").info.head == "token"
    assert get_dataset("turkish-pos").info.num_labels == len(get_dataset("pos").classes) == 14
    assert TASK_FACTS["causal-lm"] == ("vocab_size",)
    assert TASK_FACTS["masked-lm"] == ("vocab_size", "pad_token_id", "head")


def test_catalog_recipes_name_real_presets_and_train_fields():
    from tfam.models import list_models
    from tfam.training import TrainConfig

    for name in ("sentiment", "turkish-pos", "kjv"):
        recipe = get_dataset(name).recipe
        assert recipe.preset in list_models()
        TrainConfig(**recipe.train)  # every value is a valid field


@needs_vader
@needs_treebank
def test_catalog_facts_equal_the_loaded_datasets(sentiment_splits, pos_splits):
    for name, splits in (("sentiment", sentiment_splits), ("turkish-pos", pos_splits)):
        info = get_dataset(name).info
        train = splits["train"]
        assert (info.vocab_size, info.pad_token_id) == (train.vocab_size, train.pad_token_id)
        assert info.num_labels == train.num_labels and info.classes == train.classes
        sizes = (info.train_size, info.val_size, info.test_size)
        assert sizes == tuple(len(splits[s]) for s in SPLITS)
