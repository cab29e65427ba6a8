"""Known speakers: matching on synthetic vectors, request validation, and (slow) real voices of
the AMI snippets through the real server, the openai SDK, POST / and the CLI."""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common.scoring import rttm_speakers
from whosaid.cli.transcribe import known_speaker_files
from whosaid.config import InferenceConfig
from whosaid.errors import InvalidAudioError, InvalidParametersError
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speakers.known import KnownVoice, _longest_first, _subtract, decode_reference, match_speakers, rename

AMI = Path(__file__).parents[1] / "data" / "ami"


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float64)
    return vector / np.linalg.norm(vector)


def voice(name: str, *values: float) -> KnownVoice:
    return KnownVoice(name=name, embedding=unit(*values))


# -- matching ---------------------------------------------------------------------------------


def test_assignment_is_one_to_one_and_maximises_the_total() -> None:
    # Both speakers are closest to alice; greedy would give alice to A (0.95) and leave B with
    # bob at 0.2. The Hungarian assignment gives bob to A (0.9) and alice to B (0.9): 1.8 > 1.15.
    alice, bob = voice("alice", 1, 0, 0), voice("bob", 0, 1, 0)
    embeddings = {"A": unit(0.95, 0.9, 0.0), "B": unit(0.9, 0.2, 0.0)}
    scores = {s: (float(v @ alice.embedding), float(v @ bob.embedding)) for s, v in embeddings.items()}
    assert scores["A"][0] > scores["A"][1]  # A alone would pick alice
    matches = match_speakers(embeddings, [alice, bob], threshold=0.5)
    assert matches == {"A": ("bob", round(scores["A"][1], 4)), "B": ("alice", round(scores["B"][0], 4))}


def test_a_speaker_close_to_two_voices_keeps_its_label() -> None:
    # SPEAKER_00 scores 0.70 with alice and 0.68 with bob: above the threshold, but within the
    # margin of both voices, so neither name is given; SPEAKER_01 is clearly carol.
    alice, bob, carol = voice("alice", 1, 0, 0), voice("bob", 0, 1, 0), voice("carol", 0, 0, 1)
    embeddings = {"SPEAKER_00": np.array([0.70, 0.68, np.sqrt(1 - 0.70**2 - 0.68**2)]), "SPEAKER_01": unit(0.1, 0, 1)}
    matches = match_speakers(embeddings, [alice, bob, carol], threshold=0.5, margin=0.05)
    assert matches["SPEAKER_00"] == (None, 0.7)
    assert matches["SPEAKER_01"][0] == "carol"
    # Without a margin the assignment names it.
    assert match_speakers(embeddings, [alice, bob, carol], threshold=0.5)["SPEAKER_00"] == ("alice", 0.7)


def test_below_the_threshold_a_speaker_keeps_its_label_and_reports_its_best_score() -> None:
    embeddings = {"SPEAKER_00": unit(1, 0, 0), "SPEAKER_01": unit(0, 0, 1)}
    matches = match_speakers(embeddings, [voice("alice", 1, 0.1, 0), voice("bob", 0, 1, 0)], threshold=0.45)
    assert matches["SPEAKER_00"][0] == "alice"
    assert matches["SPEAKER_01"] == (None, 0.0)  # orthogonal to both voices


def test_a_voice_that_does_not_speak_is_not_invented() -> None:
    voices = [voice("alice", 1, 0, 0), voice("bob", 0, 1, 0), voice("carol", 0, 0, 1)]
    matches = match_speakers({"SPEAKER_00": unit(0.1, 1, 0)}, voices, threshold=0.45)
    assert matches == {"SPEAKER_00": ("bob", round(float(unit(0.1, 1, 0) @ unit(0, 1, 0)), 4))}


def test_more_speakers_than_voices_leaves_the_rest_unnamed() -> None:
    matches = match_speakers({"S0": unit(1, 0.1), "S1": unit(1, 0.2)}, [voice("alice", 1, 0)], threshold=0.45)
    assert [name for name, _ in matches.values()] == ["alice", None]


def test_no_voices_or_no_speakers_match_nothing() -> None:
    assert match_speakers({}, [voice("alice", 1, 0)], threshold=0.5) == {}
    assert match_speakers({"S0": unit(1, 0)}, [], threshold=0.5) == {}


