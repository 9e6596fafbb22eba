"""Data that works offline: a catalog of named datasets (scikit-learn's digits, Fashion-MNIST,
King James -> Reina-Valera verses, copy and reverse, movie-review sentiment, Turkish POS tags,
King James characters), your own image folders, IDX files, normalisation, batch augmentation,
image preprocessing, tokenizers (BPE, character, WordPiece) and text datasets.

from tfam.data import load_dataset, default_augment
train, val = load_dataset("digits", "fit"), load_dataset("digits", "val")  # "train" = fit + val
test = load_dataset("digits", "test")
photos = load_dataset("path/to/photos", "fit")   # one sub-folder per class
reviews = from_files("reviews.csv", family="bert")   # your text: CSV/TSV/JSONL/CoNLL-U/.txt
train = reviews.load("train")                        # the same datasets tfam train uses
aug, g = default_augment("digits"), torch.Generator().manual_seed(0)
for x, y in train.batches(64, shuffle=True, generator=g, augment=aug):
    ...  # x (64, 1, 8, 8) float32 normalised with train's mean/std, y (64,) int64
"""

from tfam.data.catalog import (
    CATALOG,
    TASK_FACTS,
    TASK_HEADS,
    DatasetEntry,
    Recipe,
    dataset_info,
    default_augment,
    folder_entry,
    from_files,
    get_dataset,
    list_datasets,
    load_dataset,
    register_dataset,
    resolve_data,
    task_facts,
)
from tfam.data.sources.charlm import (
    KJV_TEST_BOOKS,
    KJV_VAL_BOOKS,
    CharWindows,
    kjv_char_tokenizer,
    load_kjv_chars,
)
from tfam.data.sources.folder import ImageFolder, clear_folder_cache, scan_folder
from tfam.data.sources.idx import IDXFormatError, read_idx, write_idx
from tfam.data.sources.images import (
    FASHION_MNIST_DIRS,
    SPLITS,
    DatasetInfo,
    ImageDataset,
    compute_mean_std,
    find_fashion_mnist,
    holdout_split,
    load_digits,
    load_fashion_mnist,
)
from tfam.data.sources.images import clear_cache as _clear_image_cache
from tfam.data.sources.sentiment import SENTIMENT_CLASSES, SentimentDataset, load_sentiment
from tfam.data.sources.seq2seq import (
    QUICK_EVAL_SIZE,
    TEST_BOOKS,
    VAL_BOOKS,
    Seq2SeqDataset,
    book_split,
    kjv_rv_tokenizer,
    load_kjv_rv,
    load_symbol_task,
)
from tfam.data.sources.sword import VerseRef, parallel_verses, read_verses
from tfam.data.sources.treebank import (
    TREEBANK_TAGS,
    ConlluSentence,
    TaggingDataset,
    load_turkish_pos,
    read_conllu,
)
from tfam.data.text.dataset import TEXT_SPLITS, TextDatasetInfo
from tfam.data.text.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    load_tokenizer,
)

# Importing wordpiece registers its kind with load_tokenizer (so does any module using it).
from tfam.data.text.wordpiece import (
    MINILM_INSTALL_HINT,
    WordPieceTokenizer,
    minilm_dir,
    minilm_tokenizer,
)
from tfam.data.vision.augment import BatchAugment


def clear_cache() -> None:
    """Forget every array and folder scan loaded in this process."""
    _clear_image_cache()
    clear_folder_cache()


__all__ = [
    "KJV_TEST_BOOKS",
    "KJV_VAL_BOOKS",
    "MINILM_INSTALL_HINT",
    "SENTIMENT_CLASSES",
    "TREEBANK_TAGS",
    "CharWindows",
    "ConlluSentence",
    "SentimentDataset",
    "TaggingDataset",
    "WordPieceTokenizer",
    "kjv_char_tokenizer",
    "load_kjv_chars",
    "load_sentiment",
    "load_turkish_pos",
    "minilm_dir",
    "minilm_tokenizer",
    "read_conllu",
    "CATALOG",
    "FASHION_MNIST_DIRS",
    "QUICK_EVAL_SIZE",
    "SPLITS",
    "TASK_FACTS",
    "TASK_HEADS",
    "TEST_BOOKS",
    "TEXT_SPLITS",
    "VAL_BOOKS",
    "BPETokenizer",
    "BatchAugment",
    "CharTokenizer",
    "Seq2SeqDataset",
    "TextDatasetInfo",
    "Tokenizer",
    "VerseRef",
    "book_split",
    "kjv_rv_tokenizer",
    "load_kjv_rv",
    "load_symbol_task",
    "load_tokenizer",
    "parallel_verses",
    "read_verses",
    "DatasetEntry",
    "DatasetInfo",
    "IDXFormatError",
    "ImageDataset",
    "ImageFolder",
    "Recipe",
    "clear_cache",
    "task_facts",
    "compute_mean_std",
    "dataset_info",
    "default_augment",
    "find_fashion_mnist",
    "folder_entry",
    "from_files",
    "get_dataset",
    "holdout_split",
    "list_datasets",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "read_idx",
    "register_dataset",
    "resolve_data",
    "scan_folder",
    "write_idx",
]
