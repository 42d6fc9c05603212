"""Variants: parsing presets and knobs, what runs where, and that each knob really does what it says."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import host_load, quiet_check
from torch import nn

from benchlib.engine.knobs import (
    apply_memory_format,
    backend_flags,
    compile_model,
    compile_seconds,
    make_grad_scaler,
    precision_context,
    unsupported_reason,
)
from benchlib.engine.step import in_memory_format
from benchlib.errors import ConfigError
from benchlib.spec.knobs import Knobs
from benchlib.spec.variants import PRESETS, Variant, parse_variant
from benchlib.spec.vocab import COMPILE_MODES, MEMORY_FORMATS, PRECISIONS


def K(name: str) -> Knobs:
    """The knobs of a preset."""
    return PRESETS[name].knobs

CPU = torch.device("cpu")


def _tiny_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def _write_tuned(tmp_path, preset: str, text: str):
    (tmp_path / f"{preset}.yaml").write_text(text, encoding="utf-8")
    return tmp_path


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize("name", [n for n in PRESETS if not n.endswith("-tuned")])
def test_every_preset_parses(name):
    v = parse_variant(name, "p.yaml")
    assert v.name == name and v == PRESETS[name]
    assert (
        v.knobs.precision in PRECISIONS and v.knobs.memory_format in MEMORY_FORMATS and v.knobs.compile in COMPILE_MODES
    )


@pytest.mark.parametrize("name", ["cpu-tuned", "gpu-tuned"])
def test_tuned_presets_parse_from_their_exported_file(tmp_path, name):
    _write_tuned(tmp_path, name, "precision: fp32\n")
    assert parse_variant(name, "p.yaml", tuned_params_dir=tmp_path).name == name


def test_presets_cover_the_issue():
    assert K("cpu-quantized").quantization == "static_int8"
    assert K("gpu-amp").precision == "amp_fp16" and K("gpu-amp").cudnn_benchmark
    assert K("gpu-bf16").precision == "amp_bf16"
    assert K("gpu-channels-last").memory_format == "channels_last"
    assert K("cpu-compiled").compile == K("gpu-compiled").compile == "default"


def test_unknown_preset_names_the_key_and_lists_the_presets():
    with pytest.raises(ConfigError) as exc:
        parse_variant("cpu-defualt", "p.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and "p.yaml" in msg and "'variant'" in msg and "did you mean 'cpu-default'" in msg
    assert all(name in msg for name in PRESETS)


def test_unknown_knob_names_the_key_and_lists_the_allowed_keys():
    with pytest.raises(ConfigError) as exc:
        parse_variant({"name": "x", "precison": "fp32"}, "p.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and "'precison'" in msg and "did you mean 'precision'" in msg
    for key in ("precision", "memory_format", "compile", "quantization", "tf32", "lr", "batch_size"):
        assert key in msg


@pytest.mark.parametrize("spec, key, allowed", [
    ({"name": "x", "precision": "fp8"}, "precision", "fp32, amp_fp16, amp_bf16"),
    ({"name": "x", "compile": "fast"}, "compile", "max-autotune-no-cudagraphs"),
    ({"name": "x", "quantization": "int4"}, "quantization", "none, dynamic, static_int8"),
    ({"name": "x", "memory_format": "nhwc"}, "memory_format", "nchw, channels_last"),
    ({"name": "x", "tf32": "yes"}, "tf32", "true or false"),
    ({"name": "x", "threads": 0}, "threads", ">= 1"),
    ({"name": "x y"}, "name", "letters, digits"),
    ({"precision": "fp32"}, "name", "letters, digits"),
    ({"name": "x", "lr": -1}, "lr", "> 0.0"),
    ({"name": "x", "optimizer": "lion"}, "optimizer", "sgd, adam"),
])
def test_bad_knob_values_are_refused_with_the_allowed_values(spec, key, allowed):
    with pytest.raises(ConfigError) as exc:
        parse_variant(spec, "p.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and f"'{key}'" in msg and allowed in msg


def test_a_mapping_spec_builds_a_variant():
    v = parse_variant({"name": "cl-bf16", "precision": "amp_bf16", "memory_format": "channels_last",
                       "threads": 2, "lr": 0.05}, "p.yaml")
    assert v == Variant("cl-bf16", Knobs(precision="amp_bf16", memory_format="channels_last", threads=2))
    assert v.overrides == {"lr": 0.05}
    assert v.trains


def test_quantized_variants_do_not_train():
    assert not PRESETS["cpu-quantized"].trains and PRESETS["cpu-default"].trains


def test_tuned_without_an_export_points_at_benchlib_tune(tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_variant("cpu-tuned", "p.yaml", tuned_params_dir=tmp_path)
    msg = str(exc.value)
    assert "no tuning study has exported cpu-tuned yet" in msg and "benchlib tune PARAMS.yaml" in msg
    assert str(tmp_path / "cpu-tuned.yaml") in msg


def test_tuned_file_loads_knobs_and_run_setting_overrides(tmp_path):
    _write_tuned(tmp_path, "cpu-tuned", "precision: amp_bf16\nmemory_format: channels_last\nthreads: 2\n"
                                       "batch_size: 128\nlr: 0.02\noptimizer: adam\nweight_decay: 0.0001\n")
    v = parse_variant("cpu-tuned", "p.yaml", tuned_params_dir=tmp_path)
    assert (v.name, v.knobs.precision, v.knobs.memory_format, v.knobs.threads) == (
        "cpu-tuned",
        "amp_bf16",
        "channels_last",
        2,
    )
    assert v.overrides == {"batch_size": 128, "lr": 0.02, "optimizer": "adam", "weight_decay": 0.0001}


def test_tuned_file_with_an_unknown_key_is_refused(tmp_path):
    _write_tuned(tmp_path, "gpu-tuned", "precision: amp_fp16\nbatchsize: 64\n")
    with pytest.raises(
        ConfigError, match=r"gpu-tuned.yaml: unknown variant key 'batchsize' \(did you mean 'batch_size'\?\)"
    ):
        parse_variant("gpu-tuned", "p.yaml", tuned_params_dir=tmp_path)


# ---------------------------------------------------------------- what runs where


def test_fp16_training_on_cpu_is_refused_with_the_bf16_hint():
    reason = unsupported_reason(K("gpu-amp"), "cpu", training=True)
    assert reason == "fp16 autocast training is not supported on CPU; use amp_bf16"


@pytest.mark.parametrize("forced", ["off", "on", None])
def test_bf16_on_a_cpu_is_refused_only_where_its_probe_finds_no_bf16_kernels(monkeypatch, forced):
    """BENCHLIB_CPU_BF16 fakes the probe either way, so both answers are checked on every CPU; unset it is
    oneDNN's answer."""
    from benchlib.env.devices import bf16_supported, cpu_model_name

    monkeypatch.delenv("BENCHLIB_CPU_BF16", raising=False)
    onednn = bf16_supported("cpu")
    if forced is not None:
        monkeypatch.setenv("BENCHLIB_CPU_BF16", forced)
    has = {"off": False, "on": True}.get(forced, onednn)
    assert bf16_supported("cpu") is has
    reason = unsupported_reason(Knobs(precision="amp_bf16"), "cpu", training=True)
    assert reason == (None if has else f"this CPU ({cpu_model_name()}) has no bf16 kernels (oneDNN reports bf16 "
                      "unsupported); use fp32")
    assert unsupported_reason(Knobs(precision="amp_bf16"), "cpu", training=False) == reason


