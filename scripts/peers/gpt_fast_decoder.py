"""The gpt-fast-style decoder of the PyTorch peers, in plain PyTorch.

Its model (ModelArgs read from a Hugging Face config.json, fused QKV and
gate/up projections, GQA, RoPE, a static KV cache), load_transformer() from a
checkpoint's safetensors, and Decoder: the greedy one-token step that
pytorch_peers.py torch.compile's and captures in a CUDA graph, and its runners.
prefill_first_tokens() is the whole prompt's forward that prefill_peers.py
compiles and captures: causal attention over the prompt's own keys with SDPA's
native GQA (is_causal, enable_gqa: a fused kernel), the KV cache written for
the decode step, the LM head for the last position only.
PeerError, the error every part of the peers raises, lives here too.
"""
from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from peer_args import PeerError  # noqa: F401  (re-exported: the peers import it from here too)


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelArgs:
    """The decoder's shape, read from a Hugging Face config.json."""

    model_type: str
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    rope: dict[str, Any] = field(default_factory=dict)
    dtype: str = "bfloat16"
    sliding_window: int | None = None  # inside the window attention is full; setup_caches stays inside

    @classmethod
    def from_checkpoint(cls, checkpoint: pathlib.Path) -> "ModelArgs":
        path = checkpoint / "config.json"
        if not path.is_file():
            raise PeerError(f"{checkpoint}: no config.json (a Hugging Face checkpoint directory is needed)")
        c = json.loads(path.read_text())
        model_type = c.get("model_type")
        if model_type not in ("llama", "mistral", "qwen2"):
            raise PeerError(f"{path}: model_type {model_type!r}; this decoder knows llama, mistral and qwen2")
        if c.get("hidden_act", "silu") != "silu":
            raise PeerError(f"{path}: hidden_act {c.get('hidden_act')!r}; only silu is written")
        # Qwen2 slides only with use_sliding_window; Mistral whenever sliding_window is set.
        window = c.get("sliding_window") if (model_type == "mistral" or c.get("use_sliding_window")) else None
        heads = c["num_attention_heads"]
        # transformers 5 writes rope_parameters; the Hub's files write rope_theta + rope_scaling.
        rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        rope.setdefault("rope_theta", c.get("rope_theta", 10000.0))
        rope["rope_type"] = rope.get("rope_type", rope.get("type", "default"))
        if rope["rope_type"] in ("llama3",):
            rope.setdefault("original_max_position_embeddings", c.get("max_position_embeddings"))
        attention_bias = bool(c.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=c["vocab_size"],
            hidden_size=c["hidden_size"],
            layers=c["num_hidden_layers"],
            heads=heads,
            kv_heads=c.get("num_key_value_heads") or heads,
            head_dim=c.get("head_dim") or c["hidden_size"] // heads,
            intermediate_size=c["intermediate_size"],
            rms_norm_eps=c.get("rms_norm_eps", 1e-6),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases and no o bias; Llama's attention_bias covers all four.
            qkv_bias=model_type == "qwen2" or attention_bias,
            o_bias=model_type != "qwen2" and attention_bias,
            mlp_bias=bool(c.get("mlp_bias", False)),
            rope=rope,
            dtype=c.get("torch_dtype", c.get("dtype", "bfloat16")),
            sliding_window=window,
        )


