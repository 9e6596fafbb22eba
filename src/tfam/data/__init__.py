"""Image data that works offline: scikit-learn's digits, Fashion-MNIST, or your own arrays.

from tfam.data import load_dataset, default_augment
train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
aug, g = default_augment("digits"), torch.Generator().manual_seed(0)
for x, y in train.batches(64, shuffle=True, generator=g, augment=aug):
    ...  # x (64, 1, 8, 8) float32 normalised with train's mean/std, y (64,) int64
"""

from tfam.data.augment import BatchAugment, default_augment
from tfam.data.idx import IDXFormatError, read_idx, write_idx
from tfam.data.images import (
    DATASETS,
    FASHION_MNIST_DIRS,
    DatasetInfo,
    ImageDataset,
    clear_cache,
    compute_mean_std,
    dataset_info,
    find_fashion_mnist,
    load_dataset,
    load_digits,
    load_fashion_mnist,
)

__all__ = [
    "DATASETS",
    "FASHION_MNIST_DIRS",
    "BatchAugment",
    "DatasetInfo",
    "IDXFormatError",
    "ImageDataset",
    "clear_cache",
    "compute_mean_std",
    "dataset_info",
    "default_augment",
    "find_fashion_mnist",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "read_idx",
    "write_idx",
]
