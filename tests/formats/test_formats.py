"""Output formats on hand-made transcripts: exact strings and shapes, the empty transcript, and
the server's response model against the core's own dict."""

from __future__ import annotations

import pytest

from whosaid.formats import (
    FORMATS,
    Rendering,
    output_format,
    render,
    to_diarized_json,
    to_json,
    to_rttm,
    to_srt,
    to_text,
    to_verbose_json,
    to_vtt,
)
from whosaid.results import Chunk, SpeakerSegment, SpeakerTurn, Transcript, Word
from whosaid.server.schemas import TranscriptResponse

HELLO = Chunk(0.0, 1.5, " Hello there.")
ANSWER = Chunk(1.5, 3661.25, " General <Kenobi> & co.")
PLAIN = Transcript(
    text="Hello there. General <Kenobi> & co.",
    chunks=(HELLO, ANSWER),
    duration_s=3662.0,
    language="en",
    decoding="batched",
)
DIARIZED = Transcript(
    text=PLAIN.text,
    chunks=PLAIN.chunks,
    duration_s=3662.0,
    language="en",
    speakers=(
        SpeakerSegment("SPEAKER_00", 0.0, 1.5, "Hello there.", (HELLO,)),
        SpeakerSegment("SPEAKER_01", 1.5, 3661.25, "General <Kenobi> & co.", (ANSWER,)),
    ),
    turns=(SpeakerTurn(0.2, 1.4, "SPEAKER_00"), SpeakerTurn(1.6, 3661.0, "SPEAKER_01")),
    diarized=True,
    decoding="assisted",
    warnings=("unknown parameter 'beam_size' was ignored",),
)
SILENCE = Transcript(text="", chunks=(), duration_s=3.0, diarized=True)


def test_text_is_newline_terminated() -> None:
    assert to_text(PLAIN) == "Hello there. General <Kenobi> & co.\n"
    assert to_text(SILENCE) == "\n"


def test_srt_cues_with_and_without_speakers() -> None:
    assert to_srt(PLAIN) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n00:00:01,500 --> 01:01:01,250\nGeneral <Kenobi> & co.\n"
    )
    assert to_srt(DIARIZED).splitlines()[2] == "SPEAKER_00: Hello there."
    assert to_srt(SILENCE) == ""


def test_vtt_escapes_markup_and_names_voices() -> None:
    assert to_vtt(PLAIN) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\nHello there.\n\n"
        "00:00:01.500 --> 01:01:01.250\nGeneral &lt;Kenobi&gt; &amp; co.\n"
    )
    assert to_vtt(DIARIZED).splitlines()[-1] == "<v SPEAKER_01>General &lt;Kenobi&gt; &amp; co."
    assert to_vtt(SILENCE) == "WEBVTT\n"


def test_cue_text_keeps_no_line_breaks() -> None:
    broken = Transcript(text="a b", chunks=(Chunk(0.0, 1.0, " a\n\nb "),), duration_s=1.0)
    assert to_srt(broken) == "1\n00:00:00,000 --> 00:00:01,000\na b\n"


def test_rttm_lists_diarizer_turns() -> None:
    assert to_rttm(DIARIZED, file_id="my meeting") == (
        "SPEAKER my_meeting 1 0.200 1.200 <NA> <NA> SPEAKER_00 <NA> <NA>\n"
        "SPEAKER my_meeting 1 1.600 3659.400 <NA> <NA> SPEAKER_01 <NA> <NA>\n"
    )
    assert to_rttm(SILENCE) == ""
    with pytest.raises(ValueError, match="diarization model"):
        to_rttm(PLAIN)