def rope_inv_freq(args: ModelArgs) -> torch.Tensor:
    """RoPE inverse frequencies as transformers computes them (default, linear, llama3), float32."""
    rope = args.rope
    dim = args.head_dim
    base = float(rope["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    kind = rope["rope_type"]
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(rope["factor"])
    if kind == "llama3":
        factor = float(rope["factor"])
        low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
        old_context = float(rope["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise PeerError(f"RoPE type {kind!r} is not written here (default, linear and llama3 are)")


class RMSNorm(nn.Module):
    """transformers' Llama RMSNorm, rounding included: normalise in float32, scale in the model dtype."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's layout: the two halves of a head are the pairs' real and imaginary parts."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class KVCache(nn.Module):
    """A static cache of max_seq_len positions, written in place at input_pos (graph-safe)."""

    def __init__(self, batch: int, kv_heads: int, max_seq_len: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        shape = (batch, kv_heads, max_seq_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        q, kv = args.heads * args.head_dim, args.kv_heads * args.head_dim
        self.split = (q, kv, kv)
        self.wqkv = nn.Linear(args.hidden_size, q + 2 * kv, bias=args.qkv_bias)
        self.wo = nn.Linear(q, args.hidden_size, bias=args.o_bias)
        self.kv_cache: KVCache | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                input_pos: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None,
                prefill: bool = False, native_gqa: bool = False) -> torch.Tensor:
        a = self.args
        batch, seq, _ = x.shape
        q, k, v = self.wqkv(x).split(self.split, dim=-1)
        q = q.view(batch, seq, a.heads, a.head_dim).transpose(1, 2)
        k = k.view(batch, seq, a.kv_heads, a.head_dim).transpose(1, 2)
        v = v.view(batch, seq, a.kv_heads, a.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:  # given explicitly, so a compiled prefill sees tensors, not swapped-in modules
            cache[0].index_copy_(2, input_pos, k)
            cache[1].index_copy_(2, input_pos, v)
            k_all, v_all = cache
        else:
            assert self.kv_cache is not None, "setup_caches() first"
            k_all, v_all = self.kv_cache.update(input_pos, k, v)
        gqa = a.heads != a.kv_heads
        if prefill:
            # A fresh prompt at positions 0..seq-1: its queries see only its own keys, so
            # attention needs neither the rest of the cache nor a mask, and is_causal with
            # native GQA lets SDPA pick a fused kernel (cuDNN's on the H100 with torch 2.11, else
            # FlashAttention; prefill_peers.py records which) without copying K/V per query head.
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        elif native_gqa:
            y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=gqa)
        else:
            group = a.heads // a.kv_heads
            k_all = k_all.repeat_interleave(group, dim=1)
            v_all = v_all.repeat_interleave(group, dim=1)
            y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(batch, seq, a.heads * a.head_dim))


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.ffn = args.intermediate_size
        self.w_gate_up = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.w_down = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).split(self.ffn, dim=-1)
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.feed_forward = FeedForward(args)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                input_pos: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None,
                prefill: bool = False, native_gqa: bool = False) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos, cache, prefill, native_gqa)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """A gpt-fast-style decoder over a static KV cache; forward(tokens [B, T], input_pos [T])."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.embed = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.output = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.max_seq_len = 0
        # SDPA's own GQA (enable_gqa) in the decode step instead of repeat_interleave'd K/V.
        # Off by default: the decode peers' committed numbers were taken with the copies.
        self.native_gqa = False

    def setup_caches(self, batch: int, max_seq_len: int) -> None:
        """Allocates the KV cache and the RoPE/mask tables for this batch and length."""
        weight = self.output.weight
        dtype, device = weight.dtype, weight.device
        if self.args.sliding_window is not None and max_seq_len > self.args.sliding_window:
            raise PeerError(f"{max_seq_len} positions exceed the sliding window ({self.args.sliding_window}), "
                            "which this decoder does not implement")
        self.max_seq_len = max_seq_len
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(batch, self.args.kv_heads, max_seq_len, self.args.head_dim, dtype,
                                               device)
        # cos/sin in float32 then rounded to the model dtype, as transformers does.
        positions = torch.arange(max_seq_len, dtype=torch.float32)
        freqs = torch.outer(positions, rope_inv_freq(self.args))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().to(dtype=dtype, device=device), persistent=False)
        self.register_buffer("sin", emb.sin().to(dtype=dtype, device=device), persistent=False)
        causal = torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool, device=device))
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor,
                caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None, prefill: bool = False,
                last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, V] (or [B, 1, V] with last_only) of tokens [B, T] at input_pos [T].

        The defaults are the decode step's path: the model's own caches and RoPE
        tables, attention over the whole static cache under the causal mask.
        prefill=True is a fresh prompt at positions 0..T-1 (see Attention);
        caches/rope pass the cache tensors and cos/sin rows explicitly.
        """
        cos, sin = rope if rope is not None else (self.cos[input_pos], self.sin[input_pos])
        # [1, 1, T, max_seq_len]: position s visible if s <= t (prefill attends within the prompt instead)
        mask = None if prefill else self.causal_mask[input_pos][None, None]
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, input_pos, None if caches is None else caches[i], prefill,
                      self.native_gqa)
        if last_only:
            x = x[:, -1:]  # the LM head (and final norm) only where a token is picked
        return self.output(self.norm(x))


def cache_tensors(model: Transformer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (k, v) of each layer's static cache, as setup_caches() allocated them."""
    caches = []
    for layer in model.layers:
        assert layer.attention.kv_cache is not None, "setup_caches() first"
        caches.append((layer.attention.kv_cache.k, layer.attention.kv_cache.v))
    return caches