class BandEnergyEmbedder:
    """A `SpeakerEmbedder` stand-in: the energy of each quarter of the waveform's spectrum."""

    sample_rate = 16_000
    dimension = 4
    metric = "cosine"
    min_num_samples = 400
    clustering_threshold = 0.5
    same_speaker_similarity = 0.9

    def __call__(self, waveforms, masks=None) -> np.ndarray:
        spectrum = np.abs(np.fft.rfft(waveforms[:, 0].numpy(), axis=-1)) ** 2
        return np.stack([band.sum(axis=-1) for band in np.array_split(spectrum, 4, axis=-1)], axis=-1)


def test_the_identifier_reads_its_threshold_from_the_embedder_unless_given() -> None:
    from whosaid.speakers.known import SpeakerIdentifier

    embedder = BandEnergyEmbedder()
    assert SpeakerIdentifier(embedder, vad=None).threshold == 0.9
    assert SpeakerIdentifier(embedder, vad=None, threshold=0.3).threshold == 0.3
    identifier = SpeakerIdentifier(embedder, vad=None)
    assert identifier.embed_samples(np.ones(399, np.float32)) is None  # under min_num_samples
    tone = np.sin(2 * np.pi * 200 * np.arange(16_000) / 16_000).astype(np.float32)
    vector = identifier.embed_samples(tone)
    assert vector is not None and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-9
    assert int(np.argmax(vector)) == 0  # 200 Hz lies in the lowest quarter of 0-8 kHz


def test_rename_keeps_times_and_unmatched_labels() -> None:
    turns = (SpeakerTurn(0.0, 1.0, "SPEAKER_00"), SpeakerTurn(0.5, 2.0, "SPEAKER_01"))
    renamed = rename(Diarization(turns=turns, exclusive_turns=turns[:1]), {"SPEAKER_01": "bob"})
    assert renamed.turns == (SpeakerTurn(0.0, 1.0, "SPEAKER_00"), SpeakerTurn(0.5, 2.0, "bob"))
    assert renamed.exclusive_turns == (SpeakerTurn(0.0, 1.0, "SPEAKER_00"),)


def test_clean_speech_is_the_turns_minus_other_speakers() -> None:
    assert _subtract([(0.0, 10.0)], [(2.0, 3.0), (5.0, 12.0)]) == [(0.0, 2.0), (3.0, 5.0)]
    assert _subtract([(0.0, 1.0)], [(0.0, 1.0)]) == []
    assert _subtract([(0.0, 4.0), (6.0, 8.0)], [(3.5, 7.0), (1.0, 2.0), (1.5, 2.5)]) == [
        (0.0, 1.0),
        (2.5, 3.5),
        (7.0, 8.0),
    ]
    assert _subtract([(1.0, 2.0)], []) == [(1.0, 2.0)]


def test_a_speaker_is_embedded_from_its_longest_pieces_up_to_the_budget() -> None:
    pieces = [(0.0, 1.0), (2.0, 12.0), (20.0, 20.1), (30.0, 35.0), (40.0, 43.0)]
    assert _longest_first(pieces, 14.0) == [(2.0, 12.0), (30.0, 35.0)]
    assert _longest_first(pieces, 100.0) == [(0.0, 1.0), (2.0, 12.0), (30.0, 35.0), (40.0, 43.0)]


# -- request validation -----------------------------------------------------------------------


def parameters_error(parameters: dict, **context: bool) -> str:
    with pytest.raises(InvalidParametersError) as error:
        InferenceConfig.from_parameters(parameters, **context)
    return str(error.value)


def test_names_must_be_unique_non_empty_and_at_most_100() -> None:
    clip = "UklGRg=="
    assert "'alice' is given twice" in parameters_error(
        {"known_speaker_names": ["alice", "alice"], "known_speaker_references": [clip, clip]}
    )
    assert "'alice' is given twice" in parameters_error(
        {"known_speaker_names": ["alice"], "known_speaker_references": [clip], "known_speakers": {"alice": clip}}
    )
    assert "known speaker name #2 is empty" in parameters_error(
        {"known_speaker_names": ["alice", " "], "known_speaker_references": [clip, clip]}
    )
    many = [f"p{i}" for i in range(101)]
    assert "at most 100 known speakers per request, got 101" in parameters_error(
        {"known_speaker_names": many, "known_speaker_references": [clip] * 101}
    )
    assert "looks like a diarizer label" in parameters_error({"known_speakers": {"SPEAKER_03": clip}})