# Bob's "Yeah." while Alice talks: overlapping turns; words are attributed on the exclusive view.
_WORDS = (
    Word(" I", 0.0, 0.3, 1.0),
    Word(" think", 0.3, 0.8, 1.0),
    Word(" Yeah.", 0.9, 1.2, 1.0),
    Word(" so.", 1.3, 1.6, 1.0),
)
_ALICE = Chunk(0.0, 0.8, " I think", _WORDS[:2])
_BOB = Chunk(0.9, 1.2, " Yeah.", _WORDS[2:3])
_ALICE_AGAIN = Chunk(1.3, 1.6, " so.", _WORDS[3:])
OVERLAPPED = Transcript(
    text="I think Yeah. so.",
    chunks=(Chunk(0.0, 1.6, " I think Yeah. so.", _WORDS),),
    duration_s=2.0,
    speakers=(
        SpeakerSegment("alice", 0.0, 0.8, "I think", (_ALICE,)),
        SpeakerSegment("bob", 0.9, 1.2, "Yeah.", (_BOB,)),
        SpeakerSegment("alice", 1.3, 1.6, "so.", (_ALICE_AGAIN,)),
    ),
    # Out of order on purpose: a diarizer's turns reach RTTM sorted whatever their order here.
    turns=(SpeakerTurn(0.85, 1.25, "bob"), SpeakerTurn(0.0, 1.7, "alice"), SpeakerTurn(0.85, 1.0, "alice")),
    diarized=True,
)


def test_rttm_keeps_overlapping_turns_each_on_its_line_sorted() -> None:
    assert to_rttm(OVERLAPPED, file_id="call") == (
        "SPEAKER call 1 0.000 1.700 <NA> <NA> alice <NA> <NA>\n"
        "SPEAKER call 1 0.850 0.150 <NA> <NA> alice <NA> <NA>\n"
        "SPEAKER call 1 0.850 0.400 <NA> <NA> bob <NA> <NA>\n"
    )


def test_overlap_leaves_the_word_formats_exclusive() -> None:
    diarized = to_diarized_json(OVERLAPPED).model_dump()
    assert [(s["speaker"], s["start"], s["end"], s["text"]) for s in diarized["segments"]] == [
        ("alice", 0.0, 0.8, "I think"),
        ("bob", 0.9, 1.2, "Yeah."),
        ("alice", 1.3, 1.6, "so."),
    ]
    verbose = to_verbose_json(OVERLAPPED).model_dump()
    assert [(s["speaker"], s["text"]) for s in verbose["segments"]] == [
        ("alice", " I think"),
        ("bob", " Yeah."),
        ("alice", " so."),
    ]
    assert to_srt(OVERLAPPED).splitlines()[2::4] == ["alice: I think", "bob: Yeah.", "alice: so."]
    assert [line for line in to_vtt(OVERLAPPED).splitlines() if line.startswith("<v")] == [
        "<v alice>I think",
        "<v bob>Yeah.",
        "<v alice>so.",
    ]


def test_the_response_lists_the_turns_overlap_included_only_with_a_diarizer() -> None:
    assert OVERLAPPED.to_dict()["turns"] == [
        {"speaker": "alice", "start": 0.0, "end": 1.7},
        {"speaker": "alice", "start": 0.85, "end": 1.0},
        {"speaker": "bob", "start": 0.85, "end": 1.25},
    ]
    assert SILENCE.to_dict()["turns"] == []
    assert "turns" not in PLAIN.to_dict()


def test_json_shapes() -> None:
    assert to_json(PLAIN).model_dump() == {"text": PLAIN.text, "usage": {"type": "duration", "seconds": 3662.0}}
    assert to_json(DIARIZED).model_dump()["warnings"] == ["unknown parameter 'beam_size' was ignored"]
    verbose = to_verbose_json(DIARIZED).model_dump()
    assert verbose["task"] == "transcribe" and verbose["language"] == "english"
    assert verbose["segments"][1] == {
        "id": 1,
        "start": 1.5,
        "end": 3661.25,
        "text": " General <Kenobi> & co.",
        "speaker": "SPEAKER_01",
    }
    assert "speaker" not in to_verbose_json(PLAIN).model_dump()["segments"][0]
    assert to_verbose_json(PLAIN, task="translate").language == "english"
    assert to_verbose_json(SILENCE).model_dump()["language"] is None
    diarized = to_diarized_json(DIARIZED).model_dump()
    assert diarized["task"] == "transcribe" and diarized["duration"] == 3662.0
    assert diarized["segments"][0] == {
        "type": "transcript.text.segment",
        "id": "seg_0",
        "start": 0.0,
        "end": 1.5,
        "text": "Hello there.",
        "speaker": "SPEAKER_00",
    }
    with pytest.raises(ValueError):
        to_diarized_json(PLAIN)


