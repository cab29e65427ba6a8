"""The parts of live transcription on their own: stable prefixes (local agreement), the input
buffer's turn detection on real speech (Silero VAD), incremental speaker clustering, and the
PCM stream."""

from __future__ import annotations

import numpy as np
import pytest

from whosaid.errors import InvalidAudioError
from whosaid.live.agreement import StablePrefix, loop_start
from whosaid.live.pcm import Pcm16Stream
from whosaid.live.speakers import LiveSpeakers
from whosaid.live.turns import LOOKBACK_S, InputBuffer, TurnDetection
from whosaid.speakers.known import KnownVoice

RATE = 16_000


def test_words_are_sent_once_two_hypotheses_agree_and_never_taken_back() -> None:
    prefix = StablePrefix()
    assert prefix.update("Hello there") == ""  # one hypothesis proves nothing
    # Agreed without case and punctuation; the last two words of a hypothesis always wait.
    assert prefix.update("Hello, there my") == "Hello,"
    assert prefix.update("Hello there my friend how") == " there my"
    assert prefix.update("Hello there, my friend, how are you") == " friend, how"
    # A hypothesis that rewrites sent words sends nothing; the words sent stay.
    assert prefix.update("Yellow there my friend how are you doing") == ""
    assert prefix.text == "Hello, there my friend, how"
    # The final transcript adds what follows the words that match what was sent.
    assert prefix.complete("Hello there, my friend. How are you doing?") == " are you doing?"
    assert prefix.text == "Hello, there my friend, how are you doing?"


def test_the_final_transcript_is_joined_after_the_last_word_that_matches() -> None:
    prefix = StablePrefix()
    prefix.update("one two three four")
    assert prefix.update("one two three four five six") == "one two three four"
    # "two" became "too" in the final: still aligned, so nothing is repeated or lost.
    assert prefix.complete("One too three four five six.") == " five six."
    assert prefix.text == "one two three four five six."
    empty = StablePrefix()
    assert empty.complete("") == "" and empty.text == ""
    only_final = StablePrefix()
    assert only_final.complete("Just this.") == "Just this."


def test_where_the_final_does_not_match_the_last_word_sent_the_word_times_decide() -> None:
    # Whisper's final dropped the sent "like" (heard as the context's end): by text nothing
    # matches and "duplication" would be taken for it; by time it follows "like".
    prefix = StablePrefix()
    prefix.update("like duplication", [(0.0, 0.3), (0.4, 1.0)])
    assert prefix.update("like duplication of", [(0.0, 0.3), (0.4, 1.0), (1.0, 1.2)]) == "like"
    final = "duplication of effort and stuff."
    times = [(0.4, 1.0), (1.0, 1.2), (1.2, 1.5), (1.6, 1.7), (1.7, 2.1)]
    assert prefix.complete(final, times) == " duplication of effort and stuff."
    # The last sent word heard differently ("the" for "it"): the final from after its time.
    prefix = StablePrefix()
    prefix.update("Is there much more in the net", [(0.1 * i, 0.1 * i + 0.1) for i in range(7)])
    assert prefix.update("Is there much more in the next last", [(0.1 * i, 0.1 * i + 0.1) for i in range(8)]) == (
        "Is there much more in the"
    )
    final = "Is there much more in it than he said yesterday?"
    assert prefix.complete(final, [(0.1 * i, 0.1 * i + 0.1) for i in range(10)]) == " than he said yesterday?"
    # A last sent word as common as "a" also matches far later in the final: the times say where.
    heard = [(5.0, 5.2), (5.2, 5.6), (5.6, 5.8), (5.8, 6.2), (6.3, 6.5), (6.6, 7.0), (7.1, 7.3)]
    prefix = StablePrefix()
    prefix.update("I thought I heard a", heard[:5])
    assert prefix.update("I thought I heard a beat this", heard) == "I thought I heard a"
    long_final = "I thought I heard of deep this is Diane they call me a Yankee"
    times = heard[:5] + [(6.6, 7.0), (7.1, 7.3), (7.3, 7.5), (7.5, 8.0), (8.5, 8.7), (8.7, 9.0), (9.0, 9.2)]
    times += [(9.2, 9.3), (9.3, 9.8)]
    assert prefix.complete(long_final, times) == " deep this is Diane they call me a Yankee"
    # Without times, as before: the words after the match, less as many as were sent past it.
    untimed = StablePrefix()
    untimed.update("like duplication")
    untimed.update("like duplication of")
    assert untimed.complete(final) == " there much more in it than he said yesterday?"


