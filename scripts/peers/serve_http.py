#!/usr/bin/env python3
"""Serving through HTTP, side by side in one call on one GPU: Baton's server (`python -m baton serve`),
transformers' own (`transformers serve --continuous-batching --cb-use-cuda-graph`, SDPA, bf16) and Baton's
in-process LLM (the HTTP path's own cost), each fed the same open-loop trace of `python -m baton bench`
(baton/bench.py: Poisson arrivals, fixed lengths, streamed, greedy) through the same client (`bench --url`).

The checkpoint is a random Llama-3.2-1B-shaped one (make_checkpoint.py) carrying the word tokenizer of
tiny_tokenizer.py (its 128,256 ids each one word), so that a prompt of N ids is N tokens on both servers and
every generated token is text the stream carries. Random weights rarely produce an end-of-sequence token; the
token counts are each server's usage.

    scripts/peers/serve_http.py --out results/h100-2026-11-27-serve-http-llama-3.2-1b.json \\
        [--rates 2,4,8,16] [--peer-rates 1,2,4] [--requests 64] [--peer-timeout 240]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
           HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command, port: int, log: pathlib.Path, timeout: float = 300) -> subprocess.Popen:
    import httpx

    process = subprocess.Popen(command, env=ENV, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{command[:4]} exited {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"{command[:4]} did not answer /health in {timeout} s: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def bench(model: pathlib.Path, args, label: str, rates: str, url: str | None, out: pathlib.Path,
          timeout: float, requests: int | None = None) -> list:
    command = [sys.executable, "-m", "baton", "bench", "--model", str(model), "--rates", rates, "--requests",
               str(requests or args.requests), "--warmup", "8", "--lengths", args.lengths, "--json", str(out),
               "--label", label]
    if url:
        command += ["--url", url]
    else:
        command += ["--max-batch", str(args.max_batch)]
    try:
        ran = subprocess.run(command, env=ENV, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print(f"{label}: did not finish in {timeout} s", flush=True)
        return []
    print(ran.stdout[-3000:], ran.stderr[-1500:] if ran.returncode else "", flush=True)
    if ran.returncode != 0 or not out.exists():
        return []
    rows = json.loads(out.read_text())["rows"]
    for row in rows:
        row["driver"] = label
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="/tmp/serve-http")
    parser.add_argument("--preset", default="llama-3.2-1b")
    parser.add_argument("--rates", default="1,2,4,8,16")
    parser.add_argument("--peer-rates", default="1,2,4,8")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--peer-requests", type=int, help="requests per rate for transformers (default: --requests; "
                        "a longer trace shows where its first-token time grows past 1 s)")
    parser.add_argument("--lengths", default="fixed")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--peer-timeout", type=float, default=240)
    parser.add_argument("--skip", default="", help="drivers to leave out (baton-http,baton-llm,transformers)")
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = work / args.preset
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/checkpoints/make_checkpoint.py"), "--preset",
                        args.preset, "--out", str(model), "--device", "cuda"], env=ENV, check=True)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    subprocess.run([sys.executable, str(ROOT / "scripts/checkpoints/tiny_tokenizer.py"), str(model), "--style",
                    "words", "--vocab", str(vocab)], env=ENV, check=True)
    skip = set(args.skip.split(","))
    rows = []
    if "baton-http" not in skip:
        port = free_port()
        server = start([sys.executable, "-m", "baton", "serve", "--model", str(model), "--port", str(port),
                        "--max-batch", str(args.max_batch), "--max-requests", "1024"], port, work / "baton.log")
        try:
            rows += bench(model, args, "baton-http", args.rates, f"http://127.0.0.1:{port}/v1",
                          work / "baton-http.json", 400)
        finally:
            stop(server)
    if "baton-llm" not in skip:
        rows += bench(model, args, "baton-llm", args.rates, None, work / "baton-llm.json", 400)
    if "transformers" not in skip:
        port = free_port()
        cli = ("import sys; from transformers.cli.transformers import main; sys.argv = ['transformers'] + "
               "sys.argv[1:]; sys.exit(main())")
        peer = start([sys.executable, "-c", cli, "serve", str(model),
                      "--continuous-batching", "--cb-use-cuda-graph", "--dtype", "bfloat16",
                      "--attn-implementation", "sdpa", "--host", "127.0.0.1", "--port", str(port)], port,
                     work / "transformers.log", timeout=240)
        try:
            # One rate at a time, so a rate it cannot keep up with costs only its own time.
            for rate in args.peer_rates.split(","):
                got = bench(model, args, "transformers-cb", rate, f"http://127.0.0.1:{port}/v1",
                            work / f"transformers-{rate}.json", args.peer_timeout, args.peer_requests)
                rows += got
                if not got or got[0]["ttft_p99_ms"] > 5000:
                    break  # saturated: higher rates only queue longer
        finally:
            stop(peer)
    import torch
    import transformers

    report = {"what": "serving through HTTP: Baton's OpenAI-compatible server, transformers serve with continuous "
                      "batching and CUDA graphs, and Baton's in-process LLM, one trace (bench.py fixed lengths, "
                      "greedy, streamed) per rate, one call on one GPU",
              "model": args.preset, "gpu": torch.cuda.get_device_name(0),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "transformers": transformers.__version__, "lengths": args.lengths, "requests": args.requests,
              "max_batch": args.max_batch, "trace_seed": 0, "rows": rows}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(rows, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
