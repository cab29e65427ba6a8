"""Prometheus metrics of one app: traffic by route and status, latency, the audio it processed,
how fast (real-time factor), how much work waits, and which decoding path ran.

Each app owns its registry (not prometheus_client's global one), so that several apps in one
process, as in tests, count separately.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import InfoMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from whosaid.results import Transcript

# Audio lengths span a voice note to a long meeting.
AUDIO_DURATION_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
# Processing seconds per audio second: < 1 is faster than real time.
REAL_TIME_FACTOR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: Label for requests that matched no route: keeps scanners' random paths out of the label set.
UNMATCHED_ROUTE = "unmatched"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "whosaid_http_requests", "HTTP requests answered", ("method", "route", "status"), registry=self.registry
        )
        self.latency = Histogram(
            "whosaid_http_request_duration_seconds",
            "Time from request to response, queueing included",
            ("method", "route"),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.audio_duration = Histogram(
            "whosaid_audio_duration_seconds",
            "Duration of the decoded audio of each job",
            buckets=AUDIO_DURATION_BUCKETS_S,
            registry=self.registry,
        )
        self.real_time_factor = Histogram(
            "whosaid_real_time_factor",
            "Job processing seconds (decoding, recognition, diarization) per second of audio",
            buckets=REAL_TIME_FACTOR_BUCKETS,
            registry=self.registry,
        )
        self.decodings = Counter(
            "whosaid_transcriptions",
            "Finished transcriptions by decoding path: assisted (speculative, batch 1), batched, "
            "or none (silence: nothing to decode)",
            ("decoding",),
            registry=self.registry,
        )
        self.websocket_sessions = Gauge(
            "whosaid_websocket_sessions", "WebSocket sessions open now", ("route",), registry=self.registry
        )
        self.queue_depth = Gauge("whosaid_queue_depth", "Requests waiting for a job slot", registry=self.registry)
        self.jobs_running = Gauge("whosaid_jobs_running", "Jobs running now", registry=self.registry)
        self.model_ready = Gauge("whosaid_model_ready", "1 once the models are loaded", registry=self.registry)
        self.model_info = _InfoCollector(
            "whosaid_model",
            "The loaded ASR model and where it runs: device, dtype, attention implementation",
        )
        self.registry.register(self.model_info)

    def track(
        self,
        *,
        waiting: Callable[[], float],
        running: Callable[[], float],
        ready: Callable[[], float],
        model_info: Optional[Callable[[], Optional[dict[str, str]]]] = None,
    ) -> None:
        """Gauges read at scrape time from the objects that own the numbers. `model_info` gives
        the labels of whosaid_model_info, None while nothing is loaded."""
        self.queue_depth.set_function(waiting)
        self.jobs_running.set_function(running)
        self.model_ready.set_function(ready)
        if model_info is not None:
            self.model_info.labels = model_info

    def observe_transcript(self, transcript: Transcript, processing_s: float) -> None:
        self.audio_duration.observe(transcript.duration_s)
        if transcript.duration_s > 0:
            self.real_time_factor.observe(processing_s / transcript.duration_s)
        self.decodings.labels(decoding=transcript.decoding or "none").inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _InfoCollector(Collector):
    """An info metric (`<name>_info{...} 1`) whose labels are read at scrape time; absent until
    the labels exist (the models load in the background)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self.labels: Callable[[], Optional[dict[str, str]]] = lambda: None

    def collect(self) -> Iterator[Metric]:
        labels = self.labels()
        if labels is not None:
            yield InfoMetricFamily(self.name, self.documentation, value=labels)


class MetricsMiddleware:
    """Counts every response, 401s, 413s and 429s included, by the route template that matched.
    A WebSocket counts once, under method WEBSOCKET, with status 101 when it was accepted (its
    duration is the session's) or the status of the refusal (403 for a close before accepting);
    the sessions open now are a gauge."""

    def __init__(self, app: ASGIApp, metrics: Metrics, route_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.metrics = metrics
        # Requests refused before routing (an oversized body) have no matched route in the scope;
        # their path is used when it names one of these routes.
        self.route_paths = route_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering
        open_gauge: Optional[Gauge] = None

        async def send_and_record_status(message: Message) -> None:
            nonlocal status, open_gauge
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                status = message["status"]
            elif kind == "websocket.accept":
                status = 101
                open_gauge = self.metrics.websocket_sessions.labels(route=self._route(scope))
                open_gauge.inc()
            elif kind == "websocket.close" and status == 500:
                status = 403  # closed before accepting: the handshake was refused
            await send(message)

        try:
            await self.app(scope, receive, send_and_record_status)
        finally:
            if open_gauge is not None:
                open_gauge.dec()
            route = self._route(scope)
            method = scope.get("method", "WEBSOCKET")
            self.metrics.requests.labels(method=method, route=route, status=str(status)).inc()
            self.metrics.latency.labels(method=method, route=route).observe(time.perf_counter() - started)

    def _route(self, scope: Scope) -> str:
        # FastAPI puts the matched route in the scope; its template keeps labels bounded.
        route = getattr(scope.get("route"), "path", None)
        if route is None:
            route = scope["path"] if scope["path"] in self.route_paths else UNMATCHED_ROUTE
        return route
