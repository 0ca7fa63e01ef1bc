"""PyTorch's symmetric memory for tp_step.py's 'symm' driver: the allocation backend, a checked probe, buffers.

Why `set_backend("CUDA")` failed on torch 2.11 ("SymmetricMemory does not find allocation backend CUDA"): each
backend registers itself when libtorch loads, one of two ways (torch/csrc/distributed/c10d/symm_mem). The one the
TORCH_SYMMMEM variable names (unset: "CUDA") is installed directly as the CUDA devices' allocator; the others are
only listed as available. set_backend looks among the available ones only, so naming the installed default fails,
and naming another works once, before the first allocation ("Backend can not be changed after use"). So the
backend is read first (get_backend) and set only to change it. (pytorch/pytorch#160289 is this error.)

Tried in order: the backend the caller's TORCH_SYMMMEM names (if CUDA or NVSHMEM), CUDA, NVSHMEM. CUDA maps every
peer's buffer through cuMem handles and has each rank load its peers' buffers: the one-shot all-reduce needs no
more. NVSHMEM only with NVSHMEM_DISABLE_NVLS=1. The NCCL backend is not tried (its symmetric kernels are NCCL's,
not the one-shot kernel measured here). A backend counts once a small eager all-reduce summed right on every rank.
"""
from __future__ import annotations

import os

# Multicast off before torch is imported, should this module be imported first (tp_step.py says why).
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

PREFERENCE = ("CUDA", "NVSHMEM")  # the backends tried, in this order (the caller's TORCH_SYMMMEM, if one, first)


def _text(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"


def _module() -> Any:
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem


def _select(symm_mem: Any, name: str, device: torch.device) -> str:
    """Makes `name` the backend of CUDA allocations; says how. Raises what set_backend raises."""
    if not hasattr(symm_mem, "get_backend"):  # a torch from before set_backend: CUDA is the only backend
        if name != "CUDA":
            raise RuntimeError(f"torch {torch.__version__} has no symm_mem.set_backend")
        return "CUDA (the only backend of this torch)"
    current = symm_mem.get_backend(device)
    if current == name:
        return f"{name} (already the backend; set_backend not called)"
    symm_mem.set_backend(name)
    return f"{name} (set_backend, replacing {current})"


def setup(ctx: Any) -> tuple[str | None, str | None]:
    """(backend, None) once a small all-reduce through symmetric memory summed right on every rank, else
    (None, why), every attempt's reason. `ctx` is tp_timing.Ctx: each stage ends with every rank's agreement, so
    that all ranks go on, or give up, together (a rank alone in rendezvous would hang). The backend chosen is
    global to the process: the step's and the microbenchmark's buffers use it too."""
    if not ctx.cuda:
        return None, "symmetric memory needs CUDA"
    try:
        symm_mem = _module()
        missing = None if hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out") else \
            f"torch {torch.__version__} has no torch.ops.symm_mem.one_shot_all_reduce_out"
    except Exception as error:  # noqa: BLE001 (a build without distributed or symmetric memory)
        symm_mem, missing = None, f"symmetric memory unavailable: {_text(error)}"
    missing = ctx.agree(missing)
    if missing:
        return None, missing
    device = torch.device("cuda", ctx.rank)
    tried: list[str] = []
    chosen = os.environ.get("TORCH_SYMMMEM")
    for name in sorted(PREFERENCE, key=lambda n: n != chosen):  # stable: the chosen one first, if it is one
        why_not = None
        if name == "NVSHMEM":
            if os.environ.get("NVSHMEM_DISABLE_NVLS") != "1":
                why_not = "not tried: NVSHMEM_DISABLE_NVLS is not 1"
            elif not getattr(symm_mem, "is_nvshmem_available", lambda: False)():
                why_not = "not tried: NVSHMEM not available in this build or on this machine"
        if ctx.agree(why_not):
            tried.append(f"{name}: {why_not}")
            continue
        pools = [None]
        while pools:
            pool = pools.pop(0)
            label, error, stage = _attempt(ctx, symm_mem, name, device, pool)
            if error is None:
                return label, None
            if "can not be changed after use" in error:
                error += f" (an earlier attempt allocated; TORCH_SYMMMEM={name} tries {name} first)"
            tried.append(f"{label}: {stage}: {error}")
            # A failed allocation through the implicit pool (torch.cuda.MemPool, default since 2.10) is tried
            # once more with plain allocations; after a failed rendezvous the ranks' states may differ: no retry.
            if stage == "allocation" and pool is None and _pool_on(symm_mem):
                pools.append(False)
    return None, "symmetric memory unavailable: " + "; ".join(tried)


def _pool_on(symm_mem: Any) -> bool:
    check = getattr(symm_mem, "_should_use_implicit_mempool", None)
    return bool(check()) if check else False


def _attempt(ctx: Any, symm_mem: Any, name: str, device: torch.device,
             pool: bool | None) -> tuple[str, str | None, str]:
    """One backend: select, allocate, rendezvous, all-reduce; (label, error or None, the stage that failed)."""
    label = name

    def stage(fn: Callable[[], None]) -> str | None:
        try:
            fn()
            err = None
        except Exception as error:  # noqa: BLE001 (recorded: the exact reason is the result)
            err = _text(error)
        return ctx.agree(err)

    def select() -> None:
        nonlocal label
        label = _select(symm_mem, name, device)
        if pool is False:
            symm_mem._use_implicit_mempool = False  # read by _should_use_implicit_mempool(); private, 2.10+
        label += ", implicit pool " + ("on" if _pool_on(symm_mem) else "off")

    err = stage(select)
    if err:
        return label, err, "set_backend"
    group = dist.group.WORLD.group_name
    box: dict[str, torch.Tensor] = {}

    def allocate() -> None:
        box["buf"] = symm_mem.empty(64, dtype=torch.bfloat16, device=device)

    def rendezvous() -> None:
        symm_mem.rendezvous(box["buf"], group)  # host-blocking, collective
        torch.cuda.synchronize()

    def all_reduce() -> None:  # eager, checked: a machine where peer mappings fail says so once, here
        buf = box["buf"]
        buf.fill_(ctx.rank + 1)
        out = torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", group, torch.empty_like(buf))
        want = ctx.tp * (ctx.tp + 1) // 2
        if not bool((out == want).all()):
            raise RuntimeError(f"one_shot_all_reduce_out summed {out.float().unique().tolist()}, not {want}")

    for what, fn in (("allocation", allocate), ("rendezvous", rendezvous), ("all-reduce", all_reduce)):
        err = stage(fn)
        if err:
            return label, err, what
    return label, None, ""


def buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, group_name: str) -> torch.Tensor:
    """A symmetric tensor, rendezvoused with the group's peers (host-blocking, collective: never inside a capture),
    from the backend setup() chose."""
    symm_mem = _module()
    buf = symm_mem.empty(*shape, dtype=dtype, device=device)
    symm_mem.rendezvous(buf, group_name)
    return buf
