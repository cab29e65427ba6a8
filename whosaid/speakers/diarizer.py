"""Speaker diarization: the `Diarizer` interface, chosen by DIARIZATION_MODEL, and its pyannote.audio
implementation, which runs on the in-memory waveform (never a file path). The built-in diarizer
(DIARIZATION_MODEL=builtin) lives in whosaid.speakers.builtin."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from whosaid.audio.loading import Audio
from whosaid.config import ModelSettings
from whosaid.errors import InferenceError, InvalidParametersError, ModelLoadError
from whosaid.results import Diarization, SpeakerTurn

logger = logging.getLogger(__name__)

RECOMMENDED_MODEL = "pyannote/speaker-diarization-community-1"
#: DIARIZATION_MODEL value of the built-in diarizer (no token, no hub).
BUILTIN_MODEL = "builtin"


def _disable_telemetry() -> None:
    # pyannote.audio 4 sends usage metrics to its vendor by default; a server must not phone home.
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")


class Diarizer:
    """Who spoke when. `diarize` returns a `Diarization`: the speaker turns (which may overlap)
    and their exclusive view, both in order and clipped to the audio; it raises
    InvalidParametersError when the speaker hints ask for more speakers than the speech allows."""

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> "Diarizer":
        """DIARIZATION_MODEL=builtin: the built-in diarizer; anything else names a pyannote pipeline."""
        name = settings.diarization_model
        assert name, "from_settings needs DIARIZATION_MODEL"
        if name.strip().lower() == BUILTIN_MODEL:
            from whosaid.speakers.builtin import BuiltinDiarizer

            return BuiltinDiarizer.load(settings.resolved_device())
        return PyannoteDiarizer.from_settings(settings)

    def diarize(self, audio: Audio, speaker_parameters: dict[str, int]) -> Diarization:
        raise NotImplementedError


class PyannoteDiarizer(Diarizer):
    """A loaded pyannote pipeline."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> "PyannoteDiarizer":
        _disable_telemetry()
        import torch
        from pyannote.audio import Pipeline

        name = settings.diarization_model
        assert name, "from_settings needs DIARIZATION_MODEL"
        try:
            pipeline = Pipeline.from_pretrained(name, token=settings.token())
        except Exception as error:  # noqa: BLE001 - hub, file and config errors of many types
            raise ModelLoadError(_load_hint(name, error)) from error
        if pipeline is None:
            raise ModelLoadError(_load_hint(name, None))
        pipeline.to(torch.device(settings.resolved_device()))
        return cls(pipeline)

    def diarize(self, audio: Audio, speaker_parameters: dict[str, int]) -> Diarization:
        import torch

        waveform = torch.from_numpy(audio.samples).unsqueeze(0)  # (channel=1, time)
        try:
            output = self.pipeline(
                {"waveform": waveform, "sample_rate": audio.sample_rate_hz}, **speaker_parameters
            )
        except ValueError as error:
            if "n_clusters" in str(error) and speaker_parameters:
                raise too_many_speakers(audio.duration_s, speaker_parameters) from error
            raise InferenceError(f"speaker diarization failed: {error}") from error
        diarization = diarization_from_output(output, audio.duration_s)
        # pyannote only warns when it finds fewer speakers than min_speakers (or num_speakers): the
        # request asked for something the speech does not hold, as when clustering refuses.
        lowest = speaker_parameters.get("num_speakers") or speaker_parameters.get("min_speakers") or 1
        if diarization.turns and len({turn.speaker for turn in diarization.turns}) < lowest:
            raise too_many_speakers(audio.duration_s, speaker_parameters)
        return diarization


def diarization_from_output(output: Any, duration_s: float) -> Diarization:
    """pyannote 4 returns DiarizeOutput: the speaker diarization (overlap included) and its
    exclusive view (no overlapping turns, the right input for attaching words to speakers).
    pyannote 3.x pipelines, and 4.x ones with `legacy: true`, return an Annotation, used for both."""
    annotation = getattr(output, "speaker_diarization", output)
    exclusive = getattr(output, "exclusive_speaker_diarization", None)
    if exclusive is None:
        exclusive = annotation
    return Diarization(turns=turns_of(annotation, duration_s), exclusive_turns=turns_of(exclusive, duration_s))


def turns_of(annotation: Any, duration_s: float) -> tuple[SpeakerTurn, ...]:
    """A pyannote Annotation as sorted turns clipped to the audio: pyannote pads the last window
    with zeros and may report speech in the padding."""
    turns = []
    for segment, _, label in annotation.itertracks(yield_label=True):
        start_s, end_s = max(0.0, float(segment.start)), min(duration_s, float(segment.end))
        if end_s > start_s:
            turns.append(SpeakerTurn(start_s=start_s, end_s=end_s, speaker=str(label)))
    return tuple(sorted(turns, key=lambda turn: (turn.start_s, turn.end_s)))


def too_many_speakers(duration_s: float, speaker_parameters: dict[str, int]) -> InvalidParametersError:
    return InvalidParametersError(
        f"cannot split {duration_s:.1f} s of audio into {_describe(speaker_parameters)}: "
        "too few speech regions for that many speakers; ask for fewer speakers or "
        "send longer audio"
    )


def _describe(speaker_parameters: dict[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in speaker_parameters.items())


def _load_hint(name: str, error: Optional[BaseException]) -> str:
    reason = f": {type(error).__name__}: {error}" if error is not None else ""
    return (
        f"cannot load the diarization pipeline {name!r}{reason}. For a gated pyannote model, "
        f"accept its conditions on the Hub (e.g. https://hf.co/{RECOMMENDED_MODEL}) and set "
        "HF_TOKEN to a token of that account; for a local pipeline, point DIARIZATION_MODEL at "
        "the directory holding config.yaml"
    )