def test_render_dispatches_every_format_to_its_own_renderer() -> None:
    """Exact content per name, so that two formats swapped in the table cannot pass."""
    assert render(DIARIZED, "text") == "Hello there. General <Kenobi> & co.\n"
    assert render(DIARIZED, "srt") == (
        "1\n00:00:00,000 --> 00:00:01,500\nSPEAKER_00: Hello there.\n\n"
        "2\n00:00:01,500 --> 01:01:01,250\nSPEAKER_01: General <Kenobi> & co.\n"
    )
    assert render(DIARIZED, "vtt") == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\n<v SPEAKER_00>Hello there.\n\n"
        "00:00:01.500 --> 01:01:01.250\n<v SPEAKER_01>General &lt;Kenobi&gt; &amp; co.\n"
    )
    assert render(DIARIZED, "rttm", file_id="call 1") == (
        "SPEAKER call_1 1 0.200 1.200 <NA> <NA> SPEAKER_00 <NA> <NA>\n"
        "SPEAKER call_1 1 1.600 3659.400 <NA> <NA> SPEAKER_01 <NA> <NA>\n"
    )
    assert render(DIARIZED, "json") == to_json(DIARIZED)
    assert render(DIARIZED, "verbose_json", task="translate") == to_verbose_json(DIARIZED, task="translate")
    assert render(DIARIZED, "diarized_json") == to_diarized_json(DIARIZED)
    page = render(DIARIZED, "html", file_id="call 1", audio_src="call%201.wav")
    assert isinstance(page, str) and page.startswith("<!DOCTYPE html>")
    assert "<title>call 1</title>" in page and 'data-audio="call%201.wav"' in page
    with pytest.raises(ValueError, match="unknown response format 'docx'; one of json, text, srt, vtt, "):
        render(DIARIZED, "docx")


def test_every_row_renders_what_it_declares() -> None:
    assert list(FORMATS) == ["json", "text", "srt", "vtt", "verbose_json", "diarized_json", "rttm", "html"]
    for name, row in FORMATS.items():
        assert row.name == name and output_format(name) is row
        rendered = row.render(DIARIZED, Rendering())
        if row.is_json:
            assert row.media_type == "application/json" and type(rendered) is row.json_model
        else:
            assert isinstance(rendered, str)
        if row.needs_speakers:
            with pytest.raises(ValueError, match="diarization model"):
                row.render(PLAIN, Rendering())


def test_the_table_keeps_every_edge_s_facts() -> None:
    """What the routes answer with, the CLI's file names, what streams and what needs a diarizer."""
    assert {name: row.media_type for name, row in FORMATS.items()} == {
        "json": "application/json",
        "text": "text/plain",
        "srt": "application/x-subrip",
        "vtt": "text/vtt",
        "verbose_json": "application/json",
        "diarized_json": "application/json",
        "rttm": "text/plain",
        "html": "text/html",
    }
    assert {name: row.suffix for name, row in FORMATS.items()} == {
        "json": ".json",
        "text": ".txt",
        "srt": ".srt",
        "vtt": ".vtt",
        "verbose_json": ".verbose.json",
        "diarized_json": ".diarized.json",
        "rttm": ".rttm",
        "html": ".html",
    }

    def names(flag: str) -> set[str]:
        return {name for name, row in FORMATS.items() if getattr(row, flag)}

    assert names("is_json") == {"json", "verbose_json", "diarized_json"}
    assert names("needs_speakers") == {"diarized_json", "rttm"}
    assert names("needs_words") == {"html"}
    assert names("words_on_request") == {"verbose_json"}
    assert names("streamable") == {"json", "text", "diarized_json"}
    assert names("plays_audio") == {"html"}
    assert set(FORMATS) - names("translatable") == {"diarized_json"}


