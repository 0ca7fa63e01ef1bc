"""The server's Prometheus metrics (prometheus_client), named as vLLM names them with Baton's prefix
(vllm:time_to_first_token_seconds -> baton:time_to_first_token_seconds), in a registry of the app's own.

Per request (observed by the HTTP layer as the client sees it): time to first token, time per output token
(the tokens after the first over their span), end-to-end latency, prompt and generated token counts, and
finished requests by reason. At each scrape, from the runtime (LLM.stats(), a snapshot of the device's
counters): requests running (admitted, not finished) and waiting (queued, not admitted), KV pages used and
free, and the steps the device ran.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "baton:"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's buckets for the same histograms.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                    240.0, 480.0, 960.0, 1920.0, 7680.0)


class _RuntimeCollector:
    """Gauges and counters read from the runtime when Prometheus scrapes."""

    def __init__(self, stats: Callable[[], Dict[str, int]], info: Dict[str, Any]) -> None:
        self.stats, self.info = stats, info

    def collect(self) -> Iterator[Any]:
        try:
            s = self.stats()
        except Exception:  # a closed or failed engine: nothing to report
            return
        running = max(0, s["admitted"] - s["completed"])
        waiting = max(0, s["submitted"] - s["admitted"])
        total = self.info.get("kv_pool_pages", 0)
        yield GaugeMetricFamily(PREFIX + "num_requests_running", "Requests on the device (admitted, not finished).",
                                value=running)
        yield GaugeMetricFamily(PREFIX + "num_requests_waiting", "Requests queued, not yet admitted.",
                                value=waiting)
        yield GaugeMetricFamily(PREFIX + "kv_cache_pages_free", "KV-cache pages free in the pool.",
                                value=s["free_pages"])
        yield GaugeMetricFamily(PREFIX + "kv_cache_pages_used", "KV-cache pages held by sequences.",
                                value=max(0, total - s["free_pages"]))
        yield GaugeMetricFamily(PREFIX + "kv_cache_pages_reserved", "KV-cache pages the admitted requests reserve "
                                "(their prompt and max_tokens; mapped as they grow).", value=s["reserved_pages"])
        yield GaugeMetricFamily(PREFIX + "kv_cache_usage_perc", "Fraction of the KV-cache pool in use (0 to 1).",
                                value=(total - s["free_pages"]) / total if total else 0.0)
        yield CounterMetricFamily(PREFIX + "steps", "Decoder steps the device ran.", value=s["steps"])


class Metrics:
    def __init__(self, stats: Callable[[], Dict[str, int]], info: Dict[str, Any], model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token (arrival to first "
                              "token sent).", labels, buckets=_TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram(PREFIX + "time_per_output_token_seconds", "Time per output token after the first.",
                              labels, buckets=_TPOT_BUCKETS, registry=self.registry)
        self.latency = Histogram(PREFIX + "e2e_request_latency_seconds", "Request latency (arrival to last "
                                 "token).", labels, buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of finished requests.", labels,
                                     registry=self.registry)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Tokens generated for finished requests.",
                                         labels, registry=self.registry)
        self.success = Counter(PREFIX + "request_success", "Finished requests by finish reason.",
                               labels + ["finished_reason"], registry=self.registry)
        self.refused = Counter(PREFIX + "request_refused", "Requests refused, by HTTP status.",
                               labels + ["status"], registry=self.registry)
        self.model_name = model_name
        self.registry.register(_RuntimeCollector(stats, info))

    def finished(self, arrival: float, first: float | None, end: float, prompt_tokens: int, tokens: int,
                 reason: str) -> None:
        """One completion done (first: when its first token was sent; None when it produced none)."""
        m = self.model_name
        if first is not None:
            self.ttft.labels(m).observe(first - arrival)
            if tokens > 1:
                self.tpot.labels(m).observe((end - first) / (tokens - 1))
        self.latency.labels(m).observe(end - arrival)
        self.prompt_tokens.labels(m).inc(prompt_tokens)
        self.generation_tokens.labels(m).inc(tokens)
        self.success.labels(m, reason).inc()

    def refusal(self, status: int) -> None:
        self.refused.labels(self.model_name, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