def test_a_value_of_the_bf16_override_other_than_on_or_off_is_refused_in_one_line(monkeypatch):
    from benchlib.env.devices import bf16_supported
    from benchlib.errors import ConfigError

    monkeypatch.setenv("BENCHLIB_CPU_BF16", "maybe")
    with pytest.raises(ConfigError, match="BENCHLIB_CPU_BF16=maybe; allowed: off, on, or unset"):
        bf16_supported("cpu")


def test_quantization_on_cuda_is_refused():
    for device_type in ("cuda", "cuda:1", "mps"):
        assert unsupported_reason(K("cpu-quantized"), device_type, training=False) == \
            "quantized inference runs on CPU only"


def test_quantized_training_is_refused():
    assert "inference-only" in unsupported_reason(K("cpu-quantized"), "cpu", training=True)


def test_tf32_on_cpu_is_refused():
    assert "tf32 is a CUDA knob" in unsupported_reason(Knobs(tf32=True), "cpu", training=True)
    assert unsupported_reason(Knobs(tf32=True), "cuda", training=True) is None


def test_cpu_default_and_quantized_inference_run_on_cpu():
    assert unsupported_reason(K("cpu-default"), "cpu", training=True) is None
    assert unsupported_reason(K("cpu-default"), "cpu", training=False) is None
    assert unsupported_reason(K("cpu-quantized"), "cpu", training=False) is None