@pytest.mark.parametrize(
    "transcript", [PLAIN, DIARIZED, SILENCE, OVERLAPPED], ids=["plain", "diarized", "silence", "overlapped"]
)
def test_the_server_response_model_is_exactly_the_core_dict(transcript: Transcript) -> None:
    """POST / answers TranscriptResponse(**transcript.to_dict()): nothing may be added or lost."""
    as_dict = transcript.to_dict()
    assert TranscriptResponse.model_validate(as_dict).model_dump(mode="json") == as_dict


def test_words_in_verbose_json_and_the_response_only_when_asked() -> None:
    import dataclasses


    words = (Word(" Hello", 0.0, 0.61234, 0.91), Word(" there.", 0.7, 1.5, 0.5))
    timed = dataclasses.replace(PLAIN, chunks=(dataclasses.replace(HELLO, words=words), ANSWER))
    asked = dataclasses.replace(timed, word_timestamps=True)
    assert to_verbose_json(timed).words is None
    assert "words" not in to_verbose_json(timed).model_dump(mode="json")
    assert [w.model_dump() for w in to_verbose_json(asked).words] == [
        {"word": "Hello", "start": 0.0, "end": 0.612},
        {"word": "there.", "start": 0.7, "end": 1.5},
    ]
    assert "words" not in timed.to_dict()["chunks"][0]
    assert asked.to_dict()["chunks"] == [
        {
            "timestamp": [0.0, 1.5],
            "text": " Hello there.",
            "words": [
                {"text": " Hello", "timestamp": [0.0, 0.612], "probability": 0.91},
                {"text": " there.", "timestamp": [0.7, 1.5], "probability": 0.5},
            ],
        },
        {"timestamp": [1.5, 3661.25], "text": " General <Kenobi> & co.", "words": []},
    ]
    TranscriptResponse.model_validate(asked.to_dict())
    assert to_srt(asked) == to_srt(PLAIN) and to_vtt(asked) == to_vtt(PLAIN)  # subtitles stay segment cues


def test_post_s_answer_and_its_openapi_schema_come_from_one_class() -> None:
    """POST /'s response model is the class the core fills for `Transcript.to_dict()`, and a
    transcript with everything (words, languages, speakers, turns, identities, channels,
    warnings) dumps to exactly its dict through it, nulls and absent keys as they are."""
    import dataclasses
    import typing

    from whosaid.results import SpeakerIdentity, to_transcript_json
    from whosaid.server.routes.inference import router

    route = next(route for route in router.routes if getattr(route, "path", None) == "/")
    assert route.response_model is TranscriptResponse
    assert typing.get_type_hints(to_transcript_json)["return"] is TranscriptResponse
    words = (Word(" Hello", 0.0, 0.61234, 0.912345), Word(" there.", 0.7, 1.5, 0.5))
    hello = dataclasses.replace(HELLO, words=words, language="en", channel=0)
    everything = dataclasses.replace(
        DIARIZED,
        chunks=(hello, dataclasses.replace(ANSWER, language="fr", channel=1)),
        speakers=tuple(dataclasses.replace(s, channel=i) for i, s in enumerate(DIARIZED.speakers)),
        turns=(SpeakerTurn(0.2, 1.4, "SPEAKER_00", 0), SpeakerTurn(1.6, 3661.0, "SPEAKER_01", 1)),
        word_timestamps=True,
        multilingual=True,
        speaker_identities=(
            SpeakerIdentity("alice", "SPEAKER_00", "alice", 0.81, (0.6, -0.8000004, 1e-6)),
            SpeakerIdentity("SPEAKER_01", "SPEAKER_01", None, None),
        ),
        channels=2,
    )
    as_dict = everything.to_dict()
    assert type(to_transcript_json(everything)) is TranscriptResponse
    assert TranscriptResponse.model_validate(as_dict).model_dump(mode="json") == as_dict
    assert list(as_dict) == [
        "text", "chunks", "speakers", "turns", "language", "duration", "decoding", "channels",
        "speaker_identities", "warnings",
    ]
    assert as_dict["chunks"][0] == {
        "timestamp": [0.0, 1.5],
        "text": " Hello there.",
        "words": [
            {"text": " Hello", "timestamp": [0.0, 0.612], "probability": 0.9123},
            {"text": " there.", "timestamp": [0.7, 1.5], "probability": 0.5},
        ],
        "language": "en",
        "channel": 0,
    }
    assert as_dict["turns"][1] == {"speaker": "SPEAKER_01", "start": 1.6, "end": 3661.0, "channel": 1}
    assert as_dict["speaker_identities"] == [
        {"speaker": "alice", "diarized_as": "SPEAKER_00", "name": "alice", "similarity": 0.81,
         "embedding": [0.6, -0.8, 1e-6]},
        {"speaker": "SPEAKER_01", "diarized_as": "SPEAKER_01", "name": None, "similarity": None},
    ]
    assert as_dict["channels"] == 2 and as_dict["warnings"] == ["unknown parameter 'beam_size' was ignored"]