def test_a_final_that_ends_with_the_last_words_sent_goes_on_after_them_whatever_their_times() -> None:
    # AMI: drafts of the turn alone sent "... will all be doing checking" (ending at 5.92 s); the
    # final, heard after the session's earlier speech, put "checking" at 6.52 s. By time alone it
    # lies after the sent words and was sent again ("doing checking checking by with ...").
    drafts = [(0.4 * i, 0.4 * i + 0.3) for i in range(13)] + [(5.6, 5.92)]
    sent = "myself and my coke's not here and occasionally Melissa will all be doing checking"
    prefix = StablePrefix()
    prefix.update(sent + " by the", drafts + [(6.0, 6.2), (6.2, 6.4)])
    assert prefix.update(sent + " by with", drafts + [(6.0, 6.2), (6.2, 6.4)]) == sent
    final = sent + " by with the transcriptions."
    times = [(0.4 * i + 0.3, 0.4 * i + 0.6) for i in range(13)] + [(6.1, 6.52), (6.6, 6.8), (6.8, 7.0)]
    times += [(7.0, 7.1), (7.1, 7.9)]
    assert prefix.complete(final, times) == " by with the transcriptions."
    assert prefix.text == final


def test_a_hypothesis_at_a_pause_holds_no_word_back() -> None:
    """At a pause the audio ends between words: the words it agrees on with the hypothesis
    before all go, the last ones too; what it alone says waits for the final."""
    prefix = StablePrefix()
    assert prefix.update("Not really") == ""
    assert prefix.update("Not really.", at_pause=True) == "Not really."
    assert prefix.update("Not really. Just what", at_pause=True) == ""
    assert prefix.update("Not really. Just what he's talking about") == " Just what"
    other = StablePrefix()
    other.update("Is there much more in it")
    assert other.update("Is there much more in the next slide?", at_pause=True) == "Is there much more in"


def test_a_hypothesis_that_rewrites_a_sent_word_still_extends_the_text_by_its_times() -> None:
    """A long turn: once Whisper hears an early word differently ("need" then "needed"), no
    hypothesis starts with the words sent any more; the words after the last one sent (by their
    times) are compared instead, so the captions keep growing."""

    def timed(text: str) -> tuple[str, list[tuple[float, float]]]:
        return text, [(0.4 * index, 0.4 * index + 0.3) for index in range(len(text.split()))]

    prefix = StablePrefix()
    assert prefix.update(*timed("I need to design. Okay, I")) == ""
    assert prefix.update(*timed("I need to design. Okay, I thought")) == "I need to design. Okay,"
    assert prefix.update(*timed("I needed to design. Okay, I thought, you know")) == " I thought,"
    assert prefix.update(*timed("I needed to design. Okay, I thought, you know I heard")) == " you know"
    # Without times such a hypothesis cannot be placed: nothing is sent, nothing is lost.
    assert prefix.update("I needed to design. Okay, I thought, you know I heard of the") == ""
    # Nor where the word before the first unsent one is not the last word sent (the times are
    # a word late): two such hypotheses agree on "know I heard", which would send "know" twice.
    for text in (
        "I needed to design. Okay, I thought, you know I heard of the",
        "I needed to design. Okay, I thought, you know I heard of the this is Diane",
    ):
        words, times = timed(text)
        assert prefix.update(words, [(start + 0.4, end + 0.4) for start, end in times]) == ""
    assert prefix.text == "I need to design. Okay, I thought, you know"


def test_a_draft_without_words_changes_nothing() -> None:
    """A greedy draft whose window failed Whisper's checks has no words: the next hypothesis
    agrees with the one before it (not with nothing, which would hold every word back a step)."""
    prefix = StablePrefix()
    assert prefix.update("Okay, does anyone") == ""
    assert prefix.update("") == ""
    assert prefix.update("Okay, does anyone want to see") == "Okay, does anyone"
    # At a pause an empty hypothesis is the turn's answer so far: it does count.
    assert prefix.update("", at_pause=True) == ""
    assert prefix.update("Okay, does anyone want to see Steve's") == ""


def test_a_phrase_said_a_third_time_in_a_row_is_not_sent_before_the_turn_ends() -> None:
    """Greedy Whisper loops on a turn's first second ("Hello? Hello? Hello? ..."), and two
    hypotheses may agree on the loop: only two times of a phrase are sent; the final adds the rest."""
    assert loop_start("Hello? Hello? Hello? Hello? were".split()) == 2
    assert loop_start("and so on and so on and so on then".split()) == 6
    assert loop_start("Hello. Hello. Oh, hello. I didn't".split()) == 6  # said twice: no loop, all 6 words
    prefix = StablePrefix()
    prefix.update("Hello? Hello? Hello? Hello? Hello? Hello?")
    assert prefix.update("Hello? Hello? Hello? Hello? Hello? Hello? Hello?") == "Hello? Hello?"
    assert prefix.update("Hello? Hello? Hello? Hello? Hello? Hello? Hello? Hello?") == ""
    final = "Hello? Hello. Oh, hello. I didn't know you were there."
    assert prefix.complete(final) == " Oh, hello. I didn't know you were there."


