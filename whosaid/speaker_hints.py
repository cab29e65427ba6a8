"""What a request says about its number of speakers, and the error for hints the speech cannot meet.

Both diarizers take a `SpeakerHints`; `whosaid.config.InferenceConfig` builds one per request, so
its rules (each count at least 1, `num_speakers` alone, `min_speakers` <= `max_speakers`) are the
rules of every edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from whosaid.errors import InvalidParametersError
from whosaid.results import Diarization


@dataclass(frozen=True)
class SpeakerHints:
    """Speaker-count hints, None where not given: an exact count, or lower and upper bounds.
    ValueError when they contradict each other."""

    num_speakers: Optional[int] = None
    min_speakers: Optional[int] = None
    max_speakers: Optional[int] = None

    def __post_init__(self) -> None:
        for name, value in self.given().items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
        if self.num_speakers is not None and (self.min_speakers is not None or self.max_speakers is not None):
            raise ValueError(
                "num_speakers fixes the number of speakers: send either num_speakers or "
                "min_speakers/max_speakers, not both"
            )
        if self.min_speakers is not None and self.max_speakers is not None and self.min_speakers > self.max_speakers:
            raise ValueError(
                f"min_speakers ({self.min_speakers}) is greater than max_speakers ({self.max_speakers})"
            )

    def given(self) -> dict[str, int]:
        """The hints that were given, by their request names, in the order num, min, max."""
        values = {
            "num_speakers": self.num_speakers,
            "min_speakers": self.min_speakers,
            "max_speakers": self.max_speakers,
        }
        return {name: value for name, value in values.items() if value is not None}

    @property
    def lowest(self) -> int:
        """The fewest speakers the hints allow (1 when they say nothing)."""
        return self.num_speakers or self.min_speakers or 1

    def highest(self, unbounded: int) -> int:
        """The most speakers the hints allow; `unbounded` when they set no upper bound."""
        return self.num_speakers or self.max_speakers or unbounded


def too_many_speakers(duration_s: float, hints: SpeakerHints) -> InvalidParametersError:
    """The client's error: the hints ask for more speakers than the speech holds."""
    described = ", ".join(f"{name}={value}" for name, value in hints.given().items())
    return InvalidParametersError(
        f"cannot split {duration_s:.1f} s of audio into {described}: "
        "too few speech regions for that many speakers; ask for fewer speakers or "
        "send longer audio"
    )


def check_speaker_count(diarization: Diarization, hints: SpeakerHints, duration_s: float) -> Diarization:
    """The diarization, or `too_many_speakers` when it found speech but fewer speakers than the
    hints require. No speech at all is no speakers, whatever the hints (pyannote's early exit)."""
    if diarization.turns and len({turn.speaker for turn in diarization.turns}) < hints.lowest:
        raise too_many_speakers(duration_s, hints)
    return diarization
