"""multichannel=true: each channel decoded, transcribed and labelled on its own, merged by time.

On real stereo speech: faster-whisper's stereo test file (tests/data/README.md), whose channels
say two different sentences at once, and a two-party call built from real speech with human
transcripts (../shared/data/asr; skipped where that folder is absent), with overlapping turns
and each party's voice faintly on the other channel (benchmarks/diarization/multichannel.py builds it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from benchmarks.diarization import multichannel as call_bench
from tests.support.audio_files import channels_wav
from whosaid.audio.loading import load_audio, load_audio_file
from whosaid.config import InferenceConfig
from whosaid.errors import AudioTooLongError, InvalidParametersError
from whosaid.formats import to_diarized_json, to_rttm, to_srt, to_verbose_json, to_vtt
from whosaid.results import Chunk, Word
from whosaid.server.schemas import TranscriptResponse
from whosaid.speakers.channels import crosstalk_words, merge_channels, without_crosstalk, without_drowned_speech

STEREO = Path(__file__).parents[1] / "data" / "stereo_diarization.wav"
# faster-whisper's own test of this file (tests/test_transcribe.py, test_stereo_diarization).
LEFT = "He began a confused complaint against the wizard, who had vanished behind the curtain on the left."
RIGHT = "The horizon seems extremely distant."
NINE_CHANNELS = channels_wav(np.tile(np.float32(0.01) * np.sin(np.arange(16_000, dtype=np.float32) / 7), (9, 1)))


def words_of(transcript, channel: int) -> str:
    return "".join(chunk.text for chunk in transcript.chunks if chunk.channel == channel).strip()


# --- decoding ------------------------------------------------------------------------------------


def test_each_channel_is_decoded_on_its_own_and_mono_is_unchanged() -> None:
    stereo = load_audio_file(STEREO, multichannel=True)
    assert [len(channel.samples) for channel in stereo.channels] == [80_000, 80_000]
    assert stereo.duration_s == 5.0
    left, right = (channel.samples for channel in stereo.channels)
    assert not np.allclose(left, right)
    assert load_audio_file(STEREO).channels == ()  # downmixed, as before
    mono = channels_wav(left[None, :])
    assert load_audio(mono, multichannel=True).channels == ()
    np.testing.assert_array_equal(load_audio(mono, multichannel=True).samples, load_audio(mono).samples)


def test_eight_channels_without_a_layout_decode_apart() -> None:
    levels = np.arange(8, dtype=np.float32)[:, None] * np.float32(0.01)
    audio = load_audio(channels_wav(np.tile(levels, (1, 16_000))), multichannel=True)
    assert [round(float(channel.samples.mean()), 3) for channel in audio.channels] == [
        0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07,
    ]


def test_the_length_limit_counts_the_recording_not_channels_times_it() -> None:
    assert len(load_audio_file(STEREO, max_duration_s=5.0, multichannel=True).channels) == 2
    with pytest.raises(AudioTooLongError, match="longer than the limit of 4 s"):
        load_audio_file(STEREO, max_duration_s=4.0, multichannel=True)


def test_more_than_eight_channels_is_the_clients_error() -> None:
    with pytest.raises(InvalidParametersError) as raised:
        load_audio(NINE_CHANNELS, multichannel=True)
    assert str(raised.value) == (
        "multichannel=true takes at most 8 channels, and the audio holds 9: send the channels in groups of at "
        "most 8, or multichannel=false to downmix them"
    )
    with pytest.raises(InvalidParametersError, match="the audio holds 9"):
        load_audio({"array": np.zeros((9, 16_000), np.float32), "sampling_rate": 16_000}, multichannel=True)


def test_channel_parameters_are_checked() -> None:
    config, _ = InferenceConfig.from_parameters({"multichannel": "true", "channel_names": ["Agent", "Caller"]})
    assert (config.multichannel, config.channel_names) == (True, ["Agent", "Caller"])
    config, _ = InferenceConfig.from_parameters({"channel_names": ["Agent"]})  # names imply multichannel
    assert (config.multichannel, config.channel_names) == (True, ["Agent"])
    for parameters, message in (
        ({"multichannel": False, "channel_names": ["Agent"]}, "channel_names need multichannel=true"),
        ({"multichannel": True, "channel_names": ["Agent", " Agent "]}, "'Agent' is given twice"),
        ({"multichannel": True, "channel_names": ["CHANNEL_1"]}, "looks like a generated label"),
        ({"multichannel": True, "channel_names": [""]}, "channel name #1 is empty"),
        ({"multichannel": True, "channel_names": [f"n{i}" for i in range(9)]}, "at most 8 items"),
    ):
        with pytest.raises(InvalidParametersError, match=message):
            InferenceConfig.from_parameters(parameters)


# --- crosstalk and merging, on words with known times ---------------------------------------------


def test_a_faint_run_of_the_loud_channels_words_is_dropped_and_a_quiet_party_is_kept() -> None:
    rate = 16_000
    loud = np.float32(0.3) * np.sin(np.arange(4 * rate, dtype=np.float32) / 5)
    faint = np.zeros(4 * rate, np.float32)
    faint[: 2 * rate] = loud[: 2 * rate] * np.float32(0.03)  # -30 dB: the loud party's echo
    faint[2 * rate :] = loud[2 * rate :] * np.float32(0.1)  # -20 dB, but other words: a quiet party
    channels = load_audio({"array": np.stack([loud, faint]), "sampling_rate": rate}, multichannel=True).channels

    def word(text: str, start_s: float) -> Word:
        return Word(text, start_s, start_s + 0.4, 0.9)

    said = [word(" hello", 0.1), word(" there", 0.6), word(" right", 2.1)]
    echo = [word(" hello", 0.2), word(" their", 0.7), word(" no", 2.2), word(" way", 2.7)]
    assert crosstalk_words([said, echo], channels) == [set(), {0, 1}]
    chunks = [[Chunk(0.1, 2.5, "", tuple(said))], [Chunk(0.2, 3.1, "", tuple(echo))]]
    kept, dropped = without_crosstalk(chunks, channels)
    assert dropped == 2
    assert [(chunk.text, chunk.start_s, chunk.channel) for chunk in kept[1]] == [(" no way", 2.2, 1)]


def test_speech_regions_another_channel_drowns_are_silenced_before_recognition() -> None:
    rate = 16_000
    loud = np.float32(0.3) * np.sin(np.arange(4 * rate, dtype=np.float32) / 5)
    faint = loud * np.float32(0.03)  # -30 dB throughout: the echo
    faint[3 * rate :] = loud[3 * rate :]  # its own party in the last second, as loud
    channels = load_audio({"array": np.stack([loud, faint]), "sampling_rate": rate}, multichannel=True).channels
    track, silenced_s = without_drowned_speech(channels, 1, [(0.0, 2.0), (2.5, 4.0)])
    assert silenced_s == 2.0
    assert not track.samples[: 2 * rate].any()
    np.testing.assert_array_equal(track.samples[2 * rate :], channels[1].samples[2 * rate :])
    assert without_drowned_speech(channels, 0, [(0.0, 4.0)]) == (channels[0], 0.0)


def test_channels_merge_by_time_into_segments_of_one_speaker() -> None:
    from whosaid.results import SpeakerSegment, SpeakerTurn
    from whosaid.speakers.channels import ChannelResult

    a1, a2 = Chunk(0.0, 2.0, " one", channel=0), Chunk(3.0, 4.0, " three", channel=0)
    b1 = Chunk(1.5, 2.5, " two", channel=1)
    results = [
        ChannelResult(0, (SpeakerSegment("A", 0, 4, "", (a1, a2), 0),), (SpeakerTurn(0.0, 4.0, "A", 0),)),
        ChannelResult(1, (SpeakerSegment("B", 1.5, 2.5, "", (b1,), 1),), (SpeakerTurn(1.5, 2.5, "B", 1),)),
    ]
    chunks, segments, turns = merge_channels(results)
    assert [chunk.text for chunk in chunks] == [" one", " two", " three"]
    assert [(s.speaker, s.text, s.channel) for s in segments] == [("A", "one", 0), ("B", "two", 1), ("A", "three", 0)]
    assert [(t.speaker, t.start_s, t.end_s) for t in turns] == [("A", 0.0, 4.0), ("B", 1.5, 2.5)]


def test_speakers_diarized_within_a_channel_are_labelled_by_it() -> None:
    from whosaid.engine import _speaker_label

    assert _speaker_label("SPEAKER_00", "CHANNEL_0", 1, named=False, known=set()) == "CHANNEL_0"
    assert _speaker_label("SPEAKER_01", "CHANNEL_0", 2, named=False, known=set()) == "CHANNEL_0/SPEAKER_01"
    assert _speaker_label("Ann", "CHANNEL_1", 1, named=False, known={"Ann"}) == "Ann"  # a known voice
    assert _speaker_label("Ann", "Agent", 1, named=True, known={"Ann"}) == "Agent"  # channel_names first
    assert _speaker_label("Ann", "Room", 2, named=True, known={"Ann"}) == "Ann"


# --- real stereo speech ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_engine(converted_model, make_engine):
    return make_engine(converted_model("whisper-base"))


@pytest.fixture(scope="module")
def stereo_transcript(base_engine):
    return base_engine.run(STEREO.read_bytes(), {"multichannel": True, "language": "en", "return_timestamps": "word"})


def test_each_channel_says_its_own_sentence(stereo_transcript) -> None:
    assert words_of(stereo_transcript, 0) == LEFT
    assert words_of(stereo_transcript, 1) == RIGHT
    assert stereo_transcript.channels == 2
    assert {(s.speaker, s.channel) for s in stereo_transcript.speakers} == {("CHANNEL_0", 0), ("CHANNEL_1", 1)}
    for chunk in stereo_transcript.chunks:
        assert chunk.words and "".join(word.text for word in chunk.words) == chunk.text
    starts = [chunk.start_s for chunk in stereo_transcript.chunks]
    assert starts == sorted(starts)
    response = stereo_transcript.to_dict()
    assert response["channels"] == 2
    assert [chunk["channel"] for chunk in response["chunks"]] == [chunk.channel for chunk in stereo_transcript.chunks]
    assert {turn["channel"] for turn in response["turns"]} == {0, 1}
    # The server's response model, verbose_json and diarized_json keep the channels.
    assert TranscriptResponse.model_validate(response).model_dump(mode="json", exclude_none=True) == response
    segments = to_diarized_json(stereo_transcript).segments
    assert [(s.speaker, s.channel) for s in segments] == [(s.speaker, s.channel) for s in stereo_transcript.speakers]
    verbose = to_verbose_json(stereo_transcript).segments
    assert [(s.speaker, s.channel, s.text) for s in verbose] == [
        (f"CHANNEL_{chunk.channel}", chunk.channel, chunk.text) for chunk in stereo_transcript.chunks
    ]


def test_talking_at_once_is_two_overlapping_turns_in_every_format(stereo_transcript) -> None:
    rttm = [line.split() for line in to_rttm(stereo_transcript, file_id="call").splitlines()]
    assert [line[7] for line in rttm] == ["CHANNEL_0", "CHANNEL_1"]
    (start0, length0), (start1, _) = ((float(line[3]), float(line[4])) for line in rttm)
    assert start1 < start0 + length0  # overlap: the right channel starts before the left one ends
    srt, vtt = to_srt(stereo_transcript), to_vtt(stereo_transcript)
    for segment in stereo_transcript.speakers:
        assert f"{segment.speaker}: {segment.text}" in srt
        assert f"<v {segment.speaker}>{segment.text}" in vtt


def test_the_cli_transcribes_channels_apart(capsys, converted_model) -> None:
    from whosaid.cli.main import main

    model = str(converted_model("whisper-base"))
    argv = ["transcribe", str(STEREO), "--asr-model", model, "--device", "cpu", "--multichannel", "--language", "en"]
    assert main([*argv, "-f", "srt", "--channel-name", "Left"]) == 0
    srt = capsys.readouterr().out
    assert "Left: He began a confused complaint against the wizard, who" in srt
    assert "CHANNEL_1: The horizon seems extremely distant." in srt


def test_channel_names_name_the_channels(base_engine) -> None:
    transcript = base_engine.run(
        STEREO.read_bytes(), {"multichannel": True, "language": "en", "channel_names": ["Wizard fan"]}
    )
    assert [(s.speaker, s.channel) for s in transcript.speakers][:2] == [("Wizard fan", 0), ("CHANNEL_1", 1)]
    with pytest.raises(InvalidParametersError, match="channel_names gives 3 names, but the audio holds 2 channels"):
        base_engine.run(STEREO.read_bytes(), {"multichannel": True, "channel_names": ["a", "b", "c"]})


def test_mono_with_multichannel_is_the_same_transcript(base_engine) -> None:
    mono = channels_wav(load_audio_file(STEREO, multichannel=True).channels[0].samples[None, :])
    assert base_engine.run(mono, {"multichannel": True}).to_dict() == base_engine.run(mono, {}).to_dict()


# --- the channels' windows decoded together --------------------------------------------------------


def test_the_tracks_windows_go_in_shared_batches_each_tracks_first_alone_with_a_prompt() -> None:
    from whosaid.audio.vad import SpeechWindow
    from whosaid.recognition.recognizer import TrackWindow, track_batches

    windows = [TrackWindow(0, SpeechWindow(s, s + 5)) for s in (0, 10, 20)] + [
        TrackWindow(1, SpeechWindow(s, s + 5)) for s in (5, 15)
    ]
    assert track_batches(windows, 4, prompted=False) == [(windows[:4], False), (windows[4:], False)]
    # As transcribe decodes a track's first window alone with the initial prompt.
    assert track_batches(windows, 4, prompted=True) == [
        ([windows[0], windows[3]], True),
        ([windows[1], windows[2], windows[4]], False),
    ]
    one_by_one = track_batches(windows, 1, prompted=True)
    assert one_by_one[:3] == [([windows[0]], True), ([windows[3]], True), ([windows[1]], False)]
    assert track_batches([], 4, prompted=True) == []


def each_alone(recognizer, tracks, config, monkeypatch):
    """Each track through `transcribe` on its own, with the windows transcribe_tracks plans."""
    import functools

    with monkeypatch.context() as patch:
        patch.setattr(recognizer, "_windows", functools.partial(recognizer._windows, fewest=True))
        return [recognizer.transcribe(track, config) for track in tracks]


def assert_same_chunks(outputs, alone) -> None:
    """The same chunks and words, times and all; a word's probability only to float rounding (a
    batch of more windows scores it in other sums)."""

    def probabilities(output):
        return [word.probability for chunk in output.chunks for word in chunk.words]

    def without_probabilities(output):
        return [
            dataclasses.replace(chunk, words=tuple(dataclasses.replace(w, probability=0.0) for w in chunk.words))
            for chunk in output.chunks
        ]

    assert [without_probabilities(output) for output in outputs] == [without_probabilities(output) for output in alone]
    for mine, theirs in zip(outputs, alone, strict=True):
        assert probabilities(mine) == pytest.approx(probabilities(theirs), abs=1e-4)


def together(recognizer, tracks, config, monkeypatch):
    """transcribe_tracks, and the number of windows of each batch it decoded."""
    batches: list[int] = []
    decode = recognizer._transcribe_track_windows

    def recorded(tracks, windows, *args, **kwargs):
        batches.append(len(windows))
        return decode(tracks, windows, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(recognizer, "_transcribe_track_windows", recorded)
        return recognizer.transcribe_tracks(tracks, config), batches


@pytest.mark.parametrize(
    "parameters",
    [
        {"language": "en"},
        {},  # each channel's language detected on its own first window
        {"language": "en", "initial_prompt": "The wizard and the horizon."},
    ],
)
def test_the_channels_decoded_together_say_what_each_says_alone(base_engine, monkeypatch, parameters) -> None:
    recognizer = base_engine.recognizer
    tracks = load_audio_file(STEREO, multichannel=True).channels
    config = InferenceConfig(return_timestamps="word", **parameters)
    outputs, batches = together(recognizer, tracks, config, monkeypatch)
    assert batches == [2]  # one window each, in one batch
    alone = each_alone(recognizer, tracks, config, monkeypatch)
    assert_same_chunks(outputs, alone)
    assert [(o.language, o.decoding, o.warnings) for o in outputs] == [
        (o.language, o.decoding, o.warnings) for o in alone
    ]
    assert "".join(chunk.text for chunk in outputs[0].chunks).strip() == LEFT
    assert recognizer.transcribe_tracks([], config) == []


@pytest.mark.skipif(
    not call_bench.available(call_bench.LONG_CALL_TURNS), reason=f"no real speech in {call_bench.ASR_DIR}"
)
def test_a_calls_channels_decoded_together_say_what_each_says_alone(base_engine, monkeypatch) -> None:
    """The benchmark's six-turn call, each party's turns joined on its channel: the windows of
    both channels in one batch, and each channel's chunks as it gives them alone."""
    recognizer = base_engine.recognizer
    call = call_bench.build_call(call_bench.LONG_CALL_TURNS)
    tracks = load_audio(call.wav_bytes(), multichannel=True).channels
    config = InferenceConfig(return_timestamps="word", language="en")
    outputs, batches = together(recognizer, tracks, config, monkeypatch)
    assert len(batches) == 1
    alone = each_alone(recognizer, tracks, config, monkeypatch)
    assert_same_chunks(outputs, alone)


