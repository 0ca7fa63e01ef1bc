#!/usr/bin/env python3
"""Writes a randomly initialised Hugging Face checkpoint (config.json + safetensors).

Baton's checkpoint loader and its parity check against transformers need real
checkpoints of real models' shapes, but the GPU machines have no internet, so
no weights can be downloaded there. A random model of the same architecture and
shape exercises the same code paths (layouts, GQA, RoPE scaling, tied heads,
QKV biases, shards) and costs the same per step, so it serves both the parity
check (scripts/checkpoints/parity.py) and the benchmark peers
(scripts/peers/pytorch_peers.py).

    scripts/checkpoints/make_checkpoint.py --preset tiny-llama3 --out /tmp/ck/tiny-llama3
    scripts/checkpoints/make_checkpoint.py --preset llama-3.2-1b --out /tmp/ck/l1b --device cuda
    scripts/checkpoints/make_checkpoint.py --preset llama-3.2-1b --layers 4 --max-shard-size 200MB --out DIR
    scripts/checkpoints/make_checkpoint.py --config my/config.json --out DIR
    scripts/checkpoints/make_checkpoint.py --list

Random models have near-uniform logits: every logit is a sum of ~hidden_size
random products, so over a vocabulary of 10^4-10^5 entries the top two logits
of a position are often within a percent of each other. Greedy decoding of such
a model is therefore decided by near-ties far more often than a trained model's,
and two correct implementations that round differently (bf16 vs fp32, another
summation order) can pick different tokens. parity.py counts such positions as
near-ties instead of mismatches; see its header for the tolerances.

Initialisation is transformers' own (normal(0, initializer_range) for every
Linear and Embedding) with two changes by default, because transformers
initialises RMSNorm weights to exactly 1 and biases to exactly 0, and a loader
that dropped norm weights or QKV biases would then still pass every parity
check: norm weights are drawn from 1 + N(0, --norm-std) and biases from
N(0, --bias-std). --transformers-init keeps transformers' values exactly.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any

# Each real preset copies the published config.json of the model named in
# `source` (values as published on the Hugging Face Hub; checked from memory of
# those files, not downloaded: the machines have no internet). Keys are
# transformers' legacy names (rope_theta / rope_scaling / torch_dtype), as in
# the published files; transformers 5 converts them to rope_parameters.
# Tiny presets keep each architecture's distinguishing features with 2 layers,
# hidden 256 and a vocabulary of 4096-8192 (multiples of 8 everywhere, as the
# real models have), so a CPU can run them in seconds.


@dataclass(frozen=True)
class Preset:
    """A named model shape: the config.json keys and the checkpoint dtype."""

    name: str
    source: str
    config: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def dtype(self) -> str:
        return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[self.config["torch_dtype"]]


LLAMA3_ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# Tiny presets use initializer_range 1/sqrt(hidden) (SmolLM2-135M's own choice:
# 1/sqrt(576)). With transformers' usual 0.02 at hidden 256, attention scores
# have std 0.02^2 x 256 = 0.1, attention is a near-uniform average and the
# logits hardly depend on positions: on CPU, dropping llama3 RoPE scaling
# changed tiny-llama3's last logits by 2.2% of max|logit|, inside the bf16
# parity bound, so a RoPE bug would pass. At 1/sqrt(hidden) the score std is 1.
TINY_INIT = 1.0 / 256**0.5

LLAMA_3_2_1B: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "rope_theta": 500000.0,
    "rope_scaling": dict(LLAMA3_ROPE_SCALING),
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "initializer_range": 0.02,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("llama-3.2-1b", "meta-llama/Llama-3.2-1B config.json", LLAMA_3_2_1B),
        # The size people serve: untied 128k-vocabulary LM head, head_dim 128, llama3 RoPE at factor 8.
        Preset(
            "llama-3.1-8b",
            "meta-llama/Llama-3.1-8B config.json",
            {**LLAMA_3_2_1B, "num_hidden_layers": 32, "hidden_size": 4096, "head_dim": 128,
             "intermediate_size": 14336, "tie_word_embeddings": False,
             "rope_scaling": dict(LLAMA3_ROPE_SCALING, factor=8.0)},
        ),
        Preset(
            "smollm2-135m",
            "HuggingFaceTB/SmolLM2-135M config.json",
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 30,
                "hidden_size": 576,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "intermediate_size": 1536,
                "vocab_size": 49152,
                "tie_word_embeddings": True,
                "rope_theta": 100000.0,
                "rope_scaling": None,
                "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-5,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": 0.041666666666666664,
                "bos_token_id": 0,
                "eos_token_id": 0,
                "torch_dtype": "bfloat16",
            },
            "head_dim 64 (576 / 9)",
        ),
        Preset(
            "qwen2.5-0.5b",
            "Qwen/Qwen2.5-0.5B config.json",
            {
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
                "num_hidden_layers": 24,
                "hidden_size": 896,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "intermediate_size": 4864,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
                "rope_theta": 1000000.0,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6,
                "hidden_act": "silu",
                "use_sliding_window": False,
                "sliding_window": 32768,
                "max_window_layers": 24,
                "initializer_range": 0.02,
                "bos_token_id": 151643,
                "eos_token_id": 151643,
                "torch_dtype": "bfloat16",
            },
            "Qwen2 always has q/k/v biases; head_dim 64 (896 / 14)",
        ),
        Preset(
            "tinyllama-1.1b",
            "TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json",
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 22,
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
                "intermediate_size": 5632,
                "vocab_size": 32000,
                "tie_word_embeddings": False,
                "rope_theta": 10000.0,
                "rope_scaling": None,
                "max_position_embeddings": 2048,
                "rms_norm_eps": 1e-5,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": 0.02,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "bfloat16",
            },
            "head_dim 64 (2048 / 32)",
        ),
        Preset(
            "mistral-7b",
            "mistralai/Mistral-7B-v0.3 config.json",
            {
                "model_type": "mistral",
                "architectures": ["MistralForCausalLM"],
                "num_hidden_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "intermediate_size": 14336,
                "vocab_size": 32768,
                "tie_word_embeddings": False,
                "rope_theta": 1000000.0,
                "sliding_window": None,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-5,
                "hidden_act": "silu",
                "initializer_range": 0.02,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "bfloat16",
            },
            "v0.3: vocabulary 32768, no sliding window; 14.5 GB in bf16",
        ),
        Preset(
            "tiny-llama3",
            "test shape: Llama 3 features (llama3 RoPE scaling, tied embeddings, GQA 4:1)",
            {**LLAMA_3_2_1B, "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 1, "intermediate_size": 768, "vocab_size": 8192,
             "initializer_range": TINY_INIT, "bos_token_id": 1, "eos_token_id": 2},
        ),
        Preset(
            "tiny-qwen2",
            "test shape: Qwen2 features (q/k/v biases, tied embeddings, rms_norm_eps 1e-6, GQA 2:1)",
            {
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 704,
                "vocab_size": 6144,
                "tie_word_embeddings": True,
                "rope_theta": 1000000.0,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6,
                "hidden_act": "silu",
                "use_sliding_window": False,
                "sliding_window": 32768,
                "max_window_layers": 2,
                "initializer_range": TINY_INIT,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "bfloat16",
            },
        ),
        Preset(
            "tiny-mistral",
            "test shape: Mistral features (head_dim 128, untied head, GQA 2:1, no sliding window)",
            {
                "model_type": "mistral",
                "architectures": ["MistralForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 256,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 128,
                "intermediate_size": 896,
                "vocab_size": 4096,
                "tie_word_embeddings": False,
                "rope_theta": 1000000.0,
                "sliding_window": None,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-5,
                "hidden_act": "silu",
                "initializer_range": TINY_INIT,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "bfloat16",
            },
        ),
        Preset(
            "tiny-linear-rope",
            "test shape: Llama with linear RoPE scaling (factor 4), untied head, GQA 4:1, fp16",
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 256,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "intermediate_size": 688,
                "vocab_size": 5120,
                "tie_word_embeddings": False,
                "rope_theta": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-5,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": TINY_INIT,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "float16",
            },
            "the one fp16 preset, so that both checkpoint dtypes are covered",
        ),
    ]
}
# Vocabularies that are not a multiple of 8 (GPT-2's 50257 untied, 15001 tied): Baton pads them at load.
for _name, _base, _vocab, _tied in (("tiny-llama3-vocab50257", "tiny-llama3", 50257, False),
                                    ("tiny-qwen2-vocab15001", "tiny-qwen2", 15001, True)):
    PRESETS[_name] = Preset(_name, f"test shape: {_base} with vocab_size {_vocab} ({'tied' if _tied else 'untied'})",
                            {**PRESETS[_base].config, "vocab_size": _vocab, "tie_word_embeddings": _tied})

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
META_FILE = "baton_checkpoint.json"  # how this directory was made, so reuse can be checked


class CheckpointError(RuntimeError):
    """A request that cannot produce a checkpoint; the message says what to change."""


def load_config_dict(preset: str | None, config_file: str | None) -> tuple[dict[str, Any], str]:
    """The config.json keys of a preset or of a user's file, and where they came from."""
    if (preset is None) == (config_file is None):
        raise CheckpointError("give exactly one of --preset NAME or --config FILE (--list shows the presets)")
    if preset is not None:
        if preset not in PRESETS:
            raise CheckpointError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        return json.loads(json.dumps(PRESETS[preset].config)), f"preset {preset} ({PRESETS[preset].source})"
    path = pathlib.Path(config_file)
    if not path.is_file():
        raise CheckpointError(f"--config {config_file}: no such file")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"--config {config_file} is not valid JSON: {error}") from error
    if "model_type" not in config:
        raise CheckpointError(f"--config {config_file} has no \"model_type\" (e.g. \"llama\", \"qwen2\", \"mistral\")")
    return config, f"config file {path}"