def prefill_first_tokens(model: Transformer, tokens: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]],
                         cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A fresh prompt's forward: (greedy first tokens [B], last-position logits [B, V]).

    tokens [B, T] at positions 0..T-1, cos/sin the tables' first T rows. Writes
    each layer's K/V into `caches` at those positions, as the decode step reads them.
    """
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    logits = model(tokens, positions, caches=caches, rope=(cos, sin), prefill=True, last_only=True)[:, -1]
    return logits.argmax(-1), logits


def _safetensors_files(checkpoint: pathlib.Path) -> list[pathlib.Path]:
    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [checkpoint / n for n in names]
    single = checkpoint / "model.safetensors"
    if single.is_file():
        return [single]
    raise PeerError(f"{checkpoint}: neither model.safetensors nor model.safetensors.index.json")


def load_transformer(checkpoint: pathlib.Path, dtype: torch.dtype, device: str) -> Transformer:
    """Builds the decoder from a Hugging Face checkpoint's safetensors (fusing QKV and gate/up)."""
    from safetensors.torch import load_file

    args = ModelArgs.from_checkpoint(checkpoint)
    tensors: dict[str, torch.Tensor] = {}
    for path in _safetensors_files(checkpoint):
        tensors.update(load_file(str(path), device="cpu"))

    def take(name: str) -> torch.Tensor:
        if name not in tensors:
            raise PeerError(f"{checkpoint}: tensor {name} missing")
        return tensors[name]

    state: dict[str, torch.Tensor] = {"embed.weight": take("model.embed_tokens.weight"),
                                      "norm.weight": take("model.norm.weight")}
    state["output.weight"] = (tensors["lm_head.weight"] if "lm_head.weight" in tensors and
                              not args.tie_word_embeddings else state["embed.weight"])
    for i in range(args.layers):
        p, q = f"model.layers.{i}.", f"layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        state[q + "attention.wqkv.weight"] = torch.cat([take(attn + f"{n}_proj.weight") for n in "qkv"])
        if args.qkv_bias:
            state[q + "attention.wqkv.bias"] = torch.cat([take(attn + f"{n}_proj.bias") for n in "qkv"])
        state[q + "attention.wo.weight"] = take(attn + "o_proj.weight")
        if args.o_bias:
            state[q + "attention.wo.bias"] = take(attn + "o_proj.bias")
        state[q + "feed_forward.w_gate_up.weight"] = torch.cat([take(mlp + "gate_proj.weight"),
                                                                take(mlp + "up_proj.weight")])
        state[q + "feed_forward.w_down.weight"] = take(mlp + "down_proj.weight")
        if args.mlp_bias:
            state[q + "feed_forward.w_gate_up.bias"] = torch.cat([take(mlp + "gate_proj.bias"),
                                                                  take(mlp + "up_proj.bias")])
            state[q + "feed_forward.w_down.bias"] = take(mlp + "down_proj.bias")
        state[q + "attention_norm.weight"] = take(p + "input_layernorm.weight")
        state[q + "ffn_norm.weight"] = take(p + "post_attention_layernorm.weight")
    with torch.device("meta"):
        model = Transformer(args)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, assign=True, strict=True)
    if args.tie_word_embeddings:
        model.output.weight = model.embed.weight  # one tensor, as in transformers (and half the bytes read)
    return model.to(device).eval()


