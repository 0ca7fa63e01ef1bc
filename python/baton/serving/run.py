"""`python -m baton serve`: loads the checkpoint (a progress bar on stderr), builds the app and runs it under
uvicorn on 127.0.0.1 unless --host says otherwise.

SIGTERM or SIGINT: uvicorn stops accepting connections at once, lets the requests in flight finish for up to
--shutdown-timeout seconds, then cancels the rest (their streams end, their device requests are cancelled);
the engine is then closed and the process exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
from typing import Any, Callable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=os.environ.get("BATON_API_KEY"),
                        help="require 'Authorization: Bearer KEY' on /v1/* (default: $BATON_API_KEY; none)")
    parser.add_argument("--served-model-name", help="the model's name in requests (default: the directory's "
                                                   "name; the path as given is accepted too)")
    parser.add_argument("--max-requests", type=int, help="requests in flight at once; more get 503")
    parser.add_argument("--max-logprobs", type=int,
                        help="most top alternatives a request's logprobs / top_logprobs may ask for (default and "
                             "limit 20; 0: log-probabilities off, their host buffers not allocated)")
    parser.add_argument("--max-body-bytes", type=int, default=1 << 22, help="largest request body (413 above)")
    parser.add_argument("--chat-max-tokens", type=int, default=1024,
                        help="max_tokens of a chat request that gives none (at most the rest of the context)")
    parser.add_argument("--shutdown-timeout", type=float, default=30.0,
                        help="seconds requests in flight may finish after SIGTERM")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])


def build(args: argparse.Namespace, make_llm: Callable[..., Any]) -> Any:
    """The app for these arguments (the checkpoint loaded and the engine running)."""
    from baton.async_llm import AsyncLLM
    from baton.serving.app import build_app
    from baton.serving.protocol import Defaults

    model_dir = pathlib.Path(args.model)
    generation = model_dir / "generation_config.json"
    config = json.loads(generation.read_text()) if generation.exists() else {}
    defaults = Defaults.from_generation_config(config, chat_max_tokens=args.chat_max_tokens)
    extra = {"max_requests": args.max_requests} if args.max_requests else {}
    if args.max_logprobs is not None:
        extra["max_logprobs"] = args.max_logprobs
    llm = make_llm(args, load_progress=True, **extra)
    engine = AsyncLLM(llm)
    return build_app(engine, args.served_model_name or model_dir.name, model_path=str(args.model),
                     api_key=args.api_key, max_body_bytes=args.max_body_bytes, defaults=defaults)


def serve(args: argparse.Namespace, make_llm: Callable[..., Any]) -> int:
    try:
        import uvicorn
    except ImportError as e:
        print(f"baton: serve needs FastAPI, uvicorn and prometheus_client ({e}): pip install '.[serve]'",
              file=sys.stderr)
        return 2
    app = build(args, make_llm)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=args.shutdown_timeout, access_log=False)
    server = uvicorn.Server(config)
    print(f"baton: serving {args.model} as '{app.state.metrics.model_name}' on http://{args.host}:{args.port}/v1",
          file=sys.stderr, flush=True)
    # uvicorn handles SIGTERM/SIGINT while it serves (stop accepting, drain, cancel at the deadline) and then
    # raises the signal again under the handler that was set before it ran: this one, so that the engine is
    # closed and the process exits 0 instead of dying by the signal.
    received = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: received.append(number))
    try:
        server.run()
    finally:
        app.state.engine.close()
    print("baton: stopped", file=sys.stderr, flush=True)
    return 0