def test_names_and_references_pair_up() -> None:
    message = parameters_error({"known_speaker_names": ["alice", "bob"], "known_speaker_references": ["x"]})
    assert "known_speaker_names (2) and known_speaker_references (1) must pair up" in message


def test_known_speakers_need_a_diarizer() -> None:
    message = parameters_error({"known_speakers": {"alice": "UklGRg=="}}, has_diarizer=False)
    assert "known speakers need a diarization model" in message


def test_a_huge_bad_parameter_is_not_echoed_whole() -> None:
    message = parameters_error({"known_speakers": ["x" * 100_000]})
    assert "known_speakers" in message and len(message) < 1_000


def test_a_reference_that_is_not_audio_names_its_speaker() -> None:
    with pytest.raises(InvalidAudioError, match="known speaker 'alice': the reference is not usable audio"):
        decode_reference("alice", "data:audio/wav;base64," + base64.b64encode(b"hello, not audio" * 10).decode())
    with pytest.raises(InvalidAudioError, match="known speaker 'bob': the reference is a data URL without base64"):
        decode_reference("bob", "data:audio/wav,plain")


def test_a_data_url_reference_decodes(sample_wav: Path) -> None:
    data = base64.b64encode(sample_wav.read_bytes()).decode()
    from_url = decode_reference("alice", f"data:audio/wav;base64,{data}")
    plain = decode_reference("alice", data)
    assert from_url.duration_s == plain.duration_s > 1.0
    assert np.array_equal(from_url.samples, plain.samples)


def test_cli_known_speaker_files(tmp_path: Path) -> None:
    (tmp_path / "alice.wav").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("not a clip")
    (tmp_path / "bob.flac").write_bytes(b"x")
    assert known_speaker_files([f"carol={tmp_path / 'alice.wav'}"], tmp_path) == [
        ("carol", tmp_path / "alice.wav"),
        ("alice", tmp_path / "alice.wav"),
        ("bob", tmp_path / "bob.flac"),
    ]
    with pytest.raises(ValueError, match="--speaker takes NAME=FILE, not 'alice'"):
        known_speaker_files(["alice"], None)
    with pytest.raises(ValueError, match="'alice' is given twice"):
        known_speaker_files([f"alice={tmp_path / 'bob.flac'}"], tmp_path)
    with pytest.raises(ValueError, match="known speaker 'dan': no such file"):
        known_speaker_files([f"dan={tmp_path / 'dan.wav'}"], None)


def test_known_speakers_without_the_builtin_diarizer_are_422() -> None:
    from whosaid.engine import Engine

    engine = Engine(recognizer=None, diarizer=None)  # type: ignore[arg-type]  # no model is run
    config, _ = InferenceConfig.from_parameters({"return_speaker_embeddings": True})
    with pytest.raises(InvalidParametersError, match="need the built-in diarizer: start the service with"):
        engine.known_voices(config)
    assert engine.known_voices(InferenceConfig()) == ()


# -- real voices ------------------------------------------------------------------------------