def test_compile_on_mps_is_refused_and_channels_last_runs_everywhere():
    assert "MPS" in unsupported_reason(K("gpu-compiled"), "mps", training=True)
    for device_type in ("cpu", "cuda", "mps"):
        assert unsupported_reason(Knobs(memory_format="channels_last"), device_type, training=True) is None
    for device_type in ("cuda", "mps"):  # the GPU preset, with its CUDA backend settings, runs on both GPUs
        assert unsupported_reason(K("gpu-channels-last"), device_type, training=True) is None


def test_compile_on_cpu_without_a_cxx_compiler_is_refused(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-for-benchlib")
    assert "C++ compiler" in unsupported_reason(K("cpu-compiled"), "cpu", training=True)


# ---------------------------------------------------------------- applying the knobs


def test_bf16_autocast_makes_a_conv_output_bfloat16():
    conv, x = nn.Conv2d(3, 4, 3), torch.randn(2, 3, 8, 8)
    with precision_context(K("gpu-bf16"), CPU):
        assert conv(x).dtype == torch.bfloat16
    with precision_context(K("cpu-default"), CPU):
        assert conv(x).dtype == torch.float32


def test_grad_scaler_only_for_fp16_on_cuda():
    assert make_grad_scaler(K("gpu-amp"), CPU) is None
    assert make_grad_scaler(K("gpu-bf16"), torch.device("cuda")) is None
    assert make_grad_scaler(K("gpu-default"), torch.device("cuda")) is None


def test_backend_flags_set_then_restore():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    with backend_flags(Knobs(tf32=True, cudnn_benchmark=True)):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.benchmark
    with backend_flags(Knobs()):
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark) == before


def test_backend_flags_restore_after_an_error():
    before = torch.backends.cudnn.benchmark
    with pytest.raises(RuntimeError):
        with backend_flags(Knobs(cudnn_benchmark=not before)):
            raise RuntimeError("boom")
    assert torch.backends.cudnn.benchmark == before


