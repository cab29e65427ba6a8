"""`stream=true` on the OpenAI routes: server-sent events as OpenAI's audio API sends them.

    event: transcript.text.delta    data: {"type": "transcript.text.delta", "delta": " Hello."}
    ...                             (one per window with text, in order, as its batch finishes;
                                     the first window is decoded alone)
    event: transcript.text.segment  data: {"type": "transcript.text.segment", "id", "start",
                                           "end", "text", "speaker"}   (diarized_json only)
    event: transcript.text.done     data: {"type": "transcript.text.done", "text": ...,
                                           "view": {...}}   (with timestamp_granularities[]=word)

The deltas join into the done event's `text`, which is the non-streaming answer's `text`.
Speaker labels need the whole recording (the diarizer runs after the last window), so segment
events with speakers come after the last delta, just before `done`; they are diarized_json's
segments, so they never overlap even where two speakers talk at once. With word timestamps asked
for, the done event also carries `view`, the transcript as the web page draws it (whosaid.ui.view's
`view_data`: turns, and segments with their timed words), so the page needs no second request.

The request is admitted like any other (auth, body limit, queue, time budget). Nothing is sent
until the audio has been decoded and accepted: a request that fails before that (queue full,
not audio, too long) gets its ordinary HTTP error. A failure after the stream began (time budget,
shutdown, a model failure) arrives as one `error` event with the usual error body, which the
openai SDK raises as an APIError. A client that disconnects stops the job at its next window
batch, freeing the slot. While a window batch takes long, an SSE comment every
`KEEPALIVE_INTERVAL_S` keeps proxies from closing the idle connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator, Optional, Sequence

from fastapi import Request
from fastapi.responses import StreamingResponse

from whosaid.errors import WhosaidError
from whosaid.formats import FORMATS, OutputFormat, to_diarized_json
from whosaid.results import Transcript
from whosaid.server.errors import ApiError, ErrorDetail, ErrorResponse, core_error_status, error_type
from whosaid.server.service import TranscriptionService
from whosaid.ui.view import view_data

logger = logging.getLogger(__name__)

#: Longest silence on a streamed response: proxies commonly cut connections idle for 60 s.
KEEPALIVE_INTERVAL_S = 15.0
#: The formats a stream can carry (its events hold the text and speakers, not timings), as the
#: error for the others says.
_STREAMED = [row for row in FORMATS.values() if row.streamable]
STREAMABLE = "response_format {}; {} adds segments with speakers".format(
    " or ".join(row.name for row in _STREAMED if not row.needs_speakers),
    " or ".join(row.name for row in _STREAMED if row.needs_speakers),
)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# What the job thread reports, in order, through the queue.
_ACCEPTED, _TEXT, _FINISHED = "accepted", "text", "finished"


class _QueueListener:
    """Hands the job thread's progress to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: "asyncio.Queue[tuple[str, Any]]") -> None:
        self._loop = loop
        self._queue = queue

    def accepted(self, duration_s: float) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (_ACCEPTED, duration_s))

    def text(self, delta: str) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (_TEXT, delta))


# Jobs whose client left keep running until their next window batch: held here so that the
# event loop does not drop the task before it has freed its slot.
_detached_jobs: set[asyncio.Task] = set()


async def stream_transcription(
    request: Request,
    service: TranscriptionService,
    data: bytes,
    parameters: dict[str, object],
    *,
    extra_warnings: Sequence[str],
    output_format: OutputFormat,
    view: bool = False,
) -> StreamingResponse:
    """Starts the job; returns the event stream once the audio is accepted (or raises the
    job's error, answered as a plain HTTP error, when it fails before that)."""
    if not output_format.streamable:
        raise ApiError(
            422,
            "invalid_parameters",
            f"stream=true sends the text as events ({STREAMABLE}); {output_format.name} needs the whole "
            "transcript: send stream=false",
            param="stream",
        )
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    client_gone = asyncio.Event()

    async def is_disconnected() -> bool:
        return client_gone.is_set() or await request.is_disconnected()

    job = asyncio.create_task(
        service.transcribe(
            data,
            parameters,
            extra_warnings=extra_warnings,
            is_disconnected=is_disconnected,
            listener=_QueueListener(loop, queue),
        )
    )
    job.add_done_callback(lambda _: queue.put_nowait((_FINISHED, None)))
    kind, _ = await queue.get()
    if kind == _FINISHED:  # failed before the audio was accepted: the ordinary error answer
        await job
        raise AssertionError("a job finished without accepting its audio")
    events = _events(job, queue, client_gone, diarized=output_format.needs_speakers, view=view)
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


async def _events(
    job: "asyncio.Task[Transcript]",
    queue: "asyncio.Queue[tuple[str, Any]]",
    client_gone: asyncio.Event,
    *,
    diarized: bool,
    view: bool,
) -> AsyncIterator[str]:
    finished = False
    try:
        while True:
            try:
                kind, value = await asyncio.wait_for(queue.get(), KEEPALIVE_INTERVAL_S)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if kind == _TEXT:
                yield _event("transcript.text.delta", {"type": "transcript.text.delta", "delta": value})
            elif kind == _FINISHED:
                finished = True
                for event in _final_events(job, diarized=diarized, view=view):
                    yield event
                return
    finally:
        if not finished:
            # The client left (the response was cancelled): the limiter's watcher stops the job
            # at its next window batch; keep the task until then.
            client_gone.set()
            _detached_jobs.add(job)
            job.add_done_callback(_forget_detached)


def _final_events(job: "asyncio.Task[Transcript]", *, diarized: bool, view: bool) -> list[str]:
    try:
        transcript = job.result()
    except (ApiError, WhosaidError) as error:
        return [_error_event(error)]
    except Exception:  # noqa: BLE001 - the stream has begun: the client gets an error event
        logger.exception("a streamed transcription failed unexpectedly")
        return [_error_event(None)]
    events = []
    if diarized:
        for segment in to_diarized_json(transcript).segments:
            events.append(_event(segment.type, segment.model_dump(mode="json")))
    done: dict[str, Any] = {"type": "transcript.text.done", "text": transcript.text}
    languages = _languages(transcript)
    if languages:
        done["languages"] = [{"code": code} for code in languages]
    if transcript.warnings:
        done["warnings"] = list(transcript.warnings)
    if view:
        done["view"] = view_data(transcript)
    events.append(_event("transcript.text.done", done))
    return events


def _languages(transcript: Transcript) -> list[str]:
    codes = [chunk.language for chunk in transcript.chunks if chunk.language] or [transcript.language]
    return list(dict.fromkeys(code for code in codes if code))


def _error_event(error: Optional[Exception]) -> str:
    if isinstance(error, ApiError):
        status_code, code, message = error.status_code, error.code, error.message
    elif isinstance(error, WhosaidError):
        status_code, code, message = core_error_status(error)[0], error.code, str(error)
        logger.warning("a streamed transcription stopped: %s", error)
    else:
        status_code, code, message = 500, "internal_error", "internal server error; see the server log"
    detail = ErrorDetail(message=message, type=error_type(status_code), code=code)
    return _event("error", {"type": "error", **ErrorResponse(error=detail).model_dump(mode="json")})


def _event(name: str, payload: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _forget_detached(job: asyncio.Task) -> None:
    _detached_jobs.discard(job)
    if not job.cancelled() and job.exception() is not None:
        logger.info("the job of a client that left ended: %s", job.exception())

