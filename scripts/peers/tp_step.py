"""The tensor-parallel decode step of tp_peers.py, and the worker process that builds and times it.

One rank's shard of a Llama-shaped model, Megatron's split (the one src/plan/tensor_parallel.h makes): q|k|v and
gate|up by output rows (heads/tp, kv_heads/tp, ffn/tp), o_proj and down_proj by input columns (row-parallel: each
rank's product is a partial sum, all-reduced), the LM head by vocabulary rows (vocab/tp) followed by an all-gather
of the logits and the argmax; the embedding and the norms on every rank. The step is plain PyTorch (eager ops, or
with --compile the elementwise pieces torch.compile'd), captured whole in one CUDA graph per (tp, batch, driver).
Beside it: tp_timing.py (capture, the timed loop, the all-reduce microbenchmark) and tp_symm.py (the symmetric
memory backend of the 'symm' driver, and why it is chosen the way it is).
"""
from __future__ import annotations

import os

# NEVER NVLink multicast (NVLS, multimem, cuMulticastCreate), in any form: on the shared machines a program that
# uses it can take the host's GPUs out of service for a day or more. NCCL, PyTorch's symmetric memory and NVSHMEM
# each turn it on by themselves where the hardware has it, so it is switched off here, before torch (and so CUDA
# or NCCL) is imported, by assignment: setdefault would keep a value from the caller's environment.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def forbid_multicast() -> None:
    os.environ.update(NO_MULTICAST)


forbid_multicast()

import dataclasses  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tp_symm  # noqa: E402
from tp_timing import Ctx, capture, time_allreduce, timed  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float = 500000.0
    eps: float = 1e-5


