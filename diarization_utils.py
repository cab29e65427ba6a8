"""Audio pre-processing, diarization and speaker attribution used by handler.py.

The implementations live in the `whosaid` package, shared with the server and the CLI.
"""

from whosaid.audio.loading import Audio, load_audio
from whosaid.speakers.attribution import assign_speakers, speaker_of
from whosaid.speakers.protocols import Diarizer
from whosaid.speakers.pyannote import diarization_from_output

__all__ = ["Audio", "Diarizer", "assign_speakers", "load_audio", "speaker_of", "diarization_from_output"]
