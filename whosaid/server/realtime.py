"""One live transcription session over a WebSocket: OpenAI's Realtime transcription protocol,
with speakers.

    client                                   server
    ------                                   ------
                                             session.created
    session.update / transcription_session.update
                                             session.updated / transcription_session.updated
    input_audio_buffer.append {audio}        (server_vad) input_audio_buffer.speech_started
                                             conversation.item.input_audio_transcription.delta ...
                                             (server_vad) input_audio_buffer.speech_stopped
    input_audio_buffer.commit (no VAD)       input_audio_buffer.committed
                                             ...delta (the rest of the turn)
                                             ...segment {speaker, start, end, text}
                                             ...completed {transcript} | ...failed {error}
    input_audio_buffer.clear                 input_audio_buffer.cleared
    anything wrong                           error {type, code, message, param, event_id}

Two tasks share the session. The receiver reads client events, feeds the audio to the input
buffer and its turn detection (whosaid.live.turns), and queues committed turns. The transcriber
takes the queued turns in order and, between them, transcribes the turn being spoken again as it
grows: the words two hypotheses agree on go out as deltas (whosaid.live.agreement). These
drafts decode the turn alone, greedy, without the retry with beams: a fraction of a final's
cost, so they come often. Every model call runs through the server's JobLimiter, so live
sessions and file requests share the same job slots and never call the models at once. As soon
as a pause begins, the turn is transcribed as if the pause ended it (a hypothesis on exactly the
audio it would be committed with, after the session's earlier speech, as a final is): the words
it agrees on with the draft before go out at once, then, unless the speech has gone on by then,
its speakers are found. When the pause does end the turn, that is the turn's final result and
`completed` follows `speech_stopped` at once. The turn's speakers come from CAM++ embeddings
clustered against the session's speakers so far (whosaid.live.speakers).

Backpressure: at most MAX_PENDING_TURNS committed turns wait for transcription; beyond that the
receiver stops reading the socket until one is done, so a client sending faster than real time
is slowed down by TCP itself instead of filling the server's memory. Hypotheses are skipped while
other jobs wait for a slot. A client that vanishes ends both tasks; its running job stops at its
next window batch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, TypeVar

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from whosaid.audio.loading import Audio
from whosaid.config import InferenceConfig
from whosaid.engine import Engine
from whosaid.errors import InvalidAudioError, SupersededError, WhosaidError
from whosaid.live.agreement import StablePrefix
from whosaid.live.pcm import Pcm16Stream
from whosaid.live.repeats import crammed_repeats
from whosaid.live.speakers import LiveSpeakers, SpeakerContext, TurnSpeakers
from whosaid.live.turns import RATE, InputBuffer
from whosaid.results import Transcript
from whosaid.runtime.cancellation import StopSignal
from whosaid.runtime.failures import as_core_errors
from whosaid.server.errors import ApiError, core_error_status, error_type
from whosaid.server.realtime_config import PCM_RATE_HZ, ProtocolError, SessionConfig, beta_updated, updated
from whosaid.server.service import TranscriptionService

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Committed turns that may wait for transcription before the server stops reading the socket.
MAX_PENDING_TURNS = 4
#: A new hypothesis of the turn being spoken once it has grown by this much audio.
HYPOTHESIS_STEP_S = 0.5
#: Less audio than this is not worth a hypothesis.
MIN_HYPOTHESIS_S = 0.5
#: Earlier speech decoded before each turn, for Whisper's context.
ASR_CONTEXT_S = 5.0
#: Padding encoded after a turn's audio (SpeechRecognizer.trimmed): seconds, not Whisper's 30.
ENCODER_MARGIN_S = 3.0
#: How long a session that ended waits for its running job to stop before abandoning it.
STOP_WAIT_S = 30.0
#: How far the VAD's view of where a turn's speech ends may move between the hypothesis made
#: when its pause began and the pause being heard out (Silero moves a region's end by up to a few
#: frames as more silence follows it): the turn is committed where that hypothesis ended (when
#: its speech ends before), so that it is the turn's final result. Less than a resumed speech
#: region moves it (at least its 250 ms).
PAUSE_END_TOLERANCE_S = 0.25
#: OpenAI refuses to commit less audio than this (input_audio_buffer_commit_empty).
MIN_COMMIT_S = 0.1
#: Longest buffer without turn detection (the client commits it); past this appends are refused.
MAX_MANUAL_BUFFER_S = 600.0
CLIENT_EVENTS = (
    "session.update",
    "transcription_session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class Turn:
    """One user item: audio from `start_s` on the session clock."""

    item_id: str
    start_s: float
    previous_item_id: Optional[str]
    prefix: StablePrefix = field(default_factory=StablePrefix)
    end_s: Optional[float] = None  # set when committed
    samples: Optional[np.ndarray] = None  # set when committed
    speech_end_s: Optional[float] = None  # the end of its last speech, when the VAD knows it
    speech_start_s: Optional[float] = None  # its speech's start less the prefix padding (VAD turns)
    hypothesis: Optional[Hypothesis] = None  # the last one
    hypothesis_end_s: float = 0.0  # where the last one started (or finished) ends
    pause_end_s: Optional[float] = None  # where the last one ends, when made at a pause

    def pause_hypothesis_ends_near(self, end_s: float) -> bool:
        return self.pause_end_s is not None and abs(end_s - self.pause_end_s) <= PAUSE_END_TOLERANCE_S

    def speech_offset_s(self) -> float:
        """Where the speech starts in the turn's audio (0 where the audio reaches no further back)."""
        return 0.0 if self.speech_start_s is None else max(self.speech_start_s - self.start_s, 0.0)


