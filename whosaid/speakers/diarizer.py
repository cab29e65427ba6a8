"""The diarizer DIARIZATION_MODEL names: `builtin` for the built-in diarizer
(whosaid.speakers.builtin), anything else a pyannote pipeline (whosaid.speakers.pyannote)."""

from __future__ import annotations

from whosaid.config import ModelSettings
from whosaid.errors import ModelLoadError
from whosaid.speakers.protocols import Diarizer

#: DIARIZATION_MODEL value of the built-in diarizer (no token, no hub).
BUILTIN_MODEL = "builtin"


def load_diarizer(settings: ModelSettings) -> Diarizer:
    """The diarizer DIARIZATION_MODEL names, loaded on the settings' device; ModelLoadError when
    it is not set or cannot be loaded."""
    name = settings.diarization_model
    if not name:
        raise ModelLoadError("no diarizer to load: set DIARIZATION_MODEL")
    if name.strip().lower() == BUILTIN_MODEL:
        from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions

        options = BuiltinDiarizerOptions()
        if settings.diarization_step_s is not None:
            options = BuiltinDiarizerOptions(segmentation_step_s=settings.diarization_step_s)
        return BuiltinDiarizer.load(settings.resolved_device(), options)
    from whosaid.speakers.pyannote import PyannoteDiarizer

    return PyannoteDiarizer.from_settings(settings)
