"""The built-in diarizer on real weights (the GE2E encoder of the resemblyzer wheel, Silero VAD),
scored with pyannote.metrics' diarization error rate: no collar, overlapped speech scored."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from tests.support.conversation import MEETING_SCRIPT, VOICES, Voice, build_conversation, synthesize
from whosaid.audio import Audio
from whosaid.builtin_diarizer import BuiltinDiarizer, BuiltinDiarizerOptions
from whosaid.clustering import MAX_POINTS, SpeakerCount, cluster, estimate_count
from whosaid.config import ModelSettings
from whosaid.diarization import Diarizer
from whosaid.errors import InvalidParametersError
from whosaid.results import SpeakerTurn

pytestmark = pytest.mark.slow


def diarization_error_rate(reference: list[tuple[float, float, str]], turns: tuple[SpeakerTurn, ...]) -> float:
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    def annotation(items: list[tuple[float, float, str]]) -> Annotation:
        result = Annotation()
        for start_s, end_s, label in items:
            result[Segment(start_s, end_s)] = label
        return result

    hypothesis = annotation([(turn.start_s, turn.end_s, turn.speaker) for turn in turns])
    return float(DiarizationErrorRate(collar=0.0, skip_overlap=False)(annotation(reference), hypothesis))


@pytest.fixture(scope="session")
def diarizer() -> BuiltinDiarizer:
    return Diarizer.from_settings(ModelSettings(asr_model="unused", diarization_model="builtin", device="cpu"))


@pytest.fixture(scope="session")
def meeting():
    return build_conversation()


@pytest.fixture(scope="session")
def sample_reference(sample_wav: Path) -> list[tuple[float, float, str]]:
    reference = []
    for line in sample_wav.with_suffix(".rttm").read_text().splitlines():
        fields = line.split()
        reference.append((float(fields[3]), float(fields[3]) + float(fields[4]), fields[7]))
    return reference


def speakers_of(turns: tuple[SpeakerTurn, ...]) -> set[str]:
    return {turn.speaker for turn in turns}


def assert_well_formed(turns: tuple[SpeakerTurn, ...], duration_s: float) -> None:
    assert all(0.0 <= turn.start_s < turn.end_s <= duration_s for turn in turns)
    assert all(earlier.end_s <= later.start_s + 1e-9 for earlier, later in itertools.pairwise(turns))
    names = [turn.speaker for turn in turns]
    first_seen = sorted(set(names), key=names.index)
    assert first_seen == [f"SPEAKER_{index:02d}" for index in range(len(first_seen))]


def test_der_on_pyannotes_two_speaker_sample_without_a_speaker_count(
    diarizer: BuiltinDiarizer, sample_audio: Audio, sample_reference
) -> None:
    turns = diarizer.diarize(sample_audio, {}).turns
    assert_well_formed(turns, sample_audio.duration_s)
    assert len(speakers_of(turns)) == 2
    # Overlapped speech is 1.9 of 24.4 scored seconds: a diarizer with one speaker per frame
    # cannot go below 0.08 here.
    assert diarization_error_rate(sample_reference, turns) <= 0.15


def test_der_on_a_three_voice_meeting_with_short_replies(diarizer: BuiltinDiarizer, meeting) -> None:
    reference = [(line.start_s, line.end_s, line.speaker) for line in meeting.lines]
    for hints in ({}, {"num_speakers": 3}, {"min_speakers": 2, "max_speakers": 5}):
        turns = diarizer.diarize(Audio(meeting.samples), hints).turns
        assert_well_formed(turns, meeting.duration_s)
        assert len(speakers_of(turns)) == 3, hints
        assert diarization_error_rate(reference, turns) <= 0.05, hints


@pytest.mark.parametrize(
    "hints, expected",
    [
        ({"num_speakers": 2}, {2}),
        ({"num_speakers": 4}, {4}),
        ({"max_speakers": 2}, {1, 2}),
        ({"min_speakers": 4}, {4, 5, 6}),
    ],
)
def test_speaker_hints_are_honoured(diarizer: BuiltinDiarizer, meeting, hints: dict, expected: set[int]) -> None:
    turns = diarizer.diarize(Audio(meeting.samples), hints).turns
    assert len(speakers_of(turns)) in expected


def test_silence_and_noise_give_no_turns(diarizer: BuiltinDiarizer) -> None:
    rng = np.random.default_rng(0)
    assert diarizer.diarize(Audio(np.zeros(16_000 * 5, np.float32)), {}).turns == ()
    assert diarizer.diarize(Audio((rng.standard_normal(16_000 * 5) * 0.05).astype(np.float32)), {}).turns == ()
    assert diarizer.diarize(Audio(np.zeros(0, np.float32)), {}).turns == ()


def test_one_second_of_speech_is_one_speaker(diarizer: BuiltinDiarizer) -> None:
    speech = synthesize("Hello there, how are you?", VOICES["bob"])[:16_000]
    turns = diarizer.diarize(Audio(speech), {}).turns
    assert speakers_of(turns) == {"SPEAKER_00"}
    assert_well_formed(turns, 1.0)


def test_one_voice_talking_for_a_while_is_one_speaker(diarizer: BuiltinDiarizer) -> None:
    text = "This is a single speaker talking for a while about the weather and the trains, and nothing else happens."
    for voice in VOICES.values():
        assert speakers_of(diarizer.diarize(Audio(synthesize(text, voice)), {}).turns) == {"SPEAKER_00"}


def test_more_speakers_than_the_speech_allows_is_a_clear_error(diarizer: BuiltinDiarizer) -> None:
    speech = synthesize("Yes.", VOICES["alice"])
    with pytest.raises(InvalidParametersError, match=r"cannot split .* into num_speakers=3: too few speech regions"):
        diarizer.diarize(Audio(np.concatenate([np.zeros(8000, np.float32), speech])), {"num_speakers": 3})


def test_a_short_blip_is_not_a_new_speaker(diarizer: BuiltinDiarizer) -> None:
    script = [line for line in MEETING_SCRIPT if line[0] != "carol"]
    blip = ("dave", "Hm.", 0.4)
    conversation = build_conversation(
        [*script[:6], blip, *script[6:]], {**VOICES, "dave": Voice("en-us+m7", pitch=20, speed_wpm=450)}
    )
    blip_line = next(line for line in conversation.lines if line.speaker == "dave")
    assert blip_line.end_s - blip_line.start_s <= 0.35
    turns = diarizer.diarize(Audio(conversation.samples), {}).turns
    assert len(speakers_of(turns)) == 2


def test_clustering_points_are_bounded_for_long_recordings() -> None:
    rng = np.random.default_rng(1)
    voices = rng.standard_normal((3, 256))
    too_many = voices[rng.integers(3, size=MAX_POINTS + 1)] + 0.3 * rng.standard_normal((MAX_POINTS + 1, 256))
    too_many /= np.linalg.norm(too_many, axis=1, keepdims=True)
    with pytest.raises(ValueError, match=f"at most {MAX_POINTS} points"):
        cluster(too_many, 3)
    points = too_many[:MAX_POINTS]
    assert estimate_count(points, SpeakerCount()) == 3
    assert estimate_count(points, SpeakerCount(at_most=2)) == 2
    labels = cluster(points, 3)
    truth = np.argmax(points @ voices.T, axis=1)  # which voice each point was drawn around
    assert {(int(a), int(b)) for a, b in zip(truth, labels, strict=True)} == {
        (voice, int(labels[truth == voice][0])) for voice in range(3)
    }


def test_long_recordings_are_clustered_in_bounded_groups(diarizer: BuiltinDiarizer, meeting) -> None:
    # With at most 20 points, the meeting's ~50 windows are clustered as averaged groups of
    # neighbours (what a long recording does with the default bound) and still give three voices.
    bounded = BuiltinDiarizer(diarizer.encoder, diarizer.vad, BuiltinDiarizerOptions(max_clustering_points=20))
    reference = [(line.start_s, line.end_s, line.speaker) for line in meeting.lines]
    turns = bounded.diarize(Audio(meeting.samples), {"num_speakers": 3}).turns
    assert len(speakers_of(turns)) == 3
    assert diarization_error_rate(reference, turns) <= 0.1


def test_a_voice_heard_for_two_seconds_in_a_long_meeting_is_found(diarizer: BuiltinDiarizer) -> None:
    two_voices = [line for line in MEETING_SCRIPT if line[0] != "carol"] * 4
    script = [*two_voices[:30], ("carol", "I have one question about the budget.", 0.4), *two_voices[30:]]
    conversation = build_conversation(script)
    carol = next(line for line in conversation.lines if line.speaker == "carol")
    assert conversation.duration_s > 120 and carol.end_s - carol.start_s < 2.0
    turns = diarizer.diarize(Audio(conversation.samples), {}).turns
    assert len(speakers_of(turns)) == 3
    during = [turn for turn in turns if turn.start_s < carol.end_s and turn.end_s > carol.start_s]
    elsewhere = {turn.speaker for turn in turns if turn.end_s <= carol.start_s or turn.start_s >= carol.end_s}
    covered_s = sum(
        min(t.end_s, carol.end_s) - max(t.start_s, carol.start_s) for t in during if t.speaker not in elsewhere
    )
    assert covered_s >= 0.8 * (carol.end_s - carol.start_s)