@dataclass(frozen=True)
class Hypothesis:
    """A transcript of a turn being spoken, up to `end_s`, with what it was decoded with; taken
    as the turn's final result when the turn is committed at `end_s` with the same settings
    and session context. A hypothesis made at a pause also has the turn's speakers, unless the
    speech went on before they were found."""

    transcript: Transcript
    end_s: float
    config: InferenceConfig
    context_version: int
    speakers: Optional[TurnSpeakers] = None
    at_pause: bool = False

    def final_for(self, turn: Turn, config: InferenceConfig, context_version: int) -> bool:
        return (self.end_s, self.config, self.context_version) == (turn.end_s, config, context_version)


class SessionEnded(Exception):
    """The session ends with an error event already sent (timeouts, a refused message)."""


class RealtimeSession:
    def __init__(
        self,
        websocket: WebSocket,
        service: TranscriptionService,
        *,
        max_session_s: float,
        idle_timeout_s: float,
    ) -> None:
        self.websocket = websocket
        self.service = service
        self.engine = service.engine()
        # Engine.transcribe without a diarizer: speech recognition only (silence answered with
        # nothing, errors typed as everywhere), a turn's encoder pass as long as the turn and its
        # context; speakers are found turn by turn here.
        self.asr = Engine(
            self.engine.recognizer.trimmed(ENCODER_MARGIN_S),
            None,
            max_audio_duration_s=self.engine.max_audio_duration_s,
        )
        # Hypotheses before a pause are drafts: a window failing Whisper's checks is left out
        # rather than decoded again with beams, which would delay the hypothesis made at the pause.
        self.drafts = Engine(
            self.engine.recognizer.trimmed(ENCODER_MARGIN_S, retry_with_beams=False),
            None,
            max_audio_duration_s=self.engine.max_audio_duration_s,
        )
        self.max_session_s = max_session_s
        self.idle_timeout_s = idle_timeout_s
        self.session_id = new_id("sess")
        self.config = SessionConfig()
        self.inference_config = self._inference_config(self.config)
        self.buffer = InputBuffer(self.engine.recognizer.vad, self.config.turn_detection)
        self.pcm = Pcm16Stream(PCM_RATE_HZ)
        identifier = self.engine.speaker_identifier
        self.speakers: Optional[LiveSpeakers] = None
        self.context: Optional[SpeakerContext] = None
        if identifier is not None and self.engine.diarizer is not None:
            self.speakers = LiveSpeakers(
                identifier.embedding.same_speaker_similarity, identifier.library, identifier.threshold
            )
            self.context = SpeakerContext(self.engine.diarizer, identifier)
        self.live_turn: Optional[Turn] = None
        self.recent_audio = np.zeros(0, np.float32)  # the end of the committed turns' audio
        self.context_version = 0
        self.hypothesis_cost_s = 0.0  # wall time of the last hypothesis
        self._draft_stop: Optional[StopSignal] = None  # the running draft's, while one runs
        self.last_item_id: Optional[str] = None
        self.pending: asyncio.Queue[Turn] = asyncio.Queue(maxsize=MAX_PENDING_TURNS)
        self.wake = asyncio.Event()
        self.gone = False
        self._send_lock = asyncio.Lock()

    # ---- the session's life -----------------------------------------------------------------

    async def run(self, subprotocol: Optional[str]) -> None:
        await self.websocket.accept(subprotocol=subprotocol)
        await self.send("session.created", session=self.config.session(self.session_id))
        transcriber = asyncio.create_task(self._transcribe_turns())
        deadline = time.monotonic() + self.max_session_s
        try:
            while True:
                text = await self._receive(deadline)
                if text is None:
                    break
                await self._handle(text)
        except SessionEnded:
            await self._close(1000)
        finally:
            # The running job sees `gone` through the limiter's watcher and stops at its next
            # window batch; cancelling the task instead would leave its thread running unseen.
            self.gone = True
            self.wake.set()
            done, _ = await asyncio.wait([transcriber], timeout=STOP_WAIT_S)
            if not done:
                transcriber.cancel()
                await asyncio.gather(transcriber, return_exceptions=True)

    async def _receive(self, deadline: float) -> Optional[str]:
        """The next text message; None once the client has gone."""
        remaining_s = deadline - time.monotonic()
        timeout_s = min(self.idle_timeout_s, remaining_s)
        try:
            message = await asyncio.wait_for(self.websocket.receive(), timeout=max(timeout_s, 0.0))
        except asyncio.TimeoutError:
            if timeout_s >= remaining_s:
                await self.error(
                    f"Your session hit the maximum duration of {self.max_session_s:g} s (REALTIME_MAX_SESSION_S).",
                    code="session_expired",
                )
            else:
                await self.error(
                    f"The client sent nothing for {self.idle_timeout_s:g} s (REALTIME_IDLE_TIMEOUT_S); "
                    "the session was closed. Send audio, or close the session when done.",
                    code="idle_timeout",
                )
            raise SessionEnded() from None
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("text") is not None:
            return message["text"]
        await self.error(
            "Binary messages are not supported: send JSON text events, with audio as base64 in "
            "input_audio_buffer.append.",
            code="invalid_value",
        )
        return ""

    async def _close(self, code: int) -> None:
        try:
            await self.websocket.close(code)
        except (RuntimeError, WebSocketDisconnect):  # already closed by the client
            pass

    # ---- client events --------------------------------------------------------------------------

    async def _handle(self, text: str) -> None:
        if not text:
            return
        event_id = None
        try:
            try:
                event = json.loads(text)
            except json.JSONDecodeError as error:
                raise ProtocolError(
                    f"The message is not valid JSON ({error}); send each event as a JSON object.",
                    code="invalid_json",
                ) from error
            if not isinstance(event, dict):
                raise ProtocolError("An event must be a JSON object with a 'type'.", code="invalid_type")
            event_id = event.get("event_id")
            kind = event.get("type")
            if kind is None:
                raise ProtocolError(
                    "Missing required parameter: 'type'.", code="missing_required_parameter", param="type"
                )
            if kind not in CLIENT_EVENTS:
                supported = ", ".join(repr(name) for name in CLIENT_EVENTS)
                raise ProtocolError(f"Invalid value: {kind!r}. Supported values are: {supported}.", param="type")
            if kind == "session.update":
                await self._update(updated(self.config, event), beta=False)
            elif kind == "transcription_session.update":
                await self._update(beta_updated(self.config, event), beta=True)
            elif kind == "input_audio_buffer.append":
                await self._append(event.get("audio"))
            elif kind == "input_audio_buffer.commit":
                await self._commit_manually()
            else:
                self.buffer.clear()
                self.live_turn = None
                await self.send("input_audio_buffer.cleared")
        except ProtocolError as error:
            await self.error(error.message, code=error.code, param=error.param, event_id=event_id)

    async def _update(self, config: SessionConfig, *, beta: bool) -> None:
        try:
            inference_config = self._inference_config(config)
            # The language is checked against the loaded model now, not at the first turn.
            check_options = getattr(self.engine.recognizer, "decoding_options", None)
            if check_options is not None:
                check_options(inference_config)
        except WhosaidError as error:
            raise ProtocolError(str(error), param="session.audio.input.transcription") from error
        if config.known_speakers != self.config.known_speakers and self.speakers is not None:
            try:
                voices = await self._job(lambda stop: self.engine.known_voices(inference_config))
            except (WhosaidError, ApiError) as error:
                raise ProtocolError(_message(error), param="session.known_speakers") from error
            self.speakers.voices = voices
        elif config.known_speakers and self.speakers is None:
            raise ProtocolError(
                "known speakers need the built-in diarizer: start the server with DIARIZATION_MODEL=builtin",
                param="session.known_speakers",
            )
        if config.turn_detection != self.config.turn_detection:
            self.buffer.detection = config.turn_detection
        self.config, self.inference_config = config, inference_config
        if beta:
            await self.send("transcription_session.updated", session=config.beta_session(self.session_id))
        else:
            await self.send("session.updated", session=config.session(self.session_id))

    def _inference_config(self, config: SessionConfig) -> InferenceConfig:
        # Word times cut the context off a turn's transcript, and place speaker changes in it.
        return self.engine.parse_parameters({**config.parameters(), "return_timestamps": "word"})[0]

    async def _append(self, audio: Any) -> None:
        if not isinstance(audio, str):
            raise ProtocolError(
                "Missing required parameter: 'audio' (base64-encoded 16-bit PCM).",
                code="missing_required_parameter",
                param="audio",
            )
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError) as error:
            raise ProtocolError(
                "Invalid 'audio'. Expected base64-encoded audio bytes, but got a value that wasn't valid base64.",
                param="audio",
            ) from error
        try:
            samples = self.pcm.feed(pcm)
        except InvalidAudioError as error:
            raise ProtocolError(str(error), param="audio") from error
        manual = self.buffer.detection is None
        if manual and self.buffer.duration_s + samples.size / RATE > MAX_MANUAL_BUFFER_S:
            raise ProtocolError(
                f"The input audio buffer would hold more than {MAX_MANUAL_BUFFER_S:g} s; commit it "
                "(input_audio_buffer.commit) or use server_vad turn detection.",
                code="input_audio_buffer_full",
                param="audio",
            )
        if self.buffer.detection is None and self.live_turn is None:
            self.live_turn = self._new_turn(self.buffer.start_s)
        for buffer_event in self.buffer.append(samples):
            if buffer_event.kind == "speech_started":
                self.live_turn = self._new_turn(buffer_event.audio_start_s, buffer_event.time_s)
                await self.send(
                    "input_audio_buffer.speech_started",
                    audio_start_ms=_ms(buffer_event.time_s),
                    item_id=self.live_turn.item_id,
                )
            elif self.live_turn is not None:
                await self.send(
                    "input_audio_buffer.speech_stopped",
                    audio_end_ms=_ms(buffer_event.time_s),
                    item_id=self.live_turn.item_id,
                )
                self.live_turn.speech_end_s = self.buffer.last_speech_end_s
                await self._commit(self._turn_end_s(self.live_turn, buffer_event.turn_end_s))
        self.wake.set()

    def _stop_draft(self) -> None:
        """A running draft stops at its next token once its turn is committed: the turn's final
        starts at once instead of after it. (Not when a pause begins: most pauses do not end the
        turn, and the draft's words would be lost.)"""
        stop = self._draft_stop
        if stop is not None:
            stop.cancel(SupersededError("a live draft was stopped: its turn was committed"))

    async def _commit_manually(self) -> None:
        if self.buffer.duration_s < MIN_COMMIT_S:
            raise ProtocolError(
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"{MIN_COMMIT_S * 1000:g}ms of audio, but buffer only has "
                f"{self.buffer.duration_s * 1000:.2f}ms of audio.",
                code="input_audio_buffer_commit_empty",
            )
        if self.live_turn is None:
            self.live_turn = self._new_turn(self.buffer.start_s)
        await self._commit(None)

    def _turn_end_s(self, turn: Turn, heard_end_s: float) -> float:
        """Where a turn whose pause was heard out is committed: where its pause hypothesis ended
        when that is within PAUSE_END_TOLERANCE_S and after its speech, else `heard_end_s`."""
        pause_end_s = turn.pause_end_s
        if pause_end_s is not None and turn.pause_hypothesis_ends_near(heard_end_s):
            return pause_end_s if pause_end_s > self.buffer.last_speech_end_s else heard_end_s
        return heard_end_s

    def _new_turn(self, start_s: float, speech_start_s: Optional[float] = None) -> Turn:
        return Turn(
            item_id=new_id("item"),
            start_s=start_s,
            previous_item_id=self.last_item_id,
            speech_start_s=speech_start_s,
        )

    async def _commit(self, end_s: Optional[float]) -> None:
        turn = self.live_turn
        assert turn is not None
        self.live_turn = None
        self._stop_draft()
        end_s = self.buffer.end_s if end_s is None else end_s
        taken_start_s, taken = self.buffer.take(end_s)
        turn.start_s = max(turn.start_s, taken_start_s)
        turn.samples = taken[int(round((turn.start_s - taken_start_s) * RATE)) :]
        turn.end_s = end_s
        self.last_item_id = turn.item_id
        await self.send("input_audio_buffer.committed", item_id=turn.item_id, previous_item_id=turn.previous_item_id)
        self.wake.set()
        if not self.gone:  # once gone, nobody takes turns off the queue
            await self.pending.put(turn)  # waits while MAX_PENDING_TURNS are pending: backpressure

    # ---- transcription --------------------------------------------------------------------------

    async def _transcribe_turns(self) -> None:
        try:
            await self._transcribe_turns_in_order()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the client must hear that its session broke
            logger.exception("a live session's transcription failed unexpectedly")
            await self.send(
                "error",
                error={
                    "type": "server_error",
                    "code": "internal_error",
                    "message": "the session's transcription failed; see the server log",
                    "param": None,
                    "event_id": None,
                },
            )
            await self._close(1011)
        finally:
            # Nobody transcribes the waiting turns any more: free a receiver blocked on the queue.
            self.gone = True
            while not self.pending.empty():
                self.pending.get_nowait()

    async def _transcribe_turns_in_order(self) -> None:
        while not self.gone:
            if not self.pending.empty():
                await self._finish(self.pending.get_nowait())
                continue
            turn = self.live_turn
            end_s = self._hypothesis_end_s(turn) if turn is not None else None
            if turn is not None and end_s is not None:
                await self._hypothesise(turn, end_s)
                continue
            self.wake.clear()
            await self.wake.wait()

    def _hypothesis_end_s(self, turn: Turn) -> Optional[float]:
        """Where the next hypothesis of the turn being spoken should end, None when none is due:
        once a pause has begun, exactly where the turn ends if the pause ends it (so that the
        final transcript is that hypothesis, not a second decoding); else the newest audio, once
        it has grown by HYPOTHESIS_STEP_S."""
        limiter = self.service.limiter
        if limiter.waiting or limiter.running >= limiter.max_concurrent:
            return None
        pause_end_s = self.buffer.turn_end_if_pause_s()
        if pause_end_s is not None:
            return None if turn.pause_hypothesis_ends_near(pause_end_s) else pause_end_s
        end_s = self.buffer.end_s
        # Hypotheses take at most about half of the session's time, so that the final
        # transcripts, which decide the `completed` latency, are never starved.
        step_s = max(HYPOTHESIS_STEP_S, self.hypothesis_cost_s)
        if end_s - turn.start_s >= MIN_HYPOTHESIS_S and end_s - turn.hypothesis_end_s >= step_s:
            return end_s
        return None

    async def _hypothesise(self, turn: Turn, end_s: float) -> None:
        """A hypothesis of the turn up to `end_s`; its new agreed words go out as a delta. At a
        pause (`end_s` is where the pause would end the turn) it is the whole of the turn's final
        work, done while the client waits for the pause to be heard out: the transcript (the
        audio ends between words: no word is held back as unsettled), then the speakers."""
        samples = self.buffer.samples(turn.start_s, end_s)
        turn.hypothesis_end_s = end_s
        config, version = self.inference_config, self.context_version
        at_pause = end_s == self.buffer.turn_end_if_pause_s()
        turn.pause_end_s = end_s if at_pause else None
        started = time.monotonic()
        speakers = None
        try:
            if at_pause:
                speech_s = turn.speech_offset_s()
                transcript = await self._job(lambda stop: self._recognise(samples, config, stop, speech_s=speech_s))
            else:
                transcript = await self._job(lambda stop: self._draft(samples, config, stop))
        except SupersededError:
            return
        except (WhosaidError, ApiError) as error:
            logger.info("a hypothesis of a live turn failed: %s", _message(error))
            return
        self.hypothesis_cost_s = time.monotonic() - started
        delta = turn.prefix.update(transcript.text, word_times(transcript), at_pause=at_pause)
        if delta:
            await self._delta(turn, delta)
        if at_pause and not self._speech_went_on(turn, end_s):
            # The words go out first; the speakers, the rest of the turn's final work, after
            # (not when the speech went on after the pause: the turn does not end there).
            try:
                speakers = await self._job(lambda stop: self._speakers(samples, transcript, config, stop))
            except (WhosaidError, ApiError) as error:
                logger.info("the speakers of a live turn's hypothesis failed: %s", _message(error))
                return
        turn.hypothesis = Hypothesis(transcript, end_s, config, version, speakers, at_pause)

    def _speech_went_on(self, turn: Turn, end_s: float) -> bool:
        """Whether speech went on after a pause at which the turn would have ended at `end_s`."""
        if self.live_turn is not turn:  # committed since
            return turn.end_s != end_s
        return not self.buffer.paused_at(end_s, PAUSE_END_TOLERANCE_S)

    async def _finish(self, turn: Turn) -> None:
        assert turn.samples is not None and turn.end_s is not None
        samples, config, speech_s = turn.samples, self.inference_config, turn.speech_offset_s()
        final = turn.hypothesis
        if final is not None and not final.final_for(turn, config, self.context_version):
            final = None
        try:
            if final is not None and final.at_pause and final.speakers is not None:
                transcript, turn_speakers = final.transcript, final.speakers
            else:
                reused = None if final is None else final.transcript
                transcript, turn_speakers = await self._job(
                    lambda stop: self._final(samples, config, reused, stop, speech_s)
                )
        except (WhosaidError, ApiError) as error:
            status, code = _status_and_code(error)
            await self.send(
                "conversation.item.input_audio_transcription.failed",
                item_id=turn.item_id,
                content_index=0,
                error={"type": error_type(status), "code": code, "message": _message(error), "param": None},
            )
            return
        self._remember_audio(samples)
        delta = turn.prefix.complete(transcript.text, word_times(transcript))
        if delta:
            await self._delta(turn, delta)
        if self.context is not None and self.speakers is not None and turn_speakers is not None:
            labels = turn_speakers.labels(self.speakers)
            for part in turn_speakers.parts:
                await self.send(
                    "conversation.item.input_audio_transcription.segment",
                    item_id=turn.item_id,
                    content_index=0,
                    id=new_id("seg"),
                    speaker=labels[part.speaker],
                    start=round(turn.start_s + part.start_s, 3),
                    end=round(turn.start_s + part.end_s, 3),
                    text=part.text,
                )
            self.context.remember(turn.start_s, samples, turn_speakers, labels)
        await self.send(
            "conversation.item.input_audio_transcription.completed",
            item_id=turn.item_id,
            content_index=0,
            transcript=turn.prefix.text,
            usage={"type": "duration", "seconds": round(samples.size / RATE, 3)},
        )

    def _recognise(
        self,
        samples: np.ndarray,
        config: InferenceConfig,
        stop: StopSignal,
        *,
        draft: bool = False,
        speech_s: float = 0.0,
    ) -> Transcript:
        """The turn's transcript, decoded after up to ASR_CONTEXT_S of the session's earlier
        speech (as a file's window holds the sentence before): a turn cut at a pause in
        mid-sentence is heard as the sentence's continuation. Where no word lies in the turn
        (Whisper took a short turn for the end of the sentence before, or skipped it), the turn is
        decoded again on its own; where still none does, from `speech_s` on (its speech's start
        less the prefix padding): the audio the lookback adds before a backchannel ("Oh yeah", 0.7
        s) can be enough for Whisper to hear no speech. A `draft` (a hypothesis before a pause) is
        decoded on its own, greedy: a fraction of the cost, and a later hypothesis replaces it."""
        if draft:
            return turn_words(self.drafts.transcribe(Audio(samples), config, should_stop=stop), 0.0)
        context = self.recent_audio
        heard = self.asr.transcribe(Audio(np.concatenate([context, samples])), config, should_stop=stop)
        transcript = turn_words(heard, context.size / RATE)
        if context.size and not transcript.chunks:
            transcript = turn_words(self.asr.transcribe(Audio(samples), config, should_stop=stop), 0.0)
        speech = int(round(speech_s * RATE))
        if speech and not transcript.chunks:
            speech_alone = self.asr.transcribe(Audio(samples[speech:]), config, should_stop=stop)
            transcript = turn_words(speech_alone, -speech / RATE)
        return transcript

    def _draft(self, samples: np.ndarray, config: InferenceConfig, stop: StopSignal) -> Transcript:
        """A draft of the turn being spoken (in the job's thread), stoppable by the receiver
        (`_stop_draft`) through `stop`."""
        self._draft_stop = stop
        try:
            return self._recognise(samples, config, stop, draft=True)
        finally:
            self._draft_stop = None

    def _remember_audio(self, samples: np.ndarray) -> None:
        self.recent_audio = np.concatenate([self.recent_audio, samples])[-int(ASR_CONTEXT_S * RATE) :]
        self.context_version += 1

    def _final(
        self,
        samples: np.ndarray,
        config: InferenceConfig,
        reused: Optional[Transcript],
        stop: StopSignal,
        speech_s: float = 0.0,
    ) -> tuple[Transcript, Optional[TurnSpeakers]]:
        """A committed turn's transcript (the last hypothesis when it covered the whole turn)
        and who spoke which part of it."""
        transcript = reused if reused is not None else self._recognise(samples, config, stop, speech_s=speech_s)
        return transcript, self._speakers(samples, transcript, config, stop)

    def _speakers(
        self, samples: np.ndarray, transcript: Transcript, config: InferenceConfig, stop: StopSignal
    ) -> Optional[TurnSpeakers]:
        """Who spoke which part of a turn with this transcript (None without the built-in
        diarizer, or without words)."""
        if self.context is None or not transcript.text:
            return None
        stop.check()
        with as_core_errors("speaker diarization"):
            return self.context.diarize(samples, transcript.chunks, config.speaker_hints())

    async def _job(self, job: Callable[[StopSignal], T]) -> T:
        async def is_disconnected() -> bool:
            return self.gone

        return await self.service.limiter.run(job, is_disconnected=is_disconnected)

    async def _delta(self, turn: Turn, delta: str) -> None:
        await self.send(
            "conversation.item.input_audio_transcription.delta", item_id=turn.item_id, content_index=0, delta=delta
        )

    # ---- server events --------------------------------------------------------------------------

    async def send(self, kind: str, **payload: Any) -> None:
        if self.gone:
            return
        event = {"type": kind, "event_id": new_id("event"), **payload}
        try:
            async with self._send_lock:
                await self.websocket.send_text(json.dumps(event, ensure_ascii=False))
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.gone = True

    async def error(
        self, message: str, *, code: str, param: Optional[str] = None, event_id: Optional[str] = None
    ) -> None:
        await self.send(
            "error",
            error={
                "type": "invalid_request_error",
                "code": code,
                "message": message,
                "param": param,
                "event_id": event_id,
            },
        )