# --- a call built from real speech ----------------------------------------------------------------


@pytest.mark.skipif(not call_bench.available(), reason=f"no real speech in {call_bench.ASR_DIR}")
def test_a_call_gives_each_party_its_words_once(base_engine) -> None:
    call = call_bench.build_call()
    transcript = base_engine.run(call.wav_bytes(), {"multichannel": True, "language": "en"})
    scores = call_bench.scores(call, transcript)
    print(scores)
    assert scores["cpwer"] - scores["wer"] <= 0.01
    assert scores["cpwer"] <= 0.05  # measured 0.033 (whisper-base), no word inserted
    # No crosstalk word: each channel's words lie within its party's turn (Whisper's first word of
    # a turn may start up to 0.7 s early), and no channel has more words than its party said.
    for channel, start_s, end_s in call.turns:
        for chunk in transcript.chunks:
            if chunk.channel == channel:
                assert start_s - 1.0 <= chunk.words[0].start_s and chunk.words[-1].end_s <= end_s + 1.0
    for channel, reference in enumerate(call.references):
        said = call_bench.word_errors(reference, "")[1]
        # ("woodcutters" heard as "wood cutters" is one word more; crosstalk would be dozens)
        assert call_bench.word_errors(call_bench.channel_text(transcript, channel), "")[1] <= said + 2
    turns = sorted(transcript.turns, key=lambda turn: turn.start_s)
    assert [turn.speaker for turn in turns] == ["CHANNEL_0", "CHANNEL_1"]
    assert turns[1].start_s < turns[0].end_s  # the parties overlap, and RTTM keeps both


def test_with_the_diarizer_each_channel_is_diarized_on_its_own(converted_model, make_engine) -> None:
    engine = make_engine(converted_model("whisper-base"), diarization="builtin")
    transcript = engine.run(STEREO.read_bytes(), {"multichannel": True, "language": "en"})
    assert words_of(transcript, 0) == LEFT and words_of(transcript, 1) == RIGHT
    # One voice on each channel: the channel's label, not CHANNEL_0/SPEAKER_00.
    assert {(turn.speaker, turn.channel) for turn in transcript.turns} == {("CHANNEL_0", 0), ("CHANNEL_1", 1)}
    assert {(s.speaker, s.channel) for s in transcript.speakers} == {("CHANNEL_0", 0), ("CHANNEL_1", 1)}
