"""Post-training int8 quantization for CPU inference, always on a copy of the trained float model.

Static int8 uses torch.ao's FX graph mode (``prepare_fx`` / ``convert_fx`` with the "x86" qconfig
mapping): every convolution (with its BatchNorm folded and ReLU fused) becomes an int8 oneDNN/FBGEMM
kernel, calibrated on real training batches. It was chosen over the PT2E flow (torchao's
``X86InductorQuantizer`` + ``torch.compile``, torch 2.14 / torchao 0.18) because, measured interleaved
on the same weights on an AVX-512 VNNI CPU, it ran 1.6-6x faster than PT2E at 32 and 128 px
(squeezenet1_1, mobilenet_v2), needs no compile step (PT2E took 25-80 s per model) and no extra
package, and works for all five models (torchao 0.18's quantizer raises on torchvision's ResNets,
whose blocks call one ReLU module twice). torch 2.14 warns that the quantized dtypes this flow uses
are deprecated: PT2E is the migration path once it handles the ResNets.

Dynamic quantization only covers ``nn.Linear`` and so leaves a CNN's convolutions in fp32; it is
kept because the seed paper used it.
"""
from __future__ import annotations

import copy
import io
import itertools
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ..errors import SkippedConfiguration, one_line

_ENGINES = ("x86", "fbgemm", "qnnpack")


def quantized_engine() -> str:
    """Select the best quantized CPU engine this torch build has (x86 > fbgemm > qnnpack) and return it."""
    supported = torch.backends.quantized.supported_engines
    for engine in _ENGINES:
        if engine in supported:
            torch.backends.quantized.engine = engine
            return engine
    raise RuntimeError(f"this torch build has no quantized CPU engine (supported: {', '.join(supported)})")


def _float_copy(model: nn.Module) -> nn.Module:
    """An eval-mode CPU copy: quantization never touches the caller's trained model."""
    return copy.deepcopy(model).cpu().eval()


def unserved_copy(model: nn.Module) -> nn.Module:
    """A copy of a quantized model whose kernels have seen no input yet, to time one batch shape on.

    The x86 engine's oneDNN convolutions keep one cached primitive per packed weight, for the first input
    shape they run; any other shape takes a slower path. A model first called at the evaluation batch and
    then timed at batch 1 measured int8 resnet18 at 1.0x fp32 (5.8 ms) where a model served at batch 1
    runs at 2.3x (2.5 ms, this project's 2-core VM). A copy repacks the weights, so its first call decides.
    """
    return copy.deepcopy(model)


def quantize_dynamic_linear(model: nn.Module) -> nn.Module:
    """int8 weights for every ``nn.Linear`` (activations quantized on the fly); convolutions stay fp32."""
    quantized_engine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(_float_copy(model), {nn.Linear}, dtype=torch.qint8)


@torch.no_grad()
def quantize_static_int8(model: nn.Module, calibration_batches: Iterable[torch.Tensor],
                         example_input: torch.Tensor) -> nn.Module:
    """Post-training static int8 of convolutions and linears (FX graph mode), calibrated on ``calibration_batches``.

    The observers record activation ranges over the given batches (real training images, not random
    ones, or the scales are wrong); ``example_input`` only fixes the traced shapes.
    """
    engine = quantized_engine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="Please use quant_min and quant_max")  # torch's own default qconfig
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

        try:
            prepared = prepare_fx(_float_copy(model), get_default_qconfig_mapping(engine), (example_input.cpu(),))
        except Exception as exc:  # torch.fx cannot trace data-dependent control flow (a user's model may have it)
            raise SkippedConfiguration(f"static int8 needs a model torch.fx can trace; {type(model).__name__} cannot "
                                       f"be traced ({one_line(exc)})") from exc
        seen = 0
        for batch in calibration_batches:
            prepared(batch.cpu())
            seen += 1
        if seen == 0:
            raise ValueError("static int8 quantization needs at least one calibration batch")
        return convert_fx(prepared)


CALIBRATION_BATCHES = 8  # training batches that set a static int8 model's activation ranges


def quantized_copy(model: nn.Module, quantization: str, train_batches: Iterable[Any]) -> nn.Module:
    """The int8 copy of a trained model that a quantized variant serves: ``static_int8`` calibrated on the first
    ``CALIBRATION_BATCHES`` training batches (real images: the activation ranges must be real), or
    ``dynamic`` int8 linears. The caller's model is left as it was."""
    if quantization == "static_int8":
        calibration = [x for x, _ in itertools.islice(iter(train_batches), CALIBRATION_BATCHES)]
        if not calibration:
            raise ValueError("static int8 quantization needs at least one calibration batch")
        return quantize_static_int8(model, calibration, calibration[0])
    if quantization == "dynamic":
        return quantize_dynamic_linear(model)
    raise ValueError(f"quantized_copy: quantization {quantization!r}; allowed: static_int8, dynamic")


def _is_quantized_module(module: nn.Module) -> bool:
    cls = type(module)
    return (cls.__module__.startswith(("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized"))
            and not cls.__name__.endswith("PackedParams"))  # the weight holder inside a quantized Linear


def _graph_counts(model: nn.Module) -> dict[str, int]:
    """Conv and linear call_function nodes of an exported (PT2E) graph: int8 when the weight is dequantized."""
    counts = {"quantized_conv": 0, "quantized_linear": 0, "float_conv": 0, "float_linear": 0}
    graph = getattr(model, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return counts
    for node in graph.nodes:
        op = str(node.target)
        kind = "conv" if "conv" in op else "linear" if "linear" in op else None
        if node.op != "call_function" or kind is None or len(node.args) < 2:
            continue
        weight = node.args[1]
        dequantized = isinstance(weight, torch.fx.Node) and "dequantize" in str(weight.target)
        counts[f"{'quantized' if dequantized else 'float'}_{kind}"] += 1
    return counts


def count_quantized_modules(model: nn.Module) -> dict[str, int]:
    """How many convolutions and linears run in int8 and how many stayed float.

    Counts modules: ``torch.ao.nn.(intrinsic.)quantized`` classes whose name says Conv or Linear (fused
    ConvReLU2d / ConvAdd2d / LinearReLU and dynamic Linear included) against plain ``nn.Conv*`` /
    ``nn.Linear``. A PT2E/exported graph (not a flow benchlib uses) holds its convs as graph nodes, not
    modules: there a conv/linear node counts as int8 when its weight passes through a dequantize node
    (the pattern inductor lowers to an int8 kernel), else as float.
    """
    counts = {"quantized_conv": 0, "quantized_linear": 0, "float_conv": 0, "float_linear": 0}
    for module in model.modules():
        name = type(module).__name__
        if _is_quantized_module(module):
            if "Conv" in name:
                counts["quantized_conv"] += 1
            elif "Linear" in name:
                counts["quantized_linear"] += 1
        elif isinstance(module, nn.modules.conv._ConvNd):
            counts["float_conv"] += 1
        elif isinstance(module, nn.Linear):
            counts["float_linear"] += 1
    for key, n in _graph_counts(model).items():
        counts[key] += n
    return counts


def model_size_on_disk_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``: int8 weights are saved as int8 (packed params unpacked)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes
