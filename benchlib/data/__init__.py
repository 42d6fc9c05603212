"""The data a configuration trains and evaluates on: data sets in their real on-disk formats, and loaders."""
from .datasets import DatasetSplits, check_data_path, load_dataset, num_classes_of
from .loaders import Loaders, SyntheticBatches, batches_per_epoch, build_loaders

__all__ = ["DatasetSplits", "Loaders", "SyntheticBatches", "batches_per_epoch", "build_loaders", "check_data_path",
           "load_dataset", "num_classes_of"]