def speech_then_silence(sample_audio, start_s: float, end_s: float, silence_s: float = 1.0) -> np.ndarray:
    silence = np.zeros(int(silence_s * RATE), np.float32)
    return np.concatenate([silence, sample_audio.samples[int(start_s * RATE) : int(end_s * RATE)], silence])


def feed(buffer: InputBuffer, samples: np.ndarray, piece: int = 1600) -> list:
    """Events of `samples` fed in pieces; each turn is committed when it stops, as the session does."""
    events = []
    for start in range(0, samples.size, piece):
        for event in buffer.append(samples[start : start + piece]):
            events.append(event)
            if event.kind == "speech_stopped":
                events.append(buffer.take(event.turn_end_s))
    return events


@pytest.fixture(scope="module")
def vad():
    from whosaid.audio.vad import VoiceActivityDetector

    return VoiceActivityDetector.load()


def test_server_vad_finds_one_turn_with_its_padding_and_tail(vad, sample_audio) -> None:
    # pyannote's sample, 8.3-10.0 s: one phrase.
    samples = speech_then_silence(sample_audio, 8.3, 10.0)
    buffer = InputBuffer(vad, TurnDetection())
    events = feed(buffer, samples)
    assert [getattr(event, "kind", "taken") for event in events] == ["speech_started", "speech_stopped", "taken"]
    started, stopped, (start_s, taken) = events
    assert 0.6 <= started.time_s <= 1.1  # speech from about 1.0 s, minus the 0.3 s prefix
    speech_end_s = stopped.turn_end_s - 0.2
    assert 2.4 <= speech_end_s <= 2.8
    # The silence is heard out 0.5 s after the speech, give or take Silero's own hysteresis.
    assert speech_end_s + 0.5 <= stopped.time_s <= speech_end_s + 0.5 + 0.4
    assert start_s <= started.time_s and taken.size == pytest.approx((stopped.turn_end_s - start_s) * RATE, abs=1)


def test_turns_do_not_depend_on_when_the_turns_before_were_committed(vad, sample_audio) -> None:
    """The session commits a turn a little before or after where the VAD last placed its end
    (where its pause hypothesis ended), as fast as it transcribes: the turns that follow are
    cut at the same times either way. pyannote's sample, 6-20 s: turns with short pauses."""
    samples = speech_then_silence(sample_audio, 6.0, 20.0)

    def turns(commit_shift_s: float) -> list[tuple[str, float]]:
        buffer, events = InputBuffer(vad, TurnDetection()), []
        for start in range(0, samples.size, 800):
            for event in buffer.append(samples[start : start + 800]):
                events.append((event.kind, round(event.time_s, 3)))
                if event.kind == "speech_stopped":
                    buffer.take(event.turn_end_s + commit_shift_s)
        return events

    on_time = turns(0.0)
    assert len(on_time) >= 4
    for shifted in (turns(-0.08), turns(0.08)):
        # The same turns, stopped at the same times; one starting right after the commit starts
        # there (no earlier than the commit, so no later than 0.08 s off).
        assert [kind for kind, _ in shifted] == [kind for kind, _ in on_time]
        for (kind, time_s), (_, on_time_s) in zip(shifted, on_time, strict=True):
            assert time_s == on_time_s if kind == "speech_stopped" else abs(time_s - on_time_s) <= 0.08 + 1e-9


def test_a_pause_the_speech_went_on_after_is_no_longer_paused(vad, sample_audio) -> None:
    """The session finds a turn's speakers at a pause only while the speech is still paused
    there. pyannote's sample, 6-20 s, with a silence long enough that its short pauses end no turn."""
    samples = speech_then_silence(sample_audio, 6.0, 20.0)
    buffer = InputBuffer(vad, TurnDetection(silence_duration_ms=2000))
    pause_end_s, went_on = None, []
    for start in range(0, samples.size, 800):
        buffer.append(samples[start : start + 800])
        if pause_end_s is not None and buffer.last_speech_end_s > pause_end_s:  # speaking again
            went_on.append(buffer.paused_at(pause_end_s, 0.1))
            pause_end_s = None
        if pause_end_s is None:
            pause_end_s = buffer.turn_end_if_pause_s()
            assert pause_end_s is None or buffer.paused_at(pause_end_s, 0.1)
    assert len(went_on) >= 2 and not any(went_on)
    # The recording's last pause lasts: still paused where it began.
    assert pause_end_s is not None and buffer.paused_at(pause_end_s, 0.1)


