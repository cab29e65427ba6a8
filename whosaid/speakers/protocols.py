"""The two seams of speaker diarization.

`Diarizer`: audio in, who spoke when out; the pyannote pipelines (whosaid.speakers.pyannote) and
the built-in diarizer (whosaid.speakers.builtin) implement it, and so do the tests' stand-ins.

`SpeakerEmbedder`: 16 kHz waveforms in, one speaker embedding per row out. It computes its own
features from the waveforms and says how its scores read (`clustering_threshold`,
`same_speaker_similarity`), so the built-in diarizer and known speakers (whosaid.speakers.known)
use any embedder unchanged. CAM++ (whosaid.speakers.campplus.embedding) implements it. The call
convention is pyannote.audio's, which its `SpeakerDiarization` pipeline expects of an embedding model.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.results import Diarization
from whosaid.speaker_hints import SpeakerHints


class Diarizer(Protocol):
    def diarize(self, audio: Audio, hints: SpeakerHints) -> Diarization:
        """The speaker turns (which may overlap) and their exclusive view, both in order and
        clipped to the audio. InvalidParametersError (`whosaid.speaker_hints.too_many_speakers`)
        when the hints ask for more speakers than the speech holds."""
        ...


class SpeakerEmbedder(Protocol):
    #: The waveforms' sample rate, Hz (16 000).
    sample_rate: int
    #: Length of one embedding.
    dimension: int
    #: How embeddings compare, as pyannote names it ("cosine").
    metric: str
    #: The fewest samples one row needs to be embedded.
    min_num_samples: int
    #: Where the built-in diarizer cuts its centroid-linkage tree of this embedder's unit-length
    #: embeddings: a Euclidean distance (d^2 = 2 - 2 cos).
    clustering_threshold: float
    #: Cosine similarity from which a speaker and a known voice are the same person (known
    #: speakers' default KNOWN_SPEAKER_THRESHOLD).
    same_speaker_similarity: float

    def __call__(self, waveforms: Any, masks: Optional[Any] = None) -> np.ndarray:
        """waveforms: (batch, 1, samples) torch tensor at `sample_rate`; masks: (batch, frames),
        > 0.5 where the speaker to embed is active, at any frame rate spanning the same samples,
        or None for all of it. Returns (batch, dimension) float32, NaN rows where a mask keeps too
        little to embed."""
        ...