def wav_bytes(samples: np.ndarray, rate_hz: int = 16_000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def clean_speech(file: str, speaker: str, max_s: float = 10.0) -> bytes:
    """A reference for `speaker`: their clean pieces of an AMI snippet (no other reference
    speaker talking), concatenated, at most `max_s`."""
    from benchmarks.diarization.known_speakers import clean_pieces, cut, read_rttm
    from whosaid.audio.loading import load_audio_file

    pieces = clean_pieces(read_rttm(AMI / "ami-train.rttm")[file], speaker)
    return wav_bytes(cut(load_audio_file(AMI / f"ami_{file}.wav"), pieces).samples[: int(max_s * 16_000)])


def data_url(audio: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(audio).decode()


def snippet(file: str, seconds: float) -> bytes:
    from whosaid.audio.loading import load_audio_file

    return wav_bytes(load_audio_file(AMI / f"ami_{file}.wav").samples[: int(seconds * 16_000)])


@pytest.mark.slow
def test_identification_on_the_ami_snippets_stays_as_measured() -> None:
    """The issue's measurement (benchmarks/diarization/known_speakers.py, benchmarks/CHANGELOG.md "Known
    speakers"): each recurring speaker enrolled from one snippet, the ten snippets diarized and
    named. The bounds sit near the measured figures, each about a second of speech or more away."""
    from benchmarks.diarization.known_speakers import measure

    result, threshold = measure(AMI, verbose=False)
    assert threshold == 0.5
    assert sorted(result.enrolled_from) == ["FEE083", "FEE087", "FEE088", "MEE067", "MEE068", "MEO086", "MÉO069"]
    exclusive, turns = result.rates(threshold), result.rates(threshold, "turns")
    assert exclusive["enrolled_s"] == pytest.approx(59.0, abs=0.1)
    # Measured: 0.452 (26.7 s) on the exclusive view, 0.478 on the overlap-aware turns.
    assert 0.40 <= exclusive["accuracy"] <= 0.52, exclusive
    assert 0.42 <= turns["accuracy"] <= 0.55, turns
    # Measured: 0.029 (1.3 s of 44.5 s).
    assert exclusive["false"] <= 0.05, exclusive
    # No different-speaker score reaches the threshold (measured: at most 0.34 on clean pieces,
    # 0.48 on diarized speakers).
    assert max(result.piece_different) < threshold and max(result.different) < threshold
    # The matching alone, on the reference diarization: 0.645 at the default, 0.896 at 0.3.
    assert result.reference_diarization_accuracy(threshold) >= 0.6
    assert result.reference_diarization_accuracy(0.3) >= 0.85
    # What keeps the goal (0.90) out of reach: the diarizer's own segmentation, clustered by the
    # reference and perfectly named, gives 0.637 (exclusive) and 0.663 (turns).
    assert 0.58 <= result.oracle_clustering_accuracy() <= 0.70
    assert 0.60 <= result.oracle_clustering_accuracy("turns") <= 0.72


API_KEY = "known-speakers-key"


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # FEE083 enrolled from trn06; she speaks again in trn09 (another meeting).
    folder = tmp_path_factory.mktemp("voices")
    (folder / "FEE083.wav").write_bytes(clean_speech("trn06", "FEE083"))
    return folder


@pytest.fixture(scope="module")
def server(converted_model, voices_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from tests.support.server import cpu_server, tiny_en_with_builtin_diarizer

    env = {**tiny_en_with_builtin_diarizer(converted_model, API_KEY), "VOICES_DIR": str(voices_dir)}
    with cpu_server(tmp_path_factory, "known-speakers-server", env, unset=("ASSISTANT_MODEL", "HF_TOKEN")) as url:
        yield url


def headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.mark.slow
def test_the_voice_library_is_listed_behind_the_api_key(server: str) -> None:
    import requests

    assert requests.get(f"{server}/v1/voices", timeout=10).status_code == 401
    response = requests.get(f"{server}/v1/voices", headers=headers(), timeout=10)
    assert response.status_code == 200
    assert response.json() == {"voices": [{"name": "FEE083", "clips": 1}], "known_speakers": True}


@pytest.mark.slow
def test_openai_sdk_names_known_speakers_on_another_meeting(server: str) -> None:
    """trn09: FEE083 (library, enrolled from trn06) talks most; MEE094 and MEE095 are not
    enrolled; MÉO069 (a request reference from trn03) is not in it and must not be invented.
    FEE083's identification accuracy stays within what benchmarks/diarization/known_speakers.py measured."""
    from openai import OpenAI

    from benchmarks.diarization.known_speakers import activity, read_rttm

    client = OpenAI(base_url=f"{server}/v1", api_key=API_KEY)
    audio = (AMI / "ami_trn09.wav").read_bytes()
    extra = {
        "known_speaker_names": ["MEO069"],
        "known_speaker_references": [data_url(clean_speech("trn03", "MÉO069"))],
    }
    diarized = client.audio.transcriptions.create(
        model="whisper-1", file=("trn09.wav", audio), response_format="diarized_json", **extra
    )
    speakers = {segment.speaker for segment in diarized.segments}
    assert "FEE083" in speakers and "MEO069" not in speakers
    assert all(s == "FEE083" or s.startswith("SPEAKER_") for s in speakers)
    identities = {i["speaker"]: i for i in diarized.model_extra["speaker_identities"]}
    assert identities["FEE083"]["name"] == "FEE083" and identities["FEE083"]["similarity"] >= 0.6

    # Speaker time as the segments give it (each instant to one speaker, as words are attributed).
    segments = [(segment.start, segment.end, segment.speaker) for segment in diarized.segments]
    system = activity(segments, 30.0)
    reference = activity(read_rttm(AMI / "ami-train.rttm")["trn09"], 30.0)
    accuracy = (reference["FEE083"] & system["FEE083"]).sum() / reference["FEE083"].sum()
    assert accuracy >= 0.65, accuracy
    # The unenrolled MEE094 is a speaker of its own, left unnamed.
    assert sorted(identities) == ["FEE083", "SPEAKER_00"] and identities["SPEAKER_00"]["name"] is None


@pytest.mark.slow
def test_bad_references_are_4xx_naming_the_culprit_and_the_server_keeps_serving(server: str) -> None:
    import requests

    good = data_url(clean_speech("trn06", "FEE083"))
    short = data_url(clean_speech("trn06", "FEE083", max_s=0.5))
    silent = data_url(wav_bytes(np.zeros(32_000)))

    def send(names: list[str], references: list[str]) -> requests.Response:
        fields = [("known_speaker_names[]", n) for n in names] + [("known_speaker_references[]", r) for r in references]
        return requests.post(
            f"{server}/v1/audio/transcriptions",
            files={"file": ("a.wav", snippet("trn09", 3.0), "audio/wav")},
            data=[("response_format", "diarized_json"), *fields],
            headers=headers(),
            timeout=120,
        )

    cases = [
        (["ann", "shorty"], [good, short], 400, "known speaker 'shorty': the reference lasts 0.50 s"),
        (["quiet"], [silent], 400, "known speaker 'quiet': the reference holds no speech"),
        (["bytes"], [data_url(b"not audio at all" * 20)], 400, "known speaker 'bytes': the reference is not usable"),
        (["ann", "ann"], [good, good], 422, "known speaker name 'ann' is given twice"),
        (["ann", ""], [good, good], 422, "known speaker name #2 is empty"),
        ([f"p{i}" for i in range(101)], ["x"] * 101, 422, "at most 100 known speakers per request, got 101"),
    ]
    for names, references, status, message in cases:
        response = send(names, references)
        assert response.status_code == status, response.text
        assert message in response.json()["error"]["message"]
    # Streamed, the reference is checked before the stream starts: a plain 400, not an event.
    streamed = requests.post(
        f"{server}/v1/audio/transcriptions",
        files={"file": ("a.wav", snippet("trn09", 3.0), "audio/wav")},
        data=[("stream", "true"), ("known_speaker_names[]", "shorty"), ("known_speaker_references[]", short)],
        headers=headers(),
        timeout=120,
    )
    assert streamed.status_code == 400, streamed.text
    assert "known speaker 'shorty': the reference lasts 0.50 s" in streamed.json()["error"]["message"]
    # A long clip is a form field over the multipart parser's default 1 MiB: only MAX_UPLOAD_MB bounds it.
    from whosaid.audio.loading import load_audio

    long_clip = wav_bytes(np.tile(load_audio(clean_speech("trn06", "FEE083")).samples, 4))
    assert len(data_url(long_clip)) > 1024 * 1024
    response = send(["ann"], [data_url(long_clip)])
    assert response.status_code == 200, response.text
    assert requests.get(f"{server}/ready", timeout=10).status_code == 200


@pytest.mark.slow
def test_post_root_takes_known_speakers_and_returns_embeddings(server: str) -> None:
    import requests

    payload = {
        "inputs": base64.b64encode(snippet("trn09", 15.0)).decode(),
        "parameters": {
            "known_speakers": {"MEO069": base64.b64encode(clean_speech("trn03", "MÉO069")).decode()},
            "return_speaker_embeddings": True,
        },
    }
    response = requests.post(f"{server}/", json=payload, headers=headers(), timeout=300)
    assert response.status_code == 200, response.text
    body = response.json()
    identities = body["speaker_identities"]
    assert "FEE083" in {i["name"] for i in identities}
    assert "MEO069" not in {i["name"] for i in identities}
    for identity in identities:
        assert len(identity["embedding"]) == 192
        assert abs(float(np.linalg.norm(identity["embedding"])) - 1.0) < 1e-3
    assert {segment["speaker"] for segment in body["speakers"]} <= {i["speaker"] for i in identities}
    assert "FEE083" in {turn["speaker"] for turn in body["turns"]}


@pytest.mark.slow
def test_cli_voices_locally_and_with_url(
    server: str, converted_model, voices_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from whosaid.cli.main import main

    audio = tmp_path / "trn09.wav"
    audio.write_bytes(snippet("trn09", 15.0))
    out = tmp_path / "out"
    argv = ["transcribe", str(audio), "--voices", str(voices_dir), "-f", "rttm", "--no-progress"]
    assert main([*argv, "--url", server, "--api-key", API_KEY, "-o", str(out)]) == 0
    remote = (out / "trn09.rttm").read_text()
    models = ["--asr-model", str(converted_model("whisper-tiny.en")), "--diarization-model", "builtin"]
    models += ["--device", "cpu"]
    status = main([*argv, *models])
    local = capsys.readouterr().out
    assert status == 0
    for rttm in (remote, local):
        assert "FEE083" in rttm_speakers(rttm)


@pytest.mark.slow
def test_voices_dir_holds_one_or_several_clips_per_name_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from whosaid.audio.vad import VoiceActivityDetector
    from whosaid.errors import ModelLoadError
    from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding
    from whosaid.speakers.known import SpeakerIdentifier, load_voice_library

    identifier = SpeakerIdentifier(CamPlusPlusEmbedding.load(), VoiceActivityDetector.load())
    assert identifier.threshold == CamPlusPlusEmbedding.same_speaker_similarity
    library = tmp_path / "voices"
    (library / "FEE083").mkdir(parents=True)
    (library / "FEE083" / "a.wav").write_bytes(clean_speech("trn06", "FEE083", max_s=5.0))
    (library / "FEE083" / "b.wav").write_bytes(clean_speech("trn09", "FEE083", max_s=5.0))
    (library / "MEE068.wav").write_bytes(clean_speech("trn00", "MEE068"))
    (library / "README.txt").write_text("not a clip")
    voices = {voice.name: voice for voice in load_voice_library(library, identifier)}
    assert {name: voice.clips for name, voice in voices.items()} == {"FEE083": 2, "MEE068": 1}
    assert all(abs(float(np.linalg.norm(voice.embedding)) - 1.0) < 1e-9 for voice in voices.values())
    # Two voices stay apart.
    assert float(voices["FEE083"].embedding @ voices["MEE068"].embedding) < 0.3

    (library / "silence.wav").write_bytes(wav_bytes(np.zeros(32_000)))
    with pytest.raises(ModelLoadError, match="VOICES_DIR: cannot enrol .*silence.wav: .*holds no speech"):
        load_voice_library(library, identifier)


@pytest.mark.slow
def test_the_endpoint_handler_names_known_speakers(monkeypatch: pytest.MonkeyPatch, converted_model) -> None:
    """handler.py, as Inference Endpoints calls it: `known_speakers` in `parameters`, the names in
    the speakers and turns, and the embeddings on request."""
    from handler import EndpointHandler
    from whosaid.config import get_model_settings

    monkeypatch.setenv("ASR_MODEL", str(converted_model("whisper-tiny.en")))
    monkeypatch.setenv("DIARIZATION_MODEL", "builtin")
    monkeypatch.setenv("DEVICE", "cpu")
    for name in ("ASSISTANT_MODEL", "VOICES_DIR", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    get_model_settings.cache_clear()
    try:
        handler = EndpointHandler("/repository")
    finally:
        get_model_settings.cache_clear()
    reference = base64.b64encode(clean_speech("trn06", "FEE083")).decode()
    parameters = {"known_speakers": {"Fiona": reference}, "return_speaker_embeddings": True}
    body = handler({"inputs": base64.b64encode(snippet("trn09", 15.0)).decode(), "parameters": parameters})
    identities = {identity["speaker"]: identity for identity in body["speaker_identities"]}
    assert identities["Fiona"]["name"] == "Fiona" and identities["Fiona"]["similarity"] >= 0.5
    assert all(len(identity["embedding"]) == 192 for identity in identities.values())
    assert "Fiona" in {segment["speaker"] for segment in body["speakers"]}
    assert {turn["speaker"] for turn in body["turns"]} == set(identities)

    bad = {"known_speakers": {"Fiona": base64.b64encode(b"not audio" * 50).decode()}}
    with pytest.raises(InvalidAudioError, match="known speaker 'Fiona': the reference is not usable audio"):
        handler({"inputs": base64.b64encode(snippet("trn09", 3.0)).decode(), "parameters": bad})