MODELS = {c.name: c for c in (
    Config("llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256),
    Config("llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256),
    Config("llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256),
    # Not a model: small enough for the self-test and CPU smoke tests, with GQA (2 query heads per KV head).
    Config("tiny", 256, 2, 8, 4, 32, 512, 1024),
)}
CACHE_ALIGN = 256  # the static cache's length: context + 1 rounded up to this, as a real cache is longer than used
DRIVERS = {"tp1": "pytorch-tp1", "nccl": "pytorch-tp-nccl", "symm": "pytorch-tp-symm"}
AR_DRIVERS = {"nccl": "nccl", "symm": "pytorch-symm"}


def driver_label(driver: str, compiled: bool, cuda: bool) -> str:
    return DRIVERS[driver] + ("-compiled" if compiled else "") + ("" if cuda else " (CPU smoke test)")


def divisibility_problem(cfg: Config, tp: int) -> str | None:
    """Why `tp` cannot split this shape (Megatron's split needs whole heads, KV heads, FFN and vocabulary rows)."""
    for what, n in (("kv_heads", cfg.kv_heads), ("heads", cfg.heads), ("ffn", cfg.ffn), ("vocab", cfg.vocab)):
        if n % tp:
            return f"tp {tp} does not divide {what} {n}"
    return None


def shard_shapes(cfg: Config, tp: int) -> dict[str, tuple[int, ...]]:
    """One rank's tensors: per layer ('layer.*') and once ('embedding', 'final_norm', 'lm_head')."""
    hl, kvl, fl = cfg.heads // tp, cfg.kv_heads // tp, cfg.ffn // tp
    return {"layer.attn_norm": (cfg.d_model,), "layer.wqkv": ((hl + 2 * kvl) * cfg.head_dim, cfg.d_model),
            "layer.wo": (cfg.d_model, hl * cfg.head_dim), "layer.mlp_norm": (cfg.d_model,),
            "layer.w13": (2 * fl, cfg.d_model), "layer.w2": (cfg.d_model, fl),
            "embedding": (cfg.vocab, cfg.d_model), "final_norm": (cfg.d_model,), "lm_head": (cfg.vocab // tp, cfg.d_model)}


def weight_bytes(cfg: Config, tp: int, element: int = 2) -> dict[str, int]:
    """'streamed': the weights one step reads on a rank (every layer matrix and norm, the LM head's shard; not the
    embedding table, of which a step reads `batch` rows); 'resident': all the rank holds, the embedding included."""
    shapes = shard_shapes(cfg, tp)
    size = {k: math.prod(s) * element for k, s in shapes.items()}
    layer = sum(v for k, v in size.items() if k.startswith("layer."))
    streamed = cfg.layers * layer + size["final_norm"] + size["lm_head"]
    return {"streamed": streamed, "resident": streamed + size["embedding"]}


def cache_len(context: int) -> int:
    return -(-(context + 1) // CACHE_ALIGN) * CACHE_ALIGN


def kv_cache_bytes(cfg: Config, tp: int, batch: int, context: int, element: int = 2) -> int:
    return cfg.layers * 2 * batch * (cfg.kv_heads // tp) * cache_len(context) * cfg.head_dim * element


# --------------------------------------------------------------------------- the shard


class Shard:
    """Rank `rank`'s weights. exact_seed=None: drawn directly on the device (std 0.02, seeded by rank), the
    benchmark's way; an int: every full tensor drawn on the CPU from that seed and this rank's slice taken, so that
    any tp gives the same model (the self-test compares tp=N's logits with tp=1's)."""

    def __init__(self, cfg: Config, tp: int, rank: int, device: torch.device, dtype: torch.dtype,
                 exact_seed: int | None = None) -> None:
        self.cfg, self.tp, self.rank = cfg, tp, rank
        hl, kvl, fl, hd, d = cfg.heads // tp, cfg.kv_heads // tp, cfg.ffn // tp, cfg.head_dim, cfg.d_model
        self.hl, self.kvl, self.fl = hl, kvl, fl
        counter = iter(range(1 << 30))

        def full(shape: tuple[int, ...], std: float = 0.02) -> torch.Tensor:
            g = torch.Generator().manual_seed(exact_seed * 100003 + next(counter))  # type: ignore[operator]
            return torch.randn(shape, generator=g) * std

        def rows(t: torch.Tensor, n: int) -> torch.Tensor:  # this rank's n output rows
            return t[rank * n:(rank + 1) * n]

        def new(shape: tuple[int, ...]) -> torch.Tensor:
            return torch.empty(shape, dtype=dtype, device=device).normal_(0.0, 0.02)

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=dtype, device=device).contiguous()

        if exact_seed is None:
            torch.manual_seed(1234 + rank)
        ones = torch.ones(d, dtype=dtype, device=device)
        self.layers: list[dict[str, torch.Tensor]] = []
        for _ in range(cfg.layers):
            if exact_seed is None:
                layer = {"wqkv": new(((hl + 2 * kvl) * hd, d)), "wo": new((d, hl * hd)), "w13": new((2 * fl, d)),
                         "w2": new((d, fl))}
            else:
                wq, wk, wv = full((cfg.heads * hd, d)), full((cfg.kv_heads * hd, d)), full((cfg.kv_heads * hd, d))
                wo, w1, w3, w2 = full((d, cfg.heads * hd)), full((cfg.ffn, d)), full((cfg.ffn, d)), full((d, cfg.ffn))
                layer = {"wqkv": put(torch.cat((rows(wq, hl * hd), rows(wk, kvl * hd), rows(wv, kvl * hd)))),
                         "wo": put(rows(wo.t(), hl * hd).t()),  # input columns
                         "w13": put(torch.cat((rows(w1, fl), rows(w3, fl)))), "w2": put(rows(w2.t(), fl).t())}
            layer["attn_norm"], layer["mlp_norm"] = ones.clone(), ones.clone()
            self.layers.append(layer)
        self.final_norm = ones.clone()
        if exact_seed is None:
            self.embedding, self.lm_head = new((cfg.vocab, d)), new((cfg.vocab // tp, d))
        else:
            self.embedding, self.lm_head = put(full((cfg.vocab, d))), put(rows(full((cfg.vocab, d)), cfg.vocab // tp))
        self.exact_seed = exact_seed


# --------------------------------------------------------------------------- the step's pieces


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the next norm (one fused kernel when compiled)."""
    x = x + delta
    return x, _rms_norm(x, w, eps)


def rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, hl: int, kvl: int,
               hd: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k with RoPE (rotate-half layout, one position for the batch), and v, from the q|k|v product."""
    b = qkv.shape[0]
    qk = qkv[:, :(hl + kvl) * hd].reshape(b, hl + kvl, hd)
    x1, x2 = qk[..., :hd // 2], qk[..., hd // 2:]
    rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return rot[:, :hl], rot[:, hl:], qkv[:, (hl + kvl) * hd:].reshape(b, kvl, hd)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


PIECES: dict[str, Callable[..., Any]] = {"add_rms_norm": add_rms_norm, "rope_split": rope_split, "silu_mul": silu_mul,
                                         "rms_norm": _rms_norm}


def compiled_pieces() -> dict[str, Callable[..., Any]]:
    """The elementwise pieces through inductor (fullgraph, static shapes; no cudagraphs of its own: the whole step
    is captured here). Matrix products, attention and collectives stay outside, as PyTorch's own kernels."""
    return {k: torch.compile(f, fullgraph=True, dynamic=False) for k, f in PIECES.items()}


class Reducer:
    """o_proj's and down_proj's row-parallel product, summed over the ranks by the driver: 'tp1' (no sum), 'nccl'
    (torch.distributed.all_reduce on the default group) or 'symm' (the product written straight into a symmetric
    memory buffer, then torch.ops.symm_mem.one_shot_all_reduce_out: each rank loads every peer's buffer over NVLink
    peer access and sums; no multicast), through the backend tp_symm.setup() chose."""

    def __init__(self, driver: str, batch: int, d: int, dtype: torch.dtype, device: torch.device) -> None:
        self.driver = driver
        if driver == "symm":
            if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.ops.symm_mem.one_shot_all_reduce_out")
            self.group_name = dist.group.WORLD.group_name
            self.buf = tp_symm.buffer((batch, d), dtype, device, self.group_name)  # collective: never in a capture
            self.out = torch.empty_like(self.buf)

    def __call__(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.driver == "tp1":
            return F.linear(a, w)
        if self.driver == "nccl":
            y = F.linear(a, w)
            dist.all_reduce(y)
            return y
        torch.mm(a, w.t(), out=self.buf)
        return torch.ops.symm_mem.one_shot_all_reduce_out(self.buf, "sum", self.group_name, self.out)


class TPStep:
    """One decode step of `batch` sequences at position `context` over a Shard: embedding lookup, the layers
    (attention over context + 1 keys of a static cache, the new token's K/V written at `context`), final norm, LM
    head, all-gather of the logits, argmax into self.out_tokens. Every replay writes the same position."""

    def __init__(self, shard: Shard, batch: int, context: int, driver: str, pieces: dict[str, Callable[..., Any]],
                 device: torch.device, dtype: torch.dtype) -> None:
        cfg, tp = shard.cfg, shard.tp
        self.shard, self.batch, self.context, self.pieces, self.tp = shard, batch, context, pieces, tp
        L, hd, kvl = cache_len(context), cfg.head_dim, shard.kvl
        gen = torch.Generator().manual_seed(7 if shard.exact_seed is None else shard.exact_seed + 7)
        self.tokens = torch.randint(0, cfg.vocab, (batch,), generator=gen).to(device)
        self.caches = []
        for _ in range(cfg.layers):  # random filled context; exact: this rank's KV heads of the full cache
            if shard.exact_seed is None:
                kv = torch.empty((2, batch, kvl, L, hd), dtype=dtype, device=device).normal_()
            else:
                full = torch.randn((2, batch, cfg.kv_heads, L, hd), generator=gen)
                kv = full[:, :, shard.rank * kvl:(shard.rank + 1) * kvl].to(dtype=dtype, device=device).contiguous()
            self.caches.append((kv[0], kv[1]))
        inv_freq = cfg.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        self.cos = (context * inv_freq).cos().to(dtype=dtype, device=device)
        self.sin = (context * inv_freq).sin().to(dtype=dtype, device=device)
        self.out_tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.gathered = torch.empty((tp * batch, cfg.vocab // tp), dtype=dtype, device=device) if tp > 1 else None
        self.reduce = Reducer(driver, batch, cfg.d_model, dtype, device)
        self.logits: torch.Tensor | None = None

    def __call__(self) -> None:
        s, cfg, p, ctx = self.shard, self.shard.cfg, self.pieces, self.context
        hd, eps = cfg.head_dim, cfg.eps
        x = s.embedding[self.tokens]
        h = p["rms_norm"](x, s.layers[0]["attn_norm"], eps)
        for i, layer in enumerate(s.layers):
            q, k, v = p["rope_split"](F.linear(h, layer["wqkv"]), self.cos, self.sin, s.hl, s.kvl, hd)
            kc, vc = self.caches[i]
            kc[:, :, ctx].copy_(k)
            vc[:, :, ctx].copy_(v)
            o = F.scaled_dot_product_attention(q.unsqueeze(2), kc[:, :, :ctx + 1], vc[:, :, :ctx + 1], enable_gqa=True)
            x, h = p["add_rms_norm"](x, self.reduce(o.reshape(self.batch, s.hl * hd), layer["wo"]),
                                     layer["mlp_norm"], eps)
            nxt = s.layers[i + 1]["attn_norm"] if i + 1 < len(s.layers) else s.final_norm
            x, h = p["add_rms_norm"](x, self.reduce(p["silu_mul"](F.linear(h, layer["w13"])), layer["w2"]), nxt, eps)
        logits = F.linear(h, s.lm_head)  # [batch, vocab / tp]: this rank's vocabulary rows
        if self.tp == 1:
            self.logits = logits
            self.out_tokens.copy_(logits.argmax(-1))
            return
        if self.gathered.is_cuda:
            dist.all_gather_into_tensor(self.gathered, logits)
        else:  # gloo (CPU smoke tests): the list form
            dist.all_gather(list(self.gathered.view(self.tp, self.batch, -1).unbind(0)), logits)
        self.logits = self.gathered
        # argmax over the gathered [tp, batch, vocab/tp] logits without reordering them: the best of each rank's
        # block, then the first rank holding the maximum (the same token as argmax over the whole row).
        vals, idx = self.gathered.view(self.tp, self.batch, -1).max(dim=-1)
        r = vals.argmax(dim=0)
        self.out_tokens.copy_(r * (cfg.vocab // self.tp) + idx.gather(0, r[None])[0])

    def full_logits(self) -> torch.Tensor:
        """[batch, vocab] in vocabulary order, float32 (for the self-test)."""
        assert self.logits is not None
        if self.tp == 1:
            return self.logits.float().clone()
        return self.logits.view(self.tp, self.batch, -1).permute(1, 0, 2).reshape(self.batch, -1).float().clone()


# --------------------------------------------------------------------------- attention backend, memory, errors


def pick_sdpa_backend(ctx: Ctx, step: TPStep) -> tuple[str, Any]:
    """The fastest SDPA backend for this step's attention (GQA, one query, context + 1 keys): each of flash, cuDNN
    and memory-efficient that accepts it, timed in a graph of 20 calls; rank 0's choice for all ranks."""
    if not ctx.cuda:
        return "cpu default", None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    s, ctxlen = step.shard, step.context + 1
    q = torch.randn((step.batch, s.hl, 1, s.cfg.head_dim), dtype=step.cos.dtype, device=step.cos.device)
    kc, vc = step.caches[0]
    results: dict[str, float | str] = {}
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        try:
            with sdpa_kernel(backend), warnings.catch_warnings():
                warnings.simplefilter("ignore")

                def calls() -> None:
                    for _ in range(20):
                        F.scaled_dot_product_attention(q, kc[:, :, :ctxlen], vc[:, :, :ctxlen], enable_gqa=True)

                graph = capture(calls, warmup=1)
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3 / 20)
            results[name] = statistics.median(times)
            del graph
        except Exception as error:  # noqa: BLE001 (refused inputs; any failure only rules the backend out)
            results[name] = f"refused: {str(error).splitlines()[0][:120] if str(error) else type(error).__name__}"
    timed_ok = {k: v for k, v in results.items() if isinstance(v, float)}
    choice = min(timed_ok, key=timed_ok.get) if timed_ok else "MATH"
    choice = ctx.gather(choice)[0]
    if ctx.rank == 0:
        print(f"  tp {ctx.tp} batch {step.batch}: SDPA backends (us per call or why not): "
              + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}: {v}" for k, v in results.items())
              + f"; using {choice}", flush=True)
    return choice, getattr(SDPBackend, choice)


def oom_text(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, torch.OutOfMemoryError) or "out of memory" in text:
        return f"out of GPU memory: {text[:200]}"
    traceback.print_exc()
    return f"{type(error).__name__}: {text[:300]}"


def free_memory(cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def memory_error(cfg: Config, tp: int, need: int, cuda: bool) -> str | None:
    """Refuse up front what cannot fit (a rank that runs out of memory halfway would leave its peers waiting)."""
    if not cuda:
        return None
    free, _ = torch.cuda.mem_get_info()
    free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    if need > free:
        return f"out of GPU memory (estimated): needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    return None


# --------------------------------------------------------------------------- the worker


def worker(rank: int, tp: int, port: int, opts: dict[str, Any], out_path: str) -> None:
    """One rank (tp=1: the only process, no process group). Writes its results to out_path (rank 0, after every
    row, so that a crash keeps what was measured)."""
    forbid_multicast()
    cuda = opts["device"] == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    control = None
    if tp > 1:
        kwargs = {"device_id": device} if cuda else {}
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=tp, timeout=datetime.timedelta(seconds=opts["timeout"]), **kwargs)
        control = dist.new_group(backend="gloo") if cuda else dist.group.WORLD
    ctx = Ctx(rank, tp, cuda, control)
    if opts.get("self_test"):
        _self_test_worker(ctx, device, opts, out_path)
    else:
        _bench_worker(ctx, device, opts, out_path)
    if tp > 1:
        ctx.barrier()
        dist.destroy_process_group()


def _bench_worker(ctx: Ctx, device: torch.device, opts: dict[str, Any], out_path: str) -> None:
    cfg: Config = opts["cfg"]
    # bf16 on the GPU; float32 on the CPU (a smoke test: gloo's all-reduce and CPU kernels are at home there)
    tp, cuda = ctx.tp, ctx.cuda
    dtype = torch.bfloat16 if cuda else torch.float32
    drivers = ["tp1"] if tp == 1 else ["nccl", "symm"]
    pieces = compiled_pieces() if opts["compile"] else PIECES
    out: dict[str, Any] = {"rows": [], "allreduce": [], "notes": []}

    def note(text: str) -> None:
        if ctx.rank == 0:
            print(f"  tp {tp}: {text}", flush=True)
            out["notes"].append(f"tp {tp}: {text}")

    def save() -> None:
        if ctx.rank == 0:
            with open(out_path, "w") as f:
                json.dump(out, f)

    # The allocation backend that worked (tp_symm.setup, collective: every rank calls it), recorded in the symm
    # rows; or why none did, the symm rows' error.
    symm_backend, symm_error = tp_symm.setup(ctx) if "symm" in drivers else (None, None)
    if symm_error:
        note(f"symm driver skipped: {symm_error}")
    elif symm_backend:
        note(f"symm driver: symmetric memory backend {symm_backend}")
    streamed = weight_bytes(cfg, tp)["streamed"]
    shard, error = None, memory_error(cfg, tp, weight_bytes(cfg, tp)["resident"] + (1 << 30), cuda)
    if error is None:
        try:
            shard = Shard(cfg, tp, ctx.rank, device, dtype)
        except Exception as e:  # noqa: BLE001 (out of memory above all; anything else is recorded too)
            error = oom_text(e)
    error = ctx.agree(error)
    if error:
        shard = None
        free_memory(cuda)
        note(f"weights not built: {error}")
    for batch in opts["batches"]:
        step, backend_name, backend, batch_error = None, "", None, error
        if batch_error is None:
            batch_error = memory_error(cfg, tp, kv_cache_bytes(cfg, tp, batch, opts["context"]) + (1 << 30), cuda)
        batch_error = ctx.agree(batch_error)
        for driver in drivers:
            row = {"model": opts["label"], "tp": tp, "batch": batch, "context": opts["context"],
                   "driver": driver_label(driver, opts["compile"], cuda), "us_per_step": None, "sdpa_backend": None,
                   "weight_bytes_per_gpu": streamed}
            if driver == "symm":
                row["symm_backend"] = symm_backend
            err = batch_error or (symm_error if driver == "symm" else None)
            if err is None:  # every rank reaches each agree(): a collective that one rank skips would hang
                local = None
                try:
                    step = TPStep(shard, batch, opts["context"], driver, pieces, device, dtype)
                except Exception as e:  # noqa: BLE001
                    local = oom_text(e)
                err = ctx.agree(local)
            if err is None and backend_name == "":
                backend_name, backend = pick_sdpa_backend(ctx, step)
            if err is None:
                local = None
                try:
                    row["sdpa_backend"] = backend_name
                    row["us_per_step"] = round(_time_step(ctx, step, backend, opts), 2)
                except Exception as e:  # noqa: BLE001 (a rank that fails here may leave peers in NCCL: timeout)
                    local = oom_text(e)
                err = ctx.agree(local)
                if err:
                    row["us_per_step"] = None
            if err:
                row["error"] = err
            step = None
            free_memory(cuda)
            out["rows"].append(row)
            if ctx.rank == 0:
                us = f"{row['us_per_step']:.1f} us/step" if row["us_per_step"] else f"error: {err}"
                print(f"  tp {tp} batch {batch} {row['driver']}: {us}", flush=True)
            save()
    shard = None
    free_memory(cuda)
    if tp > 1 and not opts["no_allreduce"]:
        for driver in ("nccl", "symm"):
            for size in opts["allreduce_sizes"]:
                row = {"tp": tp, "bytes": size, "driver": AR_DRIVERS[driver], "us_per_call": None}
                if driver == "symm":
                    row["symm_backend"] = symm_backend
                err = symm_error if driver == "symm" else None
                if err is None:
                    local = None
                    try:
                        row["us_per_call"] = round(time_allreduce(ctx, driver, size, opts), 3)
                    except Exception as e:  # noqa: BLE001
                        local = oom_text(e)
                    err = ctx.agree(local)
                    if err:
                        row["us_per_call"] = None
                if err:
                    row["error"] = err
                out["allreduce"].append(row)
            save()
            if ctx.rank == 0:
                print(f"  tp {tp} all-reduce {AR_DRIVERS[driver]}: " + ", ".join(
                    f"{r['bytes']} B {r['us_per_call']} us" for r in out["allreduce"] if r["driver"] == AR_DRIVERS[driver]),
                    flush=True)
    save()


def _time_step(ctx: Ctx, step: TPStep, backend: Any, opts: dict[str, Any]) -> float:
    if not ctx.cuda:  # eager, host-timed: a smoke test of the code paths only
        return timed(ctx, lambda: [step() for _ in range(opts["steps"])], opts["steps"], opts["repeats"], warmup=1)
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend):
        graph = capture(step)
    steps = opts["steps"]
    for _ in range(3):  # warm-up replays
        graph.replay()

    def replays() -> None:
        for _ in range(steps):
            graph.replay()

    return timed(ctx, replays, steps, opts["repeats"], warmup=0)


def _self_test_worker(ctx: Ctx, device: torch.device, opts: dict[str, Any], out_path: str) -> None:
    """The tiny model in float32 with exact (tp-independent) weights: per driver the eager step's full logits and,
    on CUDA, the captured graph's, for the parent to compare across tp."""
    cfg, tp = MODELS["tiny"], ctx.tp
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shard = Shard(cfg, tp, ctx.rank, device, torch.float32, exact_seed=11)
    drivers = ["tp1"]
    if tp > 1:
        symm_backend, symm_error = tp_symm.setup(ctx)
        drivers = ["nccl"] + ([] if symm_error else ["symm"])
        if ctx.rank == 0:
            print(f"  tp {tp}: symm " + (f"skipped: {symm_error}" if symm_error else f"backend {symm_backend}"),
                  flush=True)
    out: dict[str, Any] = {}
    for driver in drivers:
        for batch in (1, 3):
            step = TPStep(shard, batch, 40, driver, PIECES, device, torch.float32)
            step()
            result = {"eager": step.full_logits().tolist(), "eager_tokens": step.out_tokens.tolist()}
            if ctx.cuda:
                step.logits = None
                graph = capture(step, warmup=1)
                graph.replay()
                torch.cuda.synchronize()
                result["graph"] = step.full_logits().tolist()
                result["graph_tokens"] = step.out_tokens.tolist()
            out[f"{driver} b{batch}"] = result
    if ctx.rank == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)