def test_a_file_of_json_is_post_s_answer_the_other_files_the_routes_answers() -> None:
    """The CLI's `-f json` is the full transcript (POST /, asked there by --url); its row says so,
    where the routes' `json` stays OpenAI's JsonTranscription."""
    import json

    row = FORMATS["json"]
    assert {name for name, other in FORMATS.items() if other.file_output} == {"json"}
    assert row.file_output.json_model is TranscriptResponse and row.file_output.route == "/"
    assert row.json_model is not TranscriptResponse
    text = row.file_text(DIARIZED, Rendering())
    assert text == json.dumps(DIARIZED.to_dict(), ensure_ascii=False, indent=2) + "\n"
    verbose = FORMATS["verbose_json"].file_text(DIARIZED, Rendering(task="translate"))
    assert verbose == to_verbose_json(DIARIZED, task="translate").model_dump_json(indent=2) + "\n"
    assert FORMATS["srt"].file_text(DIARIZED, Rendering()) == to_srt(DIARIZED)


def test_what_a_format_needs_of_the_engine_is_said_once_for_every_edge() -> None:
    """check_format refuses a speakers format without a diarizer, in each edge's words (asking
    about the diarizer only then); parameters_for adds the word timestamps html shows."""
    from whosaid.errors import InvalidParametersError
    from whosaid.formats import check_format, parameters_for

    def no_diarizer() -> bool:
        raise AssertionError("asked about the diarizer for a format that does not need one")

    assert check_format("srt", has_diarizer=no_diarizer) is FORMATS["srt"]
    assert check_format("rttm", has_diarizer=lambda: True) is FORMATS["rttm"]
    with pytest.raises(InvalidParametersError) as refused:
        check_format("diarized_json", has_diarizer=lambda: False, option="--format ", hint=" (load one)")
    assert str(refused.value) == "--format diarized_json needs a diarization model (load one)"
    with pytest.raises(InvalidParametersError, match="^response_format=rttm needs a diarization model$"):
        check_format("rttm", has_diarizer=lambda: False)
    with pytest.raises(ValueError, match="unknown response format 'docx'"):
        check_format("docx", has_diarizer=lambda: True)
    asked = {"language": "en"}
    assert parameters_for("html", asked) == {"language": "en", "return_timestamps": "word"}
    assert parameters_for("verbose_json", asked) == asked and parameters_for("verbose_json", asked) is not asked
    assert asked == {"language": "en"}