def apply_overrides(config: dict[str, Any], layers: int | None, dtype: str | None) -> dict[str, Any]:
    """Applies --layers and --dtype, keeping the keys that depend on the layer count consistent."""
    config = dict(config)
    if layers is not None:
        if layers < 1:
            raise CheckpointError(f"--layers {layers}: must be at least 1")
        config["num_hidden_layers"] = layers
        # Per-layer lists (Qwen2's layer_types) must have one entry per layer or
        # transformers refuses the config; keep the first `layers` entries.
        if isinstance(config.get("layer_types"), list):
            config["layer_types"] = config["layer_types"][:layers]
        if "max_window_layers" in config:
            config["max_window_layers"] = min(config["max_window_layers"], layers)
    if dtype is not None:
        config["torch_dtype"] = DTYPES[dtype]
    config.setdefault("torch_dtype", "bfloat16")
    return config


def dtype_name(config: dict[str, Any]) -> str:
    """bf16 / fp16 / fp32 from config.json's torch_dtype or dtype key."""
    value = config.get("torch_dtype", config.get("dtype", "bfloat16"))
    for short, long in DTYPES.items():
        if value in (short, long):
            return short
    raise CheckpointError(f"unsupported dtype {value!r} in the config (use bfloat16, float16 or float32)")