def test_silence_keeps_only_what_a_turn_would_take_before_its_speech(vad) -> None:
    buffer = InputBuffer(vad, TurnDetection())
    assert feed(buffer, np.zeros(20 * RATE, np.float32)) == []
    assert buffer.duration_s <= LOOKBACK_S + 1.5 + 0.1 + 0.01
    assert buffer.end_s == pytest.approx(20.0)


def test_a_turns_audio_reaches_back_before_its_speech_but_not_into_the_turn_before(vad, sample_audio) -> None:
    """The speech_started time is the speech's start minus the prefix padding, as OpenAI reports
    it; the turn's audio starts up to LOOKBACK_S before the speech, at a longer prefix if the
    client asks for one, and never before the audio committed with the turn before."""
    samples = speech_then_silence(sample_audio, 8.3, 10.0, silence_s=3.0)
    started = feed(InputBuffer(vad, TurnDetection()), samples)[0]
    assert started.kind == "speech_started" and 2.6 <= started.time_s <= 3.1  # speech from about 3.0 s
    assert started.audio_start_s == pytest.approx(started.time_s - (LOOKBACK_S - 0.3))
    started = feed(InputBuffer(vad, TurnDetection(prefix_padding_ms=2500)), samples)[0]
    assert started.audio_start_s == pytest.approx(started.time_s)

    # pyannote's sample, 6-20 s: turns with short pauses, each committed where it stops.
    buffer, committed_s, starts = InputBuffer(vad, TurnDetection()), 0.0, []
    for event in feed(buffer, speech_then_silence(sample_audio, 6.0, 20.0)):
        if isinstance(event, tuple):  # (start_s, samples) taken
            committed_s = event[0] + event[1].size / RATE
        elif event.kind == "speech_started":
            starts.append((committed_s, event.audio_start_s, event.time_s))
    assert len(starts) >= 2
    assert all(committed_s <= audio_start_s <= time_s for committed_s, audio_start_s, time_s in starts)
    assert any(committed_s > 0 and audio_start_s == committed_s for committed_s, audio_start_s, _ in starts)


def test_without_turn_detection_the_buffer_keeps_everything(vad, sample_audio) -> None:
    buffer = InputBuffer(vad, None)
    samples = speech_then_silence(sample_audio, 8.3, 10.0)
    assert feed(buffer, samples) == []
    assert buffer.duration_s == pytest.approx(samples.size / RATE)


def unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float64)
    return vector / np.linalg.norm(vector)


def test_turns_cluster_by_voice_and_a_new_voice_starts_a_speaker() -> None:
    speakers = LiveSpeakers(same_speaker_similarity=0.5)
    a, b = unit([1, 0, 0]), unit([0, 1, 0])
    assert speakers.assign(a).label == "SPEAKER_00"
    assert speakers.assign(b).label == "SPEAKER_01"
    assert speakers.assign(unit([0.9, 0.2, 0.1])).label == "SPEAKER_00"
    assert speakers.assign(None).label == "SPEAKER_00"  # too short to embed: the previous speaker
    assert speakers.assign(unit([0.1, 0.9, 0.3])).label == "SPEAKER_01"
    assert [speaker.label for speaker in speakers.speakers] == ["SPEAKER_00", "SPEAKER_01"]


def test_a_new_speaker_takes_the_name_of_a_matching_known_voice_once() -> None:
    alice = KnownVoice("alice", unit([1, 0, 0]))
    speakers = LiveSpeakers(0.9, voices=[alice], name_threshold=0.5)
    assert speakers.assign(unit([0.95, 0.3, 0])).label == "alice"
    # Not alice's centroid (below 0.9), and alice is taken: a numbered speaker.
    assert speakers.assign(unit([0.6, 0.8, 0])).label == "SPEAKER_00"
    assert speakers.assign(unit([0, 0, 1])).label == "SPEAKER_01"


def test_pcm_is_resampled_as_one_stream_and_odd_bytes_are_refused() -> None:
    stream = Pcm16Stream(24_000)
    t = np.arange(24_000 * 2) / 24_000
    pcm = (0.5 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes()
    out = np.concatenate([stream.feed(pcm[start : start + 4800]) for start in range(0, len(pcm), 4800)])
    assert abs(out.size - 2 * RATE) <= 64  # the resampler's filter holds back a few samples
    assert out.dtype == np.float32 and np.max(np.abs(out)) == pytest.approx(0.5, abs=0.02)
    # No click at the message boundaries: the sine stays smooth from sample to sample.
    assert np.max(np.abs(np.diff(out[100:-100]))) < 0.5 * 2 * np.pi * 440 / RATE * 1.1
    with pytest.raises(InvalidAudioError, match="16-bit"):
        stream.feed(b"\x00\x01\x02")
    assert Pcm16Stream(16_000).feed(np.array([16384], "<i2").tobytes()).tolist() == [0.5]
