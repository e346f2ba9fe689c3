"""Quantized model folders: write one from a float model, load one back (model/weights.py).

A quantized folder is a model folder like any other (config.json, model.safetensors,
tokenizer.json, ..., manifest.json over every file, an `onnx/` export included) whose
config.json carries `"quantization": {"scheme": "int8" | "fp8" | "w4", ...}`
(`QuantSpec.to_dict`). Its safetensors hold, for each linear the spec's `modules` names
(every large linear, the LM head excepted; or, in folders written before, the decoder
layers' only), `<name>.qweight`, `<name>.scales` (and `<name>.signs` for w4) instead of `<name>.weight`;
every other tensor keeps its name, stored as `float_storage` says. Loading checks the scheme,
every tensor's name and shape (a `QuantLinear` shell per linear, loaded strictly) and the
codes' dtype, and raises `WeightsError` / `ModelConfigError` naming the folder otherwise.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.quantized import (
    CODE_DTYPES,
    QuantLinear,
    QuantSpec,
    install_shells,
    quantize_model,
)
from blockplan.model.weights import WeightsError, load_state, unique_tensors

QUANTIZATION_KEY = "quantization"
DECODER_PREFIXES = ("model.", "lm_head.")


def decoder_of(model: nn.Module) -> nn.Module:
    """The `Decoder` of a planner / Qwen model (or the model itself)."""
    return model.decoder if hasattr(model, "decoder") else model


def quantized_copy(model: nn.Module, spec: QuantSpec) -> nn.Module:
    """A copy of `model` whose linears are quantized with `spec` (the model itself is left
    as it is). A Qwen planner's copy shares nothing with it."""
    out = copy.deepcopy(model)
    quantize_model(out, spec)
    return out


def folder_tensors(model: nn.Module, spec: QuantSpec) -> dict[str, torch.Tensor]:
    """The tensors of a quantized model under its folder's names; the float ones (not codes,
    scales or signs) cast to `spec.float_storage`."""
    storage = getattr(torch, spec.float_storage)
    codes = {
        f"{name}.{buffer}"
        for name, module in _named_quant_linears(model)
        for buffer in ("qweight", "scales", "signs")
    }
    out = {}
    state = model.folder_state() if hasattr(model, "folder_state") else model.state_dict()
    for name, tensor in unique_tensors(state).items():  # a tied head once, before the cast
        if name not in codes and tensor.is_floating_point():
            tensor = tensor.to(storage)
        out[name] = tensor
    return out


def _named_quant_linears(model: nn.Module):
    """(folder name prefix, QuantLinear) of every quantized linear."""
    for name, module in model.named_modules():
        if isinstance(module, QuantLinear):
            yield name.removeprefix("decoder."), module


def float_config(raw: dict[str, Any]) -> dict[str, Any]:
    """config.json without its quantization record."""
    return {k: v for k, v in raw.items() if k != QUANTIZATION_KEY}


def load_quantized(raw: dict[str, Any], state: dict[str, torch.Tensor], where: str) -> nn.Module:
    """The model a quantized folder holds: the family's network, its quantized linears as
    `QuantLinear` shells of the recorded scheme, every tensor loaded strictly."""
    spec = QuantSpec.from_dict(raw[QUANTIZATION_KEY], f"{where}/config.json")
    plain = float_config(raw)
    model_type = plain.get("model_type")
    if model_type == "blockplan_planner":
        from blockplan.model.planner_model import PlannerModel, PlannerModelConfig

        model: nn.Module = PlannerModel(PlannerModelConfig.from_dict(plain))
    elif model_type == "qwen2_5_vl":
        from blockplan.model.qwen2_5_vl.config import QwenVLConfig
        from blockplan.model.qwen2_5_vl.model import QwenVLModel, canonical_names

        model = QwenVLModel(QwenVLConfig.from_hf_dict(plain))
        state = canonical_names(state)
    elif model_type == "qwen2":
        from blockplan.model.decoder import Decoder

        model = Decoder(DecoderConfig.from_dict(plain))
    else:
        raise ModelConfigError(
            f"{where}/config.json: model_type={model_type!r}: a quantized folder holds a "
            "blockplan_planner, qwen2_5_vl or qwen2 model"
        )
    decoder = decoder_of(model)
    install_shells(model, spec)
    prefix = "decoder." if decoder is not model else ""
    named = {(prefix + k if k.startswith(DECODER_PREFIXES) else k): v for k, v in state.items()}
    tied = decoder.config.tie_word_embeddings
    if tied:  # a tied head is stored once, as the embeddings
        named.pop(prefix + "lm_head.weight", None)
        embed = named.get(prefix + "model.embed_tokens.weight")
        if embed is None:
            raise WeightsError(f"{where}: missing tensor 'model.embed_tokens.weight'")
        named[prefix + "lm_head.weight"] = embed
    for name, _ in _named_quant_linears(model):
        check_entries(state, name, spec.scheme, where)
    load_state(model, named, where)
    if tied:
        decoder.lm_head.weight = decoder.model.embed_tokens.weight
    return model.eval()


def check_entries(state: dict[str, torch.Tensor], name: str, scheme: str, where: str) -> None:
    """Refuse a quantized linear's tensors that would load but compute garbage: codes of
    another dtype, scales not float32 or not finite and positive, rotation signs not ±1
    (names and shapes: `load_state`, strictly)."""
    codes = state.get(f"{name}.qweight")
    if codes is not None and codes.dtype != CODE_DTYPES[scheme]:
        raise WeightsError(
            f"{where}: {name}.qweight is {codes.dtype}, the scheme {scheme!r} stores "
            f"{CODE_DTYPES[scheme]}"
        )
    scales = state.get(f"{name}.scales")
    if scales is not None:
        if scales.dtype != torch.float32:
            raise WeightsError(f"{where}: {name}.scales is {scales.dtype}, not torch.float32")
        if not bool(torch.isfinite(scales).all() and (scales > 0).all()):
            raise WeightsError(f"{where}: {name}.scales holds a value not finite and > 0")
    signs = state.get(f"{name}.signs")
    if signs is not None and (
        signs.dtype != torch.int8 or not bool(((signs == 1) | (signs == -1)).all())
    ):
        raise WeightsError(f"{where}: {name}.signs must be int8 ±1")