# --------------------------------------------------------------------------- decoding


class Decoder:
    """Greedy decoding with static buffers, so that a step can be compiled and captured in a CUDA graph.

    State lives in tensors the step updates in place: the next input tokens, the
    position, each sequence's finished flag and the generated tokens. A step
    therefore needs no host input, and replaying its graph is one step.
    """

    def __init__(self, model: Transformer, batch: int, prompt_tokens: int, new_tokens: int, stop_token: int) -> None:
        self.model = model
        self.batch, self.prompt_tokens, self.new_tokens = batch, prompt_tokens, new_tokens
        device = model.output.weight.device
        model.setup_caches(batch, prompt_tokens + new_tokens)
        # A captured graph holds raw addresses: keep what it reads alive for as
        # long as this decoder, even if another decoder re-sets the model's caches.
        self.keep_alive = [layer.attention.kv_cache for layer in model.layers] + [model.cos, model.sin,
                                                                                  model.causal_mask]
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.generated = torch.zeros(batch, new_tokens, dtype=torch.long, device=device)
        self.stop = torch.full((1,), stop_token, dtype=torch.long, device=device)
        self.step_fn: Callable[[], torch.Tensor] = self._step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.flag: torch.Tensor | None = None  # the graph's output: all sequences finished

    @torch.inference_mode()
    def prefill(self, prompts: torch.Tensor) -> None:
        """Runs the prompt (eager, untimed), resets the state and stores the first generated token."""
        positions = torch.arange(self.prompt_tokens, device=prompts.device)
        logits = self.model(prompts, positions)
        first = logits[:, -1].argmax(-1)
        self.tokens.copy_(first[:, None])
        self.pos.fill_(self.prompt_tokens)
        self.finished.copy_(first == self.stop)
        self.generated.zero_()
        self.generated[:, 0] = first

    def _step(self) -> torch.Tensor:
        """One decode step: feed self.tokens at self.pos, pick greedily, update the state in place."""
        logits = self.model(self.tokens, self.pos)
        nxt = logits[:, -1].argmax(-1)
        self.generated.index_copy_(1, self.pos - (self.prompt_tokens - 1), nxt[:, None])
        self.finished.logical_or_(nxt == self.stop)
        self.tokens.copy_(nxt[:, None])
        self.pos.add_(1)
        return self.finished.all()

    def compile(self, mode: str) -> None:
        # dynamic=False: every batch is its own static shape, as in a CUDA graph per batch.
        self.step_fn = torch.compile(self._step, mode=None if mode == "default" else mode, fullgraph=True,
                                     dynamic=False)

    @torch.inference_mode()
    def capture(self, warmup_steps: int = 3) -> None:
        """PyTorch's documented recipe: warm up on a side stream, then capture into a graph.

        The warm-up runs compilation (and any autotuning) and lets lazily
        initialised state settle before capture, which must not allocate from
        the default pool or synchronize. It moves the position, so prefill()
        must run again before replaying.
        """
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_steps):
                self.pos.fill_(self.prompt_tokens)
                self.step_fn()
        torch.cuda.current_stream().wait_stream(side)
        self.pos.fill_(self.prompt_tokens)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.flag = self.step_fn()
        torch.cuda.synchronize()

    def replay(self) -> torch.Tensor:
        """One step: the graph's replay when captured, else the step function itself."""
        if self.graph is not None:
            self.graph.replay()
            assert self.flag is not None
            return self.flag
        with torch.inference_mode():
            return self.step_fn()

    def run_sync(self, steps: int) -> int:
        """Steps with a host decision after each (the .item() synchronizes); returns the steps run."""
        for i in range(steps):
            if bool(self.replay().item()):
                return i + 1
        return steps

    def run_nosync(self, steps: int) -> int:
        for _ in range(steps):
            self.replay()
        return steps
