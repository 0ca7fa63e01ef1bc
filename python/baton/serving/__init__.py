"""The OpenAI-compatible HTTP server (`python -m baton serve`): protocol (request checks, response and error
objects), metrics (Prometheus), app (the FastAPI routes over an AsyncLLM), run (uvicorn, signals). Needs the
`serve` extra: `pip install '.[serve]'` (FastAPI, uvicorn, prometheus_client)."""
