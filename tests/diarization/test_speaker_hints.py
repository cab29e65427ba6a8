"""The speaker-count hints a request gives a diarizer: their rules, their bounds, the keyword
arguments a pyannote pipeline gets, and the client's error when the speech cannot meet them."""

from __future__ import annotations

import pytest

from whosaid.errors import InvalidParametersError
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints, check_speaker_count, too_many_speakers
from whosaid.speakers.pyannote import pipeline_arguments


@pytest.mark.parametrize(
    "hints, message",
    [
        ({"num_speakers": 0}, "num_speakers must be a whole number of at least 1, not 0"),
        ({"min_speakers": -2}, "min_speakers must be a whole number of at least 1, not -2"),
        ({"max_speakers": 2.5}, "max_speakers must be a whole number of at least 1, not 2.5"),
        ({"max_speakers": True}, "max_speakers must be a whole number of at least 1, not True"),
        ({"num_speakers": 2, "min_speakers": 1}, "send either num_speakers or min_speakers/max_speakers, not both"),
        ({"num_speakers": 2, "max_speakers": 3}, "send either num_speakers or min_speakers/max_speakers, not both"),
        ({"min_speakers": 3, "max_speakers": 2}, r"min_speakers \(3\) is greater than max_speakers \(2\)"),
    ],
)
def test_contradictory_hints_are_refused(hints: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeakerHints(**hints)


def test_hints_are_frozen() -> None:
    hints = SpeakerHints(num_speakers=2)
    with pytest.raises(AttributeError):
        hints.num_speakers = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "hints, lowest, highest",
    [
        (SpeakerHints(), 1, 20),
        (SpeakerHints(num_speakers=3), 3, 3),
        (SpeakerHints(min_speakers=2), 2, 20),
        (SpeakerHints(max_speakers=4), 1, 4),
        (SpeakerHints(min_speakers=2, max_speakers=2), 2, 2),
    ],
)
def test_bounds(hints: SpeakerHints, lowest: int, highest: int) -> None:
    assert hints.lowest == lowest
    assert hints.highest(unbounded=20) == highest


def test_pyannote_gets_only_the_hints_given_by_name() -> None:
    assert pipeline_arguments(SpeakerHints()) == {}
    assert pipeline_arguments(SpeakerHints(num_speakers=2)) == {"num_speakers": 2}
    assert pipeline_arguments(SpeakerHints(max_speakers=4, min_speakers=1)) == {"min_speakers": 1, "max_speakers": 4}


def test_the_error_names_the_audio_and_the_hints() -> None:
    error = too_many_speakers(11.04, SpeakerHints(min_speakers=4, max_speakers=6))
    assert isinstance(error, InvalidParametersError)
    assert str(error) == (
        "cannot split 11.0 s of audio into min_speakers=4, max_speakers=6: too few speech regions for "
        "that many speakers; ask for fewer speakers or send longer audio"
    )


def test_fewer_speakers_than_required_is_the_clients_error() -> None:
    def turns(*speakers: str) -> Diarization:
        found = tuple(SpeakerTurn(start_s=i, end_s=i + 1.0, speaker=s) for i, s in enumerate(speakers))
        return Diarization(turns=found, exclusive_turns=found)

    two = turns("SPEAKER_00", "SPEAKER_01", "SPEAKER_00")
    assert check_speaker_count(two, SpeakerHints(num_speakers=2), 3.0) is two
    assert check_speaker_count(two, SpeakerHints(max_speakers=1), 3.0) is two  # an upper bound is the clustering's
    with pytest.raises(InvalidParametersError, match=r"cannot split 3\.0 s of audio into num_speakers=3"):
        check_speaker_count(two, SpeakerHints(num_speakers=3), 3.0)
    with pytest.raises(InvalidParametersError, match="min_speakers=3"):
        check_speaker_count(two, SpeakerHints(min_speakers=3), 3.0)
    # No speech at all is no speakers, whatever the hints.
    assert check_speaker_count(turns(), SpeakerHints(num_speakers=3), 3.0) == turns()
