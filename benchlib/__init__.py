"""benchlib: profile and benchmark CNN training and inference on CPUs and GPUs with PyTorch."""
__version__ = "0.1.0"
