"""A user's own data from Python: a Dataset, a DataLoader or a (train, test) pair handed to benchmark()."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import benchlib
from benchlib.data.datasets import load_dataset
from benchlib.errors import ConfigError, DataPathError
from benchlib.spec.settings import settings_from_mapping

FAST = {"latency_repeats": 5, "warmup_steps": 1, "infer_warmup_batches": 1, "epochs": 1}


def _net(classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, classes))


def _images(n: int, size: int = 16, classes: int = 4, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, size, size, generator=gen), torch.arange(n) % classes)


class Labelled(Dataset):
    """A torchvision-like data set: it states its classes."""

    classes = ["cat", "dog", "fox"]

    def __init__(self, n: int):
        self.data = _images(n, classes=3)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        image, label = self.data[i]
        return image, int(label)


def test_a_dataset_is_trained_on_with_a_seeded_fifth_held_out(tmp_path):
    df = benchlib.benchmark(_net(), name="net", data=_images(60), hardware="cpu", batch_sizes=[8], steps=2,
                            results_dir=tmp_path, settings=FAST, progress=None)
    (row,) = df.to_dict("records")
    assert row["status"] == "ok", row["error"]
    assert row["dataset"] == "python:TensorDataset" and row["image_size"] == 16 and row["num_classes"] == 4
    assert row["test_samples"] == 12, "a fifth of 60 held out for evaluation"
    assert row["train_samples_per_s"] > 0 and 0 <= row["test_accuracy"] <= 1 and not row["synthetic"]


def test_a_dataloader_gives_its_batch_size_and_a_pair_its_test_set_and_classes(tmp_path):
    loader = DataLoader(_images(48), batch_size=6, num_workers=0)
    df = benchlib.benchmark(_net(), name="net", data=loader, data_name="mine", hardware="cpu", steps=2,
                            results_dir=tmp_path, settings=FAST, progress=None)
    assert list(df["batch_size"]) == [6] and set(df["dataset"]) == {"python:mine"} and (df["status"] == "ok").all()
    pair = benchlib.benchmark(_net(3), name="net3", data=(Labelled(40), Labelled(10)), hardware="cpu",
                              batch_sizes=[8], steps=2, results_dir=tmp_path, settings=FAST, progress=None)
    assert pair["test_samples"].tolist() == [10] and pair["num_classes"].tolist() == [3], "the classes it states"
    with pytest.raises(ConfigError, match="returns 4 logits; data set 'python:Labelled' has 3 classes"):
        benchlib.benchmark(_net(4), name="net", data=Labelled(40), hardware="cpu", results_dir=tmp_path,
                           progress=None)


class Dicts(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return {"image": torch.zeros(3, 8, 8), "label": 0}


@pytest.mark.parametrize("data, words", [
    (Dicts(), "data: sample 0 is dict; allowed: samples (image tensor [3, H, H], integer label)"),
    (TensorDataset(torch.zeros(8, 3, 8, 12), torch.zeros(8, dtype=torch.long)), "sample 0 is (3, 8, 12)"),
    (TensorDataset(torch.zeros(8, 1, 8, 8), torch.zeros(8, dtype=torch.long)), "sample 0 is (1, 8, 8)"),
    ([1, 2, 3], "sample 0 is int"),
    (42, "data: int; allowed: a data set name, a torch Dataset"),
])
def test_data_training_cannot_take_is_refused_in_one_line(tmp_path, data, words):
    with pytest.raises(ConfigError) as exc:
        benchlib.benchmark(_net(), name="net", data=data, hardware="cpu", results_dir=tmp_path, progress=None)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "rows").exists(), "nothing recorded"


def test_the_image_size_and_batch_sizes_must_fit_the_data(tmp_path):
    with pytest.raises(ConfigError, match="image_size is 32; data 'python:TensorDataset' holds images of 16 px"):
        benchlib.benchmark(_net(), name="net", data=_images(20), image_size=32, results_dir=tmp_path, progress=None)
    with pytest.raises(ConfigError, match="larger than the 16 training samples of 'python:TensorDataset'"):
        benchlib.benchmark(_net(), name="net", data=_images(20), batch_sizes=[32], hardware="cpu",
                           results_dir=tmp_path, progress=None)


def test_data_not_registered_in_this_process_is_named_in_one_line():
    settings = settings_from_mapping({"dataset": "python:elsewhere"}, "s.yaml")  # a valid form ...
    with pytest.raises(DataPathError, match="'python:elsewhere' is not registered in this process"):
        load_dataset(settings.dataset, None, 16)  # ... that only this process's benchmark() can fill
    with pytest.raises(ConfigError, match=r"allowed: one of: digits, .*, or python:NAME"):
        settings_from_mapping({"dataset": "python:"}, "s.yaml")
