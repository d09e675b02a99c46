import pytest
import torch

from wviz.device import describe, get_device


def test_auto_picks_cuda_only_when_available(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "auto")
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_cpu_forced(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "CPU")
    assert get_device() == torch.device("cpu")
    assert describe(torch.device("cpu")).startswith("CPU (")


def test_cpu_label_counts_torch_threads():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)   # what the server uses on a 2-core machine (wviz.ui.process)
        assert describe(torch.device("cpu")) == "CPU (1 thread)"
        torch.set_num_threads(2)
        assert describe(torch.device("cpu")) == "CPU (2 threads)"
    finally:
        torch.set_num_threads(saved)


def test_unknown_choice_is_a_plain_error(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "tpu")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU, so cuda is a valid choice")
def test_cuda_without_gpu_is_a_plain_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        get_device("cuda")