def turn_words(heard: Transcript, offset_s: float) -> Transcript:
    """The words of a decoding that are the turn's, which starts at `offset_s`: from the first
    whose middle lies after that, without the repeats Whisper squeezed in where the audio
    ends (whosaid.live.repeats), with times from the turn's start. A negative `offset_s`: the
    decoding started that far into the turn."""
    words = [(number, word) for number, chunk in enumerate(heard.chunks) for word in chunk.words]
    dropped = crammed_repeats([(word.text, word.start_s, word.end_s) for _, word in words])
    words = [pair for index, pair in enumerate(words) if index not in dropped]
    first = next(
        (index for index, (_, word) in enumerate(words) if (word.start_s + word.end_s) / 2 >= offset_s), len(words)
    )
    chunks = []
    for number, chunk in enumerate(heard.chunks):
        kept = tuple(
            replace(word, start_s=max(word.start_s - offset_s, 0.0), end_s=max(word.end_s - offset_s, 0.0))
            for owner, word in words[first:]
            if owner == number
        )
        if kept:
            text = "".join(word.text for word in kept)
            chunks.append(replace(chunk, start_s=kept[0].start_s, end_s=kept[-1].end_s, text=text, words=kept))
    if not offset_s and not dropped:
        return heard
    return replace(heard, chunks=tuple(chunks), text="".join(chunk.text for chunk in chunks).strip())


def word_times(transcript: Transcript) -> Optional[list[tuple[float, float]]]:
    """Each word of the transcript's text (split on spaces) with its (start, end) in seconds;
    None where its timed words do not split into the same words."""
    times = [
        (word.start_s, word.end_s) for chunk in transcript.chunks for word in chunk.words for _ in word.text.split()
    ]
    return times if len(times) == len(transcript.text.split()) else None


def _ms(time_s: float) -> int:
    return int(round(time_s * 1000))


def _message(error: Exception) -> str:
    return error.message if isinstance(error, ApiError) else str(error)


def _status_and_code(error: Exception) -> tuple[int, str]:
    if isinstance(error, ApiError):
        return error.status_code, error.code
    if isinstance(error, WhosaidError):
        return core_error_status(error)[0], error.code
    return 500, "internal_error"