def _perturb(model: Any, norm_std: float, bias_std: float, init_std: float | None) -> None:
    """Draws what transformers leaves constant, so that a loader that drops it fails parity."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if init_std is not None and name.endswith(".weight") and param.dim() == 2:
                param.normal_(0.0, init_std)
            elif name.endswith("norm.weight") and norm_std > 0:
                param.copy_(1.0 + norm_std * torch.randn_like(param, dtype=torch.float32))
            elif name.endswith(".bias") and bias_std > 0:
                param.copy_(bias_std * torch.randn_like(param, dtype=torch.float32))


def _add_legacy_keys(out: pathlib.Path, config: dict[str, Any]) -> None:
    """Adds the Hub's legacy keys beside transformers 5's, so config.json reads like a real one.

    Every published checkpoint (and so every file a user gives Baton) spells RoPE as
    rope_theta + rope_scaling and the dtype as torch_dtype; transformers 5 writes
    rope_parameters and dtype instead. Writing both lets a loader be tested on the
    spelling it will meet in the wild; transformers 5 reads either.
    """
    path = out / "config.json"
    written = json.loads(path.read_text())
    rope = written.get("rope_parameters") or {}
    if "rope_theta" in rope:
        written.setdefault("rope_theta", rope["rope_theta"])
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    written.setdefault("rope_scaling", None if scaling.get("rope_type", "default") == "default" else scaling)
    written.setdefault("torch_dtype", written.get("dtype", config["torch_dtype"]))
    path.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")


def make_checkpoint(
    out: str | os.PathLike,
    *,
    preset: str | None = None,
    config_file: str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    layers: int | None = None,
    max_shard_size: str = "50GB",
    device: str = "cpu",
    init_std: float | None = None,
    norm_std: float = 0.1,
    bias_std: float | None = None,
    transformers_init: bool = False,
    reuse: bool = False,
    log: Any = print,
) -> pathlib.Path:
    """Writes the checkpoint into `out` and returns its path.

    With reuse=True an existing directory made with the same arguments is kept
    (parity.py reuses checkpoints across runs: a 1B model takes a minute to make);
    one made with different arguments is an error rather than silently replaced.
    """
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config, origin = load_config_dict(preset, config_file)
    config = apply_overrides(config, layers, dtype)
    short_dtype = dtype_name(config)
    if bias_std is None:
        bias_std = float(config.get("initializer_range", 0.02))
    if transformers_init:
        norm_std, bias_std = 0.0, 0.0
    out = pathlib.Path(out)
    meta = {
        "origin": origin,
        "config": json.loads(json.dumps(config)),  # a copy: `config` loses model_type below
        "seed": seed,
        "dtype": short_dtype,
        "init_device": device,
        "init_std": init_std,
        "norm_std": norm_std,
        "bias_std": bias_std,
        "max_shard_size": max_shard_size,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    meta_path = out / META_FILE
    if reuse and meta_path.is_file() and (out / "config.json").is_file():
        old = json.loads(meta_path.read_text())
        # Not max_shard_size: sharding does not change the weights.
        keys = ["config", "seed", "dtype", "init_std", "norm_std", "bias_std", "init_device"]
        differing = [k for k in keys if old.get(k) != meta.get(k)]
        if not differing:
            log(f"reusing {out} ({origin}, seed {seed}, made by {META_FILE})")
            return out
        raise CheckpointError(
            f"{out} holds a checkpoint made with different {', '.join(differing)}; "
            "delete it or give another directory")
    if out.exists() and any(out.iterdir()):
        stale = [p for p in out.iterdir() if p.suffix in (".safetensors", ".json")]
        if stale and not reuse:
            raise CheckpointError(f"{out} already holds a checkpoint; delete it or give another --out")
        for p in stale:
            p.unlink()
    if device == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("--device cuda: no CUDA device visible to torch; use --device cpu")

    model_type = config.pop("model_type")
    config.pop("architectures", None)
    torch_dtype = getattr(torch, DTYPES[short_dtype])
    hf_config = AutoConfig.for_model(model_type, **config)
    log(f"making {model_type} from {origin}: {hf_config.num_hidden_layers} layers, hidden {hf_config.hidden_size}, "
        f"vocab {hf_config.vocab_size}, {short_dtype}, seed {seed}, on {device}")
    torch.manual_seed(seed)
    start = time.perf_counter()
    # Initialising on the GPU is much faster for 1B+ models; the weights then come
    # from CUDA's generator, so the same seed gives other weights than on the CPU.
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype)
        _perturb(model, norm_std, bias_std, init_std)
    params = sum(p.numel() for p in model.parameters())
    log(f"initialised {params / 1e6:.1f}M parameters in {time.perf_counter() - start:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    save_kwargs: dict[str, Any] = {"max_shard_size": max_shard_size}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        save_kwargs["safe_serialization"] = True  # transformers 4; 5 always writes safetensors
    model.save_pretrained(out, **save_kwargs)
    _add_legacy_keys(out, {**config, "model_type": model_type})
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    files = sorted(p.name for p in out.iterdir())
    log(f"wrote {out}: {', '.join(files)}")
    return out


def list_presets() -> str:
    """The preset table printed by --list."""
    lines = []
    for p in PRESETS.values():
        c = p.config
        head_dim = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
        rope = (c.get("rope_scaling") or {}).get("rope_type", "default")
        lines.append(
            f"{p.name:17} {c['model_type']:8} layers {c['num_hidden_layers']:3}  hidden {c['hidden_size']:5}  "
            f"heads {c['num_attention_heads']:2}/{c['num_key_value_heads']:<2} head_dim {head_dim:3}  "
            f"ffn {c['intermediate_size']:5}  vocab {c['vocab_size']:6}  "
            f"{'tied  ' if c['tie_word_embeddings'] else 'untied'}  theta {c['rope_theta']:g} rope {rope}  "
            f"{p.dtype}\n{'':17} {p.source}{'; ' + p.note if p.note else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Random models have near-uniform logits; see this file's header and parity.py on near-ties.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", help="a preset name (--list shows them)")
    source.add_argument("--config", help="a config.json to instantiate (any model_type transformers knows)")
    parser.add_argument("--list", action="store_true", help="print the presets and exit")
    parser.add_argument("--out", help="directory to write (created)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="checkpoint dtype (default: the preset's or file's)")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before initialisation")
    parser.add_argument("--layers", type=int, help="override num_hidden_layers (a smaller variant of a real shape)")
    parser.add_argument("--max-shard-size", default="50GB",
                        help='largest safetensors shard, e.g. "200MB" for a sharded checkpoint with an index')
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where to initialise (cuda is much faster for 1B+ models)")
    parser.add_argument("--init-std", type=float,
                        help="redraw every matrix from N(0, STD) instead of transformers' initializer_range")
    parser.add_argument("--norm-std", type=float, default=0.1, help="RMSNorm weights from 1 + N(0, STD)")
    parser.add_argument("--bias-std", type=float, help="biases from N(0, STD) (default: initializer_range)")
    parser.add_argument("--transformers-init", action="store_true",
                        help="keep transformers' init exactly (norm weights 1, biases 0)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep an existing directory made with the same arguments")
    args = parser.parse_args(argv)
    # Local directories only: the GPU machine has no internet, and a hub lookup would only time out.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.list:
        print(list_presets())
        return 0
    if args.out is None:
        parser.error("--out DIR is required (or --list)")
    print(f"seed {args.seed}")
    try:
        make_checkpoint(args.out, preset=args.preset, config_file=args.config, dtype=args.dtype, seed=args.seed,
                        layers=args.layers, max_shard_size=args.max_shard_size, device=args.device,
                        init_std=args.init_std, norm_std=args.norm_std, bias_std=args.bias_std,
                        transformers_init=args.transformers_init, reuse=args.reuse)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
