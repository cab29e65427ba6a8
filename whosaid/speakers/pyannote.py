"""pyannote.audio's speaker diarization pipelines (DIARIZATION_MODEL=<a Hub id or a local
directory>), run on the in-memory waveform (never a file path), and the conversion of pyannote's
output into a `Diarization` that the built-in diarizer shares."""

from __future__ import annotations

import os
import traceback
from typing import Any, Optional

from whosaid.audio.loading import Audio
from whosaid.config import ModelSettings
from whosaid.errors import InferenceError, ModelLoadError
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints, check_speaker_count, too_many_speakers

RECOMMENDED_MODEL = "pyannote/speaker-diarization-community-1"
#: The module whose clustering step refuses more clusters than it has embeddings.
_CLUSTERING_MODULE = "pyannote.audio.pipelines.clustering"


def _disable_telemetry() -> None:
    # pyannote.audio 4 sends usage metrics to its vendor by default; a server must not phone home.
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")


class PyannoteDiarizer:
    """A loaded pyannote pipeline (a `whosaid.speakers.protocols.Diarizer`)."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> "PyannoteDiarizer":
        name = settings.diarization_model
        if not name:
            raise ModelLoadError("no diarization pipeline to load: set DIARIZATION_MODEL")
        _disable_telemetry()
        import torch
        from pyannote.audio import Pipeline

        try:
            pipeline = Pipeline.from_pretrained(name, token=settings.token())
        except Exception as error:  # noqa: BLE001 - hub, file and config errors of many types
            raise ModelLoadError(_load_hint(name, error)) from error
        if pipeline is None:
            raise ModelLoadError(_load_hint(name, None))
        pipeline.to(torch.device(settings.resolved_device()))
        return cls(pipeline)

    def diarize(self, audio: Audio, hints: SpeakerHints) -> Diarization:
        import torch

        waveform = torch.from_numpy(audio.samples).unsqueeze(0)  # (channel=1, time)
        arguments = pipeline_arguments(hints)
        try:
            output = self.pipeline({"waveform": waveform, "sample_rate": audio.sample_rate_hz}, **arguments)
        except ValueError as error:
            # Clustering into a requested count fails when there are fewer embeddings than that
            # (scikit-learn's KMeans raises a ValueError inside pyannote's clustering step).
            if arguments and _raised_in(error, _CLUSTERING_MODULE):
                raise too_many_speakers(audio.duration_s, hints) from error
            raise InferenceError(f"speaker diarization failed: {error}") from error
        # pyannote only warns when it finds fewer speakers than min_speakers (or num_speakers): the
        # request asked for something the speech does not hold, as when clustering refuses.
        return check_speaker_count(diarization_from_output(output, audio.duration_s), hints, audio.duration_s)


def pipeline_arguments(hints: SpeakerHints) -> dict[str, int]:
    """The keyword arguments of a pyannote pipeline's `apply` that carry the hints given: pyannote
    names them as a request does."""
    return hints.given()


def _raised_in(error: BaseException, module: str) -> bool:
    """Whether a frame of `module` is on the error's traceback: which step failed, by structure."""
    return any(frame.f_globals.get("__name__") == module for frame, _ in traceback.walk_tb(error.__traceback__))


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


def _load_hint(name: str, error: Optional[BaseException]) -> str:
    reason = f": {type(error).__name__}: {error}" if error is not None else ""
    return (
        f"cannot load the diarization pipeline {name!r}{reason}. For a gated pyannote model, "
        f"accept its conditions on the Hub (e.g. https://hf.co/{RECOMMENDED_MODEL}) and set "
        "HF_TOKEN to a token of that account; for a local pipeline, point DIARIZATION_MODEL at "
        "the directory holding config.yaml"
    )
