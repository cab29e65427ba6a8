"""The configuration of a live transcription session as OpenAI's Realtime API writes it, in its
current form (`session.update` with `type: "transcription"`) and its older beta form
(`transcription_session.update`), and the session objects sent back in each form.

An update changes only the fields it carries. Accepted and ignored, as fields of a server that
runs its own models: `model`, `noise_reduction`, `include`, `idle_timeout_ms`, semantic_vad's
`eagerness` (semantic_vad is detected as server_vad with its defaults). One addition to the
protocol: `known_speakers` `{name: clip}` (base64 audio or a data URL, as POST /'s
`known_speakers`) names the session's speakers whose voice matches a clip.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from whosaid.live.turns import TurnDetection

#: The only input the server takes: 16-bit PCM, mono, 24 kHz, little-endian (OpenAI's audio/pcm).
PCM_RATE_HZ = 24_000
DEFAULT_MODEL = "whisper-1"


class ProtocolError(Exception):
    """A client event the server cannot take: sent back as an `error` event, the session goes on."""

    def __init__(self, message: str, *, code: str = "invalid_value", param: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param


@dataclass(frozen=True)
class SessionConfig:
    model: str = DEFAULT_MODEL
    language: Optional[str] = None
    prompt: str = ""
    turn_detection: Optional[TurnDetection] = TurnDetection()
    known_speakers: tuple[tuple[str, str], ...] = ()

    def parameters(self) -> dict[str, Any]:
        """The core's request parameters (validated there, like every edge's)."""
        values: dict[str, Any] = {"language": self.language, "initial_prompt": self.prompt or None}
        if self.known_speakers:
            values["known_speakers"] = dict(self.known_speakers)
        return {name: value for name, value in values.items() if value is not None}

    def session(self, session_id: str) -> dict[str, Any]:
        """The current form of `session.created` / `session.updated`."""
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": PCM_RATE_HZ},
                    "noise_reduction": None,
                    "transcription": self._transcription(),
                    "turn_detection": self._turn_detection(),
                }
            },
            "include": [],
        }

    def beta_session(self, session_id: str) -> dict[str, Any]:
        """The older form of `transcription_session.updated`."""
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "input_audio_format": "pcm16",
            "input_audio_transcription": self._transcription(),
            "turn_detection": self._turn_detection(),
            "input_audio_noise_reduction": None,
            "include": [],
        }

    def _transcription(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "prompt": self.prompt}

    def _turn_detection(self) -> Optional[dict[str, Any]]:
        if self.turn_detection is None:
            return None
        return {"type": "server_vad", **dataclasses.asdict(self.turn_detection)}


def updated(config: SessionConfig, event: Mapping[str, Any]) -> SessionConfig:
    """`config` changed by a `session.update` event (the current form)."""
    session = _object(event.get("session"), "session")
    kind = session.get("type", "transcription")
    if kind != "transcription":
        raise ProtocolError(
            f"Invalid value: {kind!r}. This server runs transcription sessions only: send "
            "session.type 'transcription' (and connect with ?intent=transcription)",
            param="session.type",
        )
    changes: dict[str, Any] = {}
    audio_input = _object(_object(session.get("audio", {}), "session.audio").get("input", {}), "session.audio.input")
    if "format" in audio_input:
        _check_format(audio_input["format"])
    if "transcription" in audio_input:
        changes.update(_transcription(audio_input["transcription"], "session.audio.input.transcription"))
    if "turn_detection" in audio_input:
        changes["turn_detection"] = _turn_detection(audio_input["turn_detection"], "session.audio.input.turn_detection")
    if "known_speakers" in session:
        changes["known_speakers"] = _known_speakers(session["known_speakers"], "session.known_speakers")
    return dataclasses.replace(config, **changes)


def beta_updated(config: SessionConfig, event: Mapping[str, Any]) -> SessionConfig:
    """`config` changed by a `transcription_session.update` event (the older beta form)."""
    session = _object(event.get("session"), "session")
    changes: dict[str, Any] = {}
    if "input_audio_format" in session and session["input_audio_format"] != "pcm16":
        raise ProtocolError(
            f"Invalid value: {session['input_audio_format']!r}. Supported value: 'pcm16' (16-bit PCM, mono, "
            f"{PCM_RATE_HZ} Hz); G.711 is not supported",
            param="session.input_audio_format",
        )
    if session.get("input_audio_transcription") is not None:
        changes.update(_transcription(session["input_audio_transcription"], "session.input_audio_transcription"))
    if "turn_detection" in session:
        changes["turn_detection"] = _turn_detection(session["turn_detection"], "session.turn_detection")
    if "known_speakers" in session:
        changes["known_speakers"] = _known_speakers(session["known_speakers"], "session.known_speakers")
    return dataclasses.replace(config, **changes)


def _object(value: Any, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProtocolError(
            f"Invalid type for {param!r}: expected an object, but got {_type_name(value)}.",
            code="invalid_type",
            param=param,
        )
    return value


def _check_format(value: Any) -> None:
    audio_format = _object(value, "session.audio.input.format")
    kind = audio_format.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise ProtocolError(
            f"Invalid value: {kind!r}. Supported value: 'audio/pcm' (16-bit PCM, mono, {PCM_RATE_HZ} Hz); "
            "G.711 (audio/pcmu, audio/pcma) is not supported",
            param="session.audio.input.format.type",
        )
    rate = audio_format.get("rate", PCM_RATE_HZ)
    if rate != PCM_RATE_HZ:
        raise ProtocolError(
            f"Invalid value: {rate!r}. Supported value: {PCM_RATE_HZ} (audio/pcm is 24 kHz); resample "
            "the audio before sending it",
            param="session.audio.input.format.rate",
        )


def _transcription(value: Any, param: str) -> dict[str, Any]:
    transcription = _object(value, param)
    changes: dict[str, Any] = {}
    for name, key in (("model", "model"), ("language", "language"), ("prompt", "prompt")):
        if name not in transcription:
            continue
        given = transcription[name]
        if given is not None and not isinstance(given, str):
            raise ProtocolError(
                f"Invalid type for '{param}.{name}': expected a string, but got {_type_name(given)}.",
                code="invalid_type",
                param=f"{param}.{name}",
            )
        changes[key] = given if given is not None or name == "language" else ""
    if changes.get("model") == "":
        changes["model"] = DEFAULT_MODEL
    return changes


def _turn_detection(value: Any, param: str) -> Optional[TurnDetection]:
    if value is None:
        return None
    settings = _object(value, param)
    kind = settings.get("type", "server_vad")
    if kind == "semantic_vad":
        return TurnDetection()
    if kind != "server_vad":
        raise ProtocolError(
            f"Invalid value: {kind!r}. Supported values are: 'server_vad' and 'semantic_vad'.", param=f"{param}.type"
        )
    defaults = TurnDetection()
    threshold = _number(settings, "threshold", defaults.threshold, param, low=0.0, high=1.0)
    padding = _number(settings, "prefix_padding_ms", defaults.prefix_padding_ms, param, low=0, high=10_000)
    silence = _number(settings, "silence_duration_ms", defaults.silence_duration_ms, param, low=100, high=10_000)
    return TurnDetection(threshold=float(threshold), prefix_padding_ms=int(padding), silence_duration_ms=int(silence))


def _number(settings: Mapping[str, Any], name: str, default: float, param: str, *, low: float, high: float) -> float:
    value = settings.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ProtocolError(
            f"Invalid value for '{param}.{name}': {value!r}; expected a number from {low:g} to {high:g}.",
            param=f"{param}.{name}",
        )
    return value


def _known_speakers(value: Any, param: str) -> tuple[tuple[str, str], ...]:
    speakers = _object(value, param)
    pairs = []
    for name, clip in speakers.items():
        if not isinstance(clip, str):
            raise ProtocolError(
                f"Invalid type for '{param}.{name}': expected base64 audio or a data URL, but got {_type_name(clip)}.",
                code="invalid_type",
                param=f"{param}.{name}",
            )
        pairs.append((str(name), clip))
    return tuple(pairs)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )
