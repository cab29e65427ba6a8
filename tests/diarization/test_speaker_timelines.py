"""Speaker time lines: what a diarizer's output becomes. A pyannote Annotation (or pyannote 4's
DiarizeOutput) becomes a `Diarization`, its turns sorted and clipped to the audio; the built-in
diarizer's reconstruction from clustered chunks (synthetic segmentation drawn in seconds, real
segmentation-3.0 frame geometry, pyannote's own reconstruction) keeps overlapping speech in
`turns` and gives each instant to its most active speaker in `exclusive_turns`."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Sequence

import pytest

from tests.support.timelines import annotation, segmentations
from whosaid.results import Diarization, SpeakerTurn, Transcript
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.pyannote import diarization_from_output, turns_of

# ------------------------------------------------------------------ from pyannote's output


def test_an_annotation_becomes_sorted_turns_clipped_to_the_audio() -> None:
    """pyannote pads the last window with zeros and may report speech in the padding: turns end
    at the audio's end, and a turn wholly past it, or empty once clipped, is dropped."""
    tracks = [
        (5.8, 7.5, "SPEAKER_00"),
        (0.0, 4.0, "SPEAKER_00"),
        (3.0, 5.5, "SPEAKER_01"),
        (3.0, 4.5, 2),  # a label that is not a string: the turn names it as one
        (7.0, 9.0, "SPEAKER_01"),  # starts where the audio ends
        (8.0, 9.0, "SPEAKER_02"),
    ]
    assert turns_of(annotation(tracks), duration_s=7.0) == (
        SpeakerTurn(0.0, 4.0, "SPEAKER_00"),
        SpeakerTurn(3.0, 4.5, "2"),
        SpeakerTurn(3.0, 5.5, "SPEAKER_01"),
        SpeakerTurn(5.8, 7.0, "SPEAKER_00"),
    )
    assert turns_of(annotation([]), duration_s=7.0) == ()


def test_pyannote_output_maps_both_annotations() -> None:
    """pyannote 4's DiarizeOutput: the speaker diarization keeps the overlap, the exclusive one
    gives it to one speaker; both come out sorted and clipped to the audio."""
    from pyannote.audio.pipelines.speaker_diarization import DiarizeOutput

    output = DiarizeOutput(
        speaker_diarization=annotation([(0.0, 4.0, "SPEAKER_00"), (3.0, 5.5, "SPEAKER_01"), (5.8, 7.5, "SPEAKER_00")]),
        exclusive_speaker_diarization=annotation(
            [(0.0, 3.0, "SPEAKER_00"), (3.0, 5.5, "SPEAKER_01"), (5.8, 7.5, "SPEAKER_00")]
        ),
    )
    diarization = diarization_from_output(output, duration_s=7.0)
    assert diarization.turns == (
        SpeakerTurn(0.0, 4.0, "SPEAKER_00"),
        SpeakerTurn(3.0, 5.5, "SPEAKER_01"),
        SpeakerTurn(5.8, 7.0, "SPEAKER_00"),
    )
    assert diarization.exclusive_turns == (
        SpeakerTurn(0.0, 3.0, "SPEAKER_00"),
        SpeakerTurn(3.0, 5.5, "SPEAKER_01"),
        SpeakerTurn(5.8, 7.0, "SPEAKER_00"),
    )
    # A pyannote 3.x pipeline (or legacy: true) returns one Annotation: it serves as both.
    legacy = diarization_from_output(output.speaker_diarization, duration_s=7.0)
    assert legacy.turns == legacy.exclusive_turns == diarization.turns


@pytest.mark.slow
def test_a_real_pyannote_pipeline_output_maps_as_pyannote_serialises_it(
    random_diarizer_dir: Path, sample_audio
) -> None:
    """pyannote's own SpeakerDiarization (random weights, real code) on the 30 s sample: both of
    its annotations come out as pyannote's DiarizeOutput.serialize lists them."""
    import torch
    from pyannote.audio import Pipeline

    pipeline = Pipeline.from_pretrained(random_diarizer_dir)
    waveform = torch.from_numpy(sample_audio.samples).unsqueeze(0)
    output = pipeline({"waveform": waveform, "sample_rate": 16_000})
    diarization = diarization_from_output(output, sample_audio.duration_s)
    assert diarization.turns and diarization.exclusive_turns
    serialised = output.serialize()

    def as_listed(turns: Sequence[SpeakerTurn]) -> list[dict]:
        return [turn.to_dict() for turn in turns]

    def pyannote_listed(entries: list[dict]) -> list[dict]:
        clipped = [{**e, "end": min(e["end"], round(sample_audio.duration_s, 3))} for e in entries]
        return sorted(
            ({"speaker": e["speaker"], "start": e["start"], "end": e["end"]} for e in clipped if e["end"] > e["start"]),
            key=lambda e: (e["start"], e["end"]),
        )

    assert as_listed(diarization.turns) == pyannote_listed(serialised["diarization"])
    assert as_listed(diarization.exclusive_turns) == pyannote_listed(serialised["exclusive_diarization"])


def test_a_transcript_lists_its_turns_by_start_end_and_speaker() -> None:
    """Two speakers starting and ending together are listed by name; times to the millisecond."""
    turns = (SpeakerTurn(2.0, 3.0, "SPEAKER_01"), SpeakerTurn(0.0, 1.23456, "SPEAKER_00"))
    turns += (SpeakerTurn(2.0, 3.0, "SPEAKER_00"), SpeakerTurn(2.0, 2.5, "SPEAKER_02"))
    listed = Transcript(text="", chunks=(), duration_s=3.0, turns=turns, diarized=True).to_dict()["turns"]
    assert listed == [
        {"speaker": "SPEAKER_00", "start": 0.0, "end": 1.235},
        {"speaker": "SPEAKER_02", "start": 2.0, "end": 2.5},
        {"speaker": "SPEAKER_00", "start": 2.0, "end": 3.0},
        {"speaker": "SPEAKER_01", "start": 2.0, "end": 3.0},
    ]
    assert "turns" not in Transcript(text="", chunks=(), duration_s=3.0).to_dict()


# -------------------------------------------------- the built-in diarizer's reconstruction


def at_frames(diarization: Diarization, builtin_diarizer) -> tuple[list[tuple], list[tuple]]:
    """Both views as (speaker, start, end), times compared to within one segmentation frame (the
    span one frame of segmentation-3.0 sees)."""
    frame_s = builtin_diarizer.segmentation_model.receptive_field.duration

    def view(turns: tuple[SpeakerTurn, ...]) -> list[tuple]:
        return [(t.speaker, pytest.approx(t.start_s, abs=frame_s), pytest.approx(t.end_s, abs=frame_s)) for t in turns]

    return view(diarization.turns), view(diarization.exclusive_turns)


def assert_exclusive(diarization: Diarization) -> None:
    """At most one speaker at a time, and only where that speaker has a turn."""
    exclusive = diarization.exclusive_turns
    assert all(earlier.end_s <= later.start_s + 1e-6 for earlier, later in itertools.pairwise(exclusive))
    for turn in exclusive:
        assert any(
            t.speaker == turn.speaker and t.start_s <= turn.start_s + 1e-6 and turn.end_s <= t.end_s + 1e-6
            for t in diarization.turns
        ), turn


def test_overlap_stays_in_the_turns_and_goes_to_the_most_active_speaker_exclusively(builtin_diarizer) -> None:
    """X talks 1-9 s, Y 6-15 s; the chunk at 0-10 s does not hear Y, so during 6-9 s X is the
    more active of the two. X, speaker 1 of the clustering, is heard first: SPEAKER_00."""
    chunks, clusters = segmentations(
        builtin_diarizer, 20.0, 2.5, [([(1.0, 9.0)], 1), ([(6.0, 15.0)], [-2, 0, 0, 0, 0])]
    )
    diarization = builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(), 20.0)
    turns, exclusive = at_frames(diarization, builtin_diarizer)
    assert turns == [("SPEAKER_00", 1.0, 9.0), ("SPEAKER_01", 6.0, 15.0)]
    assert exclusive == [("SPEAKER_00", 1.0, 9.0), ("SPEAKER_01", 9.0, 15.0)]
    assert_exclusive(diarization)
    # At most one speaker asked for at a time: the turns are the exclusive view.
    one_at_a_time = builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(max_speakers=1), 20.0)
    assert at_frames(one_at_a_time, builtin_diarizer) == (exclusive, exclusive)


def test_a_speaker_the_hints_split_off_wins_its_ties(builtin_diarizer) -> None:
    """One voice (6-9 s and 11-14 s) clustered as speaker 2 in the first chunk and speaker 1 in
    the others: on 6-9 s the two tie, one chunk each, and speaker 1 takes them. Asked for three
    speakers, the split-off one wins its ties instead."""
    chunks, clusters = segmentations(
        builtin_diarizer, 20.0, 5.0, [([(6.0, 9.0), (11.0, 14.0)], [2, 1, 1]), ([(15.5, 19.0)], 0)]
    )
    two = builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(), 20.0)
    assert at_frames(two, builtin_diarizer)[0] == [
        ("SPEAKER_00", 6.0, 9.0),
        ("SPEAKER_00", 11.0, 14.0),
        ("SPEAKER_01", 15.5, 19.0),
    ]
    three = builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(num_speakers=3), 20.0)
    turns, exclusive = at_frames(three, builtin_diarizer)
    assert turns == exclusive == [("SPEAKER_00", 6.0, 9.0), ("SPEAKER_01", 11.0, 14.0), ("SPEAKER_02", 15.5, 19.0)]


def test_speech_in_the_last_chunks_padding_ends_with_the_audio(builtin_diarizer) -> None:
    chunks, clusters = segmentations(builtin_diarizer, 18.0, 2.5, [([(1.0, 19.5)], 0)])
    diarization = builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(), 18.0)
    assert diarization.turns[-1].end_s == diarization.exclusive_turns[-1].end_s == 18.0
    assert at_frames(diarization, builtin_diarizer)[0] == [("SPEAKER_00", 1.0, 18.0)]


def test_no_speech_is_no_turns(builtin_diarizer) -> None:
    chunks, clusters = segmentations(builtin_diarizer, 20.0, 2.5, [([], 0)])
    assert builtin_diarizer.reconstruct(chunks, clusters, SpeakerHints(), 20.0) == Diarization((), ())