def test_channels_last_moves_weights_and_input():
    model, x = _tiny_net(), torch.randn(2, 3, 8, 8)
    model2, x2 = apply_memory_format(model, K("gpu-channels-last")), in_memory_format(x, K("gpu-channels-last"))
    assert model2[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert not model2[0].weight.is_contiguous()
    assert x2.is_contiguous(memory_format=torch.channels_last) and not x2.is_contiguous()
    assert torch.allclose(model2.eval()(x2), model2(x), atol=1e-6)
    same_model, same_x = apply_memory_format(_tiny_net(), K("cpu-default")), in_memory_format(x, K("cpu-default"))
    assert same_x is x and same_model[0].weight.is_contiguous()


def test_compile_off_returns_the_same_model():
    model = _tiny_net()
    assert compile_model(model, K("cpu-default")) == (model, 0.0)


def test_compile_seconds_counts_only_time_beyond_a_steady_step():
    assert compile_seconds([5.0, 0.3, 0.1], 0.1) == pytest.approx(5.1)
    assert compile_seconds([], 0.1) == 0.0


@pytest.mark.skipif(unsupported_reason(K("cpu-compiled"), "cpu", training=False) is not None,
                    reason="no C++ compiler for inductor")
def test_compiled_model_matches_eager_on_cpu():
    torch.manual_seed(0)
    model, x = _tiny_net().eval(), torch.randn(2, 3, 8, 8)
    with host_load() as window:
        compiled, wrap_s = compile_model(model, K("cpu-compiled"))
    assert compiled is not model and 0.0 <= wrap_s
    with quiet_check(window):  # wrapping compiles nothing; on a busy host importing dynamo alone took 6 s
        assert wrap_s < 5.0, wrap_s
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-4)


# ---------------------------------------------------------------- CUDA (skipped without a GPU)


def _cuda_train_losses(v: Knobs, steps: int = 4) -> list[float]:
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = _tiny_net().to(device)
    x, y = torch.randn(16, 3, 16, 16, device=device), torch.randint(0, 4, (16,), device=device)
    model, x = apply_memory_format(model, v), in_memory_format(x, v)
    model, _ = compile_model(model, v)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = make_grad_scaler(v, device)
    losses = []
    with backend_flags(v):
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with precision_context(v, device):
                loss = nn.functional.cross_entropy(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            losses.append(float(loss))
    return losses


@pytest.mark.gpu
def test_amp_fp16_training_with_grad_scaler_on_cuda():
    v = K("gpu-amp")
    assert isinstance(make_grad_scaler(v, torch.device("cuda")), torch.amp.GradScaler)
    assert all(math.isfinite(loss) for loss in _cuda_train_losses(v))


@pytest.mark.gpu
def test_bf16_autocast_on_cuda():
    v = K("gpu-bf16")
    if unsupported_reason(v, "cuda", training=True):
        pytest.skip(unsupported_reason(v, "cuda", training=True))
    conv = nn.Conv2d(3, 4, 3).cuda()
    with precision_context(v, torch.device("cuda")):
        assert conv(torch.randn(2, 3, 8, 8, device="cuda")).dtype == torch.bfloat16
    assert all(math.isfinite(loss) for loss in _cuda_train_losses(v))


@pytest.mark.gpu
def test_channels_last_training_on_cuda():
    assert all(math.isfinite(loss) for loss in _cuda_train_losses(K("gpu-channels-last")))


@pytest.mark.gpu
def test_compile_on_cuda_matches_eager():
    v = K("gpu-compiled")
    if unsupported_reason(v, "cuda", training=True):
        pytest.skip(unsupported_reason(v, "cuda", training=True))
    model, x = _tiny_net().cuda().eval(), torch.randn(2, 3, 8, 8, device="cuda")
    compiled, _ = compile_model(model, v)
    with torch.no_grad(), backend_flags(v):
        assert torch.allclose(compiled(x), model(x), atol=1e-4)
    assert all(math.isfinite(loss) for loss in _cuda_train_losses(v))


def test_autocast_on_mps_is_skipped_with_the_reason_below_torch_2_6(monkeypatch):
    from benchlib.engine.knobs import unsupported_reason
    from benchlib.spec.knobs import Knobs

    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    reason = unsupported_reason(Knobs(precision="amp_fp16"), "mps", training=False)
    assert reason == "autocast on MPS needs torch 2.6 or newer (this is 2.5.1+cpu); use fp32"
    assert unsupported_reason(Knobs(), "mps", training=False) is None
    monkeypatch.setattr(torch, "__version__", "2.14.1")
    assert unsupported_reason(Knobs(precision="amp_fp16"), "mps", training=False) is None
