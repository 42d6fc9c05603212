"""The networks: torchvision CNNs with their heads sized, int8 quantization, and counting their work."""
from .models import build_model, count_parameters
from .quantize import count_quantized_modules, model_size_on_disk_bytes, quantize_dynamic_linear, quantize_static_int8

__all__ = ["build_model", "count_parameters", "count_quantized_modules", "model_size_on_disk_bytes",
           "quantize_dynamic_linear", "quantize_static_int8"]
