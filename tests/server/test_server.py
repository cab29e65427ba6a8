"""The server as clients see it: `python -m whosaid serve` in a subprocess on a loopback port,
a tiny random-weight Whisper and a random-weight pyannote pipeline behind it, called through
the real clients (huggingface_hub's InferenceClient, the blog's requests.post, the openai SDK),
with every response parsed. Bad requests get the right status and leave the server serving."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import requests
from huggingface_hub import InferenceClient
from openai import OpenAI
from openai.types.audio import (
    Transcription,
    TranscriptionDiarized,
    TranscriptionVerbose,
    Translation,
    TranslationVerbose,
)

from tests.support.audio_files import channels_wav, encode
from tests.support.server import cpu_server
from whosaid.audio.loading import load_audio
from whosaid.formats import DiarizedTranscription, JsonTranscription, VerboseTranscription
from whosaid.server.errors import ErrorResponse
from whosaid.server.schemas import TranscriptResponse

API_KEY = "server-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_UPLOAD_MB = 1
SRT_CUE = re.compile(r"(\d+)\n(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)\n(.*)\n")
VTT_CUE = re.compile(r"(\d\d:\d\d:\d\d\.\d\d\d) --> (\d\d:\d\d:\d\d\.\d\d\d)\n(.*)\n")
RTTM_LINE = re.compile(r"SPEAKER clip 1 (\d+\.\d{3}) (\d+\.\d{3}) <NA> <NA> (SPEAKER_\d\d) <NA> <NA>")


@pytest.fixture(scope="module")
def server(tiny_whisper, random_diarizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "ASR_MODEL": str(tiny_whisper("server-main", seed=5)),
        "DIARIZATION_MODEL": str(random_diarizer_dir),
        "API_KEY": API_KEY,
        "MAX_UPLOAD_MB": str(MAX_UPLOAD_MB),
        "MAX_QUEUE": "4",
    }
    with cpu_server(tmp_path_factory, "server", env) as url:
        yield url


@pytest.fixture(scope="module")
def clip(sample_audio) -> bytes:
    """4 s of two people talking, as a WAV file."""
    return encode(sample_audio.samples[7 * 16_000 : 11 * 16_000], 16_000, "wav")


@pytest.fixture(scope="module")
def reference(server: str, clip: bytes) -> dict[str, Any]:
    """The clip through POST / with JSON, as the Inference Endpoints blog sends it."""
    response = requests.post(f"{server}/", json={"inputs": b64(clip), "parameters": {}}, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def openai_client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture
def hub_client(server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[InferenceClient]:
    """An InferenceClient for the local server. The tests run with HF_HUB_OFFLINE=1, which makes
    huggingface_hub refuse every URL, loopback included; the client only ever calls `server`."""
    from huggingface_hub import constants
    from huggingface_hub.utils import reset_sessions

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    reset_sessions()
    yield InferenceClient(model=server, token=API_KEY)
    monkeypatch.undo()
    reset_sessions()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def transcribe(server: str, clip: bytes, **form: Any) -> requests.Response:
    return requests.post(
        f"{server}/v1/audio/transcriptions", files={"file": ("clip.wav", clip)}, data=form, headers=AUTH, timeout=60
    )


# --- POST /: the Inference Endpoints contract ------------------------------------------------


def test_blog_request_gets_the_original_handlers_response_with_speakers(reference: dict[str, Any]) -> None:
    transcript = TranscriptResponse.model_validate(reference)
    assert transcript.text and transcript.duration == 4.0 and transcript.decoding == "batched"
    assert transcript.model_dump(mode="json") == reference  # nothing the model does not declare
    assert "".join(chunk.text for chunk in transcript.chunks).strip() == transcript.text
    # Every chunk lands in exactly one speaker segment, in order.
    assert transcript.speakers
    joined = lambda texts: re.sub(r"\s+", "", "".join(texts))  # noqa: E731
    assert joined(s.text for s in transcript.speakers) == joined(c.text for c in transcript.chunks)


def test_inference_client_sends_raw_bytes_without_parameters(
    hub_client: InferenceClient, clip: bytes, reference
) -> None:
    output = hub_client.automatic_speech_recognition(clip)
    assert output.text == reference["text"]
    assert [chunk.timestamp for chunk in output.chunks] == [chunk["timestamp"] for chunk in reference["chunks"]]


def test_inference_client_extra_body_becomes_parameters(hub_client: InferenceClient, server: str, clip: bytes) -> None:
    # huggingface_hub 0.36 sends {"inputs": <base64>, "parameters": extra_body} when given extra_body.
    parameters = {"language": "en", "batch_size": 2, "max_speakers": 2}
    output = hub_client.automatic_speech_recognition(clip, extra_body=parameters)
    blog = requests.post(f"{server}/", json={"inputs": b64(clip), "parameters": parameters}, headers=AUTH, timeout=60)
    assert output.text == blog.json()["text"]
    assert blog.json()["language"] == "en"


def test_raw_audio_body_takes_parameters_from_the_query_string(server: str, clip: bytes) -> None:
    raw = requests.post(
        f"{server}/?language=en&batch_size=2", data=clip, headers={**AUTH, "Content-Type": "audio/wav"}, timeout=60
    )
    as_json = requests.post(
        f"{server}/",
        json={"inputs": b64(clip), "parameters": {"language": "en", "batch_size": 2}},
        headers=AUTH,
        timeout=60,
    )
    assert raw.status_code == 200 and raw.json() == as_json.json()


# --- /v1/audio: the openai SDK -------------------------------------------------------------


def test_openai_json(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip))
    assert isinstance(result, Transcription) and result.text == reference["text"]
    assert result.usage is not None and result.usage.seconds == 4.0
    JsonTranscription.model_validate(result.model_dump())


def test_openai_text(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", clip), response_format="text"
    )
    assert isinstance(result, str) and result == reference["text"] + "\n"


def test_openai_srt(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", clip), response_format="srt"
    )
    cues = SRT_CUE.findall(result)
    assert len(cues) == len(reference["chunks"]) and "".join(SRT_CUE.split(result)[::5]).strip() == ""
    assert [int(cue[0]) for cue in cues] == list(range(1, len(cues) + 1))
    # Diarized: each cue starts with its speaker.
    assert all(re.match(r"SPEAKER_\d\d: ", cue[3]) for cue in cues)


def test_openai_vtt(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", clip), response_format="vtt"
    )
    assert result.startswith("WEBVTT\n\n")
    cues = VTT_CUE.findall(result)
    assert len(cues) == len(reference["chunks"])
    assert all(re.match(r"<v SPEAKER_\d\d>", cue[2]) for cue in cues)


def test_openai_verbose_json(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", clip), response_format="verbose_json", timestamp_granularities=["segment"]
    )
    assert isinstance(result, TranscriptionVerbose)
    assert result.text == reference["text"] and result.duration == 4.0 and result.language
    assert [(s.start, s.end, s.text) for s in result.segments] == [
        (c["timestamp"][0], c["timestamp"][1], c["text"]) for c in reference["chunks"]
    ]
    assert [s.id for s in result.segments] == list(range(len(result.segments)))
    VerboseTranscription.model_validate(result.model_dump())


def test_openai_word_timestamps(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1",
        file=("clip.wav", clip),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert isinstance(result, TranscriptionVerbose) and result.text == reference["text"]
    assert result.words and "warnings" not in (result.model_extra or {})
    assert " ".join(word.word for word in result.words).split() == result.text.split()
    previous_end = 0.0
    for word in result.words:
        assert previous_end <= word.start <= word.end <= 4.0 and word.word == word.word.strip()
        previous_end = word.end
    # Segments hold their words: each word lies inside the segment whose text it belongs to.
    assert all(any(s.start <= w.start and w.end <= s.end for s in result.segments) for w in result.words)
    VerboseTranscription.model_validate(result.model_dump())


def test_word_timestamps_on_the_inference_endpoints_route(server: str, clip: bytes, reference) -> None:
    response = blog(server, b64(clip), {"return_timestamps": "word"})
    assert response.status_code == 200, response.text
    transcript = TranscriptResponse.model_validate(response.json())
    assert transcript.text == reference["text"]
    assert "".join(w.text for c in transcript.chunks for w in c.words) == "".join(c.text for c in transcript.chunks)
    for chunk in transcript.chunks:
        for word in chunk.words:
            assert chunk.timestamp[0] <= word.timestamp[0] <= word.timestamp[1] <= chunk.timestamp[1]
            assert 0 <= word.probability <= 1  # a random-weight model is rarely sure
    assert all("words" not in chunk for chunk in reference["chunks"])


def test_openai_diarized_json(openai_client: OpenAI, clip: bytes, reference) -> None:
    result = openai_client.audio.transcriptions.create(
        model="gpt-4o-transcribe-diarize", file=("clip.wav", clip), response_format="diarized_json"
    )
    assert isinstance(result, TranscriptionDiarized)
    assert result.task == "transcribe" and result.text == reference["text"] and result.duration == 4.0
    assert [(s.speaker, s.start, s.end, s.text) for s in result.segments] == [
        (s["speaker"], s["timestamp"][0], s["timestamp"][1], s["text"]) for s in reference["speakers"]
    ]
    assert all(s.type == "transcript.text.segment" and s.id for s in result.segments)
    DiarizedTranscription.model_validate(result.model_dump())


def test_rttm_lists_the_speaker_turns(server: str, clip: bytes) -> None:
    response = transcribe(server, clip, response_format="rttm")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert lines and all(RTTM_LINE.fullmatch(line) for line in lines)
    for line in lines:
        start, duration, _ = RTTM_LINE.fullmatch(line).groups()
        assert 0 <= float(start) and float(start) + float(duration) <= 4.0 + 1e-3


def test_text_formats_come_with_their_media_types(server: str, clip: bytes) -> None:
    media_types = {"srt": "application/x-subrip", "vtt": "text/vtt", "html": "text/html", "text": "text/plain"}
    responses = {name: transcribe(server, clip, response_format=name) for name in media_types}
    for name, response in responses.items():
        assert response.status_code == 200 and response.headers["content-type"].split(";")[0] == media_types[name]
    assert responses["vtt"].text.startswith("WEBVTT\n\n00:00:")
    assert responses["srt"].text.startswith("1\n00:00:")


# openai 3.57 marks the translations endpoint deprecated; servers still offer it.
@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")
def test_openai_translations(openai_client: OpenAI, clip: bytes) -> None:
    plain = openai_client.audio.translations.create(model="whisper-1", file=("clip.wav", clip))
    assert isinstance(plain, Translation) and plain.text
    verbose = openai_client.audio.translations.create(
        model="whisper-1", file=("clip.wav", clip), response_format="verbose_json"
    )
    assert isinstance(verbose, TranslationVerbose)
    assert verbose.language == "english" and verbose.text == plain.text and verbose.segments


def test_openai_speaker_hints_and_unsupported_options(openai_client: OpenAI, clip: bytes) -> None:
    result = openai_client.audio.transcriptions.create(
        model="whisper-1",
        file=("clip.wav", clip),
        prompt="Names: Alice, Bob.",
        temperature=0.4,
        timestamp_granularities=["word", "segment"],
        extra_body={"max_speakers": 1},
        response_format="diarized_json",
    )
    assert {segment.speaker for segment in result.segments} == {"SPEAKER_00"}
    assert result.model_extra["warnings"] == [
        "temperature was ignored: decoding here is deterministic",
        "word timestamps come with response_format=verbose_json; they were not computed",
    ]


# --- bad requests ----------------------------------------------------------------------------


def nine_channels() -> bytes:
    """1 s of a tone on nine channels, a 16-bit WAV."""
    tone = np.float32(0.1) * np.sin(np.arange(16_000, dtype=np.float32) / 7)
    return channels_wav(np.tile(tone, (9, 1)))


def truncated(clip: bytes) -> bytes:
    return clip[: len(clip) // 2]


BAD_REQUESTS = {
    # name: (how to send it, expected status, expected error code, a phrase of the message)
    "garbage bytes": (
        lambda s, c: raw(s, np.random.default_rng(0).bytes(4096)),
        400,
        "invalid_audio",
        "could not decode",
    ),
    "invalid base64": (lambda s, c: blog(s, "%%% not base64 %%%"), 400, "invalid_audio", "not valid base64"),
    "empty body": (lambda s, c: raw(s, b""), 400, "invalid_audio", "empty input"),
    "empty inputs": (lambda s, c: blog(s, ""), 400, "invalid_audio", "empty input"),
    "truncated file": (lambda s, c: raw(s, truncated(c)), 400, "invalid_audio", "truncated"),
    "truncated multipart": (lambda s, c: transcribe(s, truncated(c)), 400, "invalid_audio", "truncated"),
    # Used to be a 200 with the first half of the transcript.
    "truncated ogg/opus": (
        lambda s, c: raw(s, truncated(encode(load_audio(c).samples, 16_000, "ogg"))),
        400,
        "invalid_audio",
        "truncated",
    ),
    "truncated webm": (
        lambda s, c: transcribe(s, truncated(encode(load_audio(c).samples, 48_000, "webm"))),
        400,
        "invalid_audio",
        "truncated",
    ),
    "oversize upload": (lambda s, c: raw(s, c * 10), 413, "payload_too_large", "MAX_UPLOAD_MB"),
    "oversize multipart": (lambda s, c: transcribe(s, c * 10), 413, "payload_too_large", "MAX_UPLOAD_MB"),
    "batch_size of the wrong type": (
        lambda s, c: blog(s, b64(c), {"batch_size": "many"}),
        422,
        "invalid_parameters",
        "'batch_size'",
    ),
    "parameters not an object": (lambda s, c: blog(s, b64(c), "fast"), 422, "invalid_parameters", "JSON object"),
    "temperature of the wrong type": (
        lambda s, c: transcribe(s, c, temperature="hot"),
        422,
        "invalid_request",
        "temperature",
    ),
    "num_speakers of the wrong type": (
        lambda s, c: transcribe(s, c, num_speakers="two"),
        422,
        "invalid_request",
        "num_speakers",
    ),
    "unknown response_format": (
        lambda s, c: transcribe(s, c, response_format="docx"),
        422,
        "invalid_request",
        "response_format: Input should be 'json', 'text', 'srt', 'vtt', 'verbose_json', 'diarized_json', 'rttm'",
    ),
    "diarized_json translated": (
        lambda s, c: requests.post(
            f"{s}/v1/audio/translations",
            files={"file": ("clip.wav", c)},
            data={"response_format": "diarized_json"},
            headers=AUTH,
            timeout=60,
        ),
        422,
        "invalid_parameters",
        "diarized_json is a transcription format; use /v1/audio/transcriptions",
    ),
    "html streamed": (
        lambda s, c: transcribe(s, c, response_format="html", stream="true"),
        422,
        "invalid_parameters",
        "stream=true sends the text as events (response_format json or text; diarized_json adds segments with "
        "speakers); html needs the whole transcript: send stream=false",
    ),
    "nine channels with multichannel": (
        lambda s, c: blog(s, b64(nine_channels()), {"multichannel": True}),
        422,
        "invalid_parameters",
        "multichannel=true takes at most 8 channels, and the audio holds 9",
    ),
    "nine channels with multichannel, OpenAI form": (
        lambda s, c: transcribe(s, nine_channels(), multichannel="true"),
        422,
        "invalid_parameters",
        "multichannel=true takes at most 8 channels, and the audio holds 9",
    ),
    "zero speakers": (lambda s, c: blog(s, b64(c), {"num_speakers": 0}), 422, "invalid_parameters", "'num_speakers'"),
    "min over max speakers": (
        lambda s, c: transcribe(s, c, min_speakers=3, max_speakers=2),
        422,
        "invalid_parameters",
        "greater than",
    ),
    "num and min speakers": (
        lambda s, c: raw(s, c, "num_speakers=2&min_speakers=1"),
        422,
        "invalid_parameters",
        "not both",
    ),
    # One such request would hold the only job slot for hours (8000 windows on an 8 s file).
    "windows of a millisecond": (
        lambda s, c: raw(s, c, "chunk_length_s=0.001"),
        422,
        "invalid_parameters",
        "'chunk_length_s'",
    ),
    "unknown language": (
        lambda s, c: transcribe(s, c, language="klingon"),
        422,
        "invalid_parameters",
        "unknown language",
    ),
    "unknown return_timestamps": (
        lambda s, c: blog(s, b64(c), {"return_timestamps": "char"}),
        422,
        "invalid_parameters",
        "'word'",
    ),
    "wrong API key": (
        lambda s, c: raw(s, c, headers={"Authorization": "Bearer nope"}),
        401,
        "invalid_api_key",
        "invalid API key",
    ),
}


def raw(server: str, body: bytes, query: str = "", headers: dict | None = None) -> requests.Response:
    headers = {**AUTH, "Content-Type": "application/octet-stream", **(headers or {})}
    return requests.post(f"{server}/?{query}", data=body, headers=headers, timeout=60)


def blog(server: str, inputs: Any, parameters: Any = None) -> requests.Response:
    return requests.post(
        f"{server}/", json={"inputs": inputs, "parameters": parameters or {}}, headers=AUTH, timeout=60
    )


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_bad_requests_get_the_right_status_and_the_server_keeps_serving(
    server: str, clip: bytes, reference, name: str
) -> None:
    send, status, code, phrase = BAD_REQUESTS[name]
    response = send(server, clip)
    assert response.status_code == status, response.text
    error = ErrorResponse.model_validate(response.json()).error
    assert error.code == code and phrase in error.message
    assert "Traceback" not in response.text
    assert blog(server, b64(clip)).json()["text"] == reference["text"]


def test_silence_is_200_with_empty_text(server: str, openai_client: OpenAI) -> None:
    silence = encode(np.zeros(3 * 16_000, dtype=np.float32), 16_000, "wav")
    response = raw(server, silence)
    assert response.status_code == 200
    assert response.json() == {"text": "", "chunks": [], "speakers": [], "turns": [], "duration": 3.0}
    assert openai_client.audio.transcriptions.create(model="whisper-1", file=("s.wav", silence)).text == ""
    assert transcribe(server, silence, response_format="srt").text == ""


# --- the OpenAPI document -------------------------------------------------------------------


def test_openapi_documents_the_routes_and_the_real_response_models(server: str, reference) -> None:
    schema = requests.get(f"{server}/openapi.json", headers=AUTH, timeout=10).json()
    assert {"/", "/v1/audio/transcriptions", "/v1/audio/translations", "/health", "/ready", "/metrics"} <= set(
        schema["paths"]
    )
    components = schema["components"]["schemas"]
    transcript = components["TranscriptResponse"]["properties"]
    assert set(reference) <= set(transcript)
    assert {"text", "chunks", "speakers", "language", "duration", "decoding", "warnings"} <= set(transcript)
    root = schema["paths"]["/"]["post"]
    assert root["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/TranscriptResponse")
    assert {"application/json", "audio/*", "application/octet-stream"} <= set(root["requestBody"]["content"])
    assert set(components["InferenceRequest"]["properties"]) == {"inputs", "parameters"}
    assert "num_speakers" in str(components["InferenceRequest"]["properties"]["parameters"])
    v1 = schema["paths"]["/v1/audio/transcriptions"]["post"]
    documented = str(v1["responses"]["200"])
    for model in ("JsonTranscription", "VerboseTranscription", "DiarizedTranscription"):
        assert model in documented
    assert v1["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    form = str(components)
    for field in ("timestamp_granularities[]", "response_format", "num_speakers", "min_speakers", "max_speakers"):
        assert field in form


def test_metrics_saw_the_traffic(server: str) -> None:
    text = requests.get(f"{server}/metrics", headers=AUTH, timeout=10).text
    assert re.search(
        r'whosaid_http_requests_total\{method="POST",route="/v1/audio/transcriptions",status="200"\} [1-9]', text
    )
    assert re.search(r'whosaid_transcriptions_total\{decoding="batched"\} [1-9]', text)
    assert re.search(r"whosaid_real_time_factor_count [1-9]", text)
