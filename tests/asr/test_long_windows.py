"""Nothing in the decoding path leaves Whisper's decoder positions: a window that loops until
the end of the context (the longest prompt or none; batched, assisted, beam fallback, word
alignment, streaming) is decoded again, then cut at its last good segment with a warning that
names it, and the other windows keep their text; an unexpected failure names its window.

The models are random-weight Whisper models whose next token depends on the position only
(tests/support/looping_whisper.py), with 64 decoder positions instead of 448 so that running
to the limit is quick; the code under test reads the limit from the model's config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engines import config
from tests.support.looping_whisper import build_looping_whisper
from tests.support.server import threaded_server
from tests.support.tiny_whisper import build_random_whisper
from whosaid.audio.loading import Audio, audio_from_array
from whosaid.errors import InferenceError
from whosaid.recognition.greedy import FallbackOptions, complete_segments
from whosaid.recognition.segments import DecodedSegment
from whosaid.recognition.word_timing import DecodedWindow

# Slow (decodings run until they fill the model's positions): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

POSITIONS = 64
#: Windows of at most 10 s, one batch each: pyannote's sample makes four windows, its first
#: 17.5 s two (6.6-7.4 s and 7.4-17.3 s).
SMALL_WINDOWS = {"language": "en", "chunk_length_s": 10, "batch_size": 1}
#: Far longer than the half of the context a prompt may take (31 tokens here).
LONGEST_PROMPT = " ".join(["Diane from New Jersey and Sheila from Chicago"] * 12)
PROMPTS = {"no_prompt": {}, "longest_prompt": {"initial_prompt": LONGEST_PROMPT, "hotwords": "Yankee, Texas"}}


@pytest.fixture(scope="module")
def tokens(converted_model) -> dict[str, int]:
    from transformers import WhisperTokenizer

    tokenizer = WhisperTokenizer.from_pretrained(converted_model("whisper-base"))
    (la,) = tokenizer.encode(" la", add_special_tokens=False)
    (hello,) = tokenizer.encode(" Hello", add_special_tokens=False)
    (world,) = tokenizer.encode(" world", add_special_tokens=False)
    timestamp_begin = tokenizer.convert_tokens_to_ids("<|notimestamps|>") + 1
    return {
        "la": la,
        "hello": hello,
        "world": world,
        "0.00": timestamp_begin,
        "1.00": timestamp_begin + 50,
        "eot": tokenizer.eos_token_id,
    }


@pytest.fixture(scope="module")
def models(converted_model, tokens, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = converted_model("whisper-base")
    root = tmp_path_factory.mktemp("looping-whisper")
    # Every window loops from its first token (after the timestamp that must open it).
    looping = build_looping_whisper(
        root / "looping", base, loop_token=tokens["la"], loop_from_position=2, max_target_positions=POSITIONS
    )
    # After <|startoftranscript|> <|en|> <|transcribe|> (positions 0-2): "<|0.00|> Hello world
    # <|1.00|>" and the end. A window with a prompt starts past position 6: it loops.
    script = {2: tokens["0.00"], 3: tokens["hello"], 4: tokens["world"], 5: tokens["1.00"], 6: tokens["eot"]}
    loops_after_prompt = build_looping_whisper(
        root / "loops-after-prompt",
        base,
        loop_token=tokens["la"],
        loop_from_position=7,
        script=script,
        max_target_positions=POSITIONS,
    )
    # "<|0.00|> Hello world <|1.00|>", then a segment that never ends: "<|1.00|> la la la ...".
    segment_then_loop = build_looping_whisper(
        root / "segment-then-loop",
        base,
        loop_token=tokens["la"],
        loop_from_position=7,
        script={**{p: script[p] for p in (2, 3, 4, 5)}, 6: tokens["1.00"]},
        max_target_positions=POSITIONS,
    )
    # A distil-whisper style assistant: the main model's encoder, one decoder layer of its own.
    assistant = build_random_whisper(
        root / "assistant", base, seed=1, decoder_layers=1, max_length=POSITIONS,
        max_target_positions=POSITIONS, encoder_of=looping,
    )
    return {
        "looping": looping,
        "loops_after_prompt": loops_after_prompt,
        "segment_then_loop": segment_then_loop,
        "assistant": assistant,
    }


@pytest.fixture(scope="module")
def clip(sample_audio: Audio) -> Audio:
    return audio_from_array(sample_audio.samples[: int(17.5 * 16_000)], 16_000)


@pytest.fixture(scope="module")
def looping_engine(make_engine, models):
    return make_engine(models["looping"], models["assistant"])


def windows_of(engine, audio: Audio) -> list[tuple[float, float]]:
    return [(window.start_s, window.end_s) for window in engine.recognizer.vad.windows(audio.samples, 10)]


def left_out(span: tuple[float, float], after_s: float | None = None) -> str:
    cut = "its text was left out" if after_s is None else f"its text after {after_s:.1f} s was left out"
    return (
        f"window {span[0]:.1f}-{span[1]:.1f} s: Whisper repeated itself until its {POSITIONS}-token limit, "
        f"with beam search too; {cut}"
    )


# ------------------------------------------------------------------------- the decoders' room


@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
def test_a_looping_window_leaves_room_for_scoring_and_alignment(looping_engine, sample_audio, tokens, prompt) -> None:
    """The lean loop, speculative decoding and beam search stop a looping window where scoring
    (prompt, tokens, <|endoftext|>) and word alignment (start sequence, <|notimestamps|>, text,
    <|endoftext|>) still fit in the positions; the prompt keeps at most half of them."""
    import torch

    recognizer = looping_engine.recognizer
    decoder = recognizer.decoder
    options = recognizer.decoding_options(config(language="en", **prompt))
    previous = recognizer.previous_tokens(options, first_window=True)
    prompt_tokens = decoder.prompt("en", "transcribe", previous)
    start = decoder.prompt("en", "transcribe")
    assert len(prompt_tokens) - len(start) - 1 <= POSITIONS // 2 - 1
    features = recognizer.features([sample_audio.samples[: 8 * 16_000]])
    with torch.inference_mode():
        states = recognizer.encode(features)
        (greedy,) = decoder.decode(states, prompt_tokens)
        (assisted,) = recognizer.generate_tokens(
            features, states, "en", "transcribe", previous, assistant_model=recognizer.assistant
        )
        (beams,) = recognizer.generate_tokens(features, states, "en", "transcribe", previous, num_beams=5)
        scored = decoder.score(states, prompt_tokens, assisted)
    room = min(POSITIONS - len(prompt_tokens) - 1, POSITIONS - len(start) - 2)
    assert len(greedy.tokens) == len(assisted) == len(beams) == room
    assert list(greedy.tokens) == assisted  # speculative decoding stays lossless at the limit
    assert greedy.reached_limit and scored.reached_limit
    assert greedy.tokens[1:] == (tokens["la"],) * (room - 1)


def test_a_prompt_keeps_half_of_a_short_max_length(tiny_whisper, make_engine) -> None:
    """A checkpoint whose max_length is below its positions (24 here; 225 in many fine-tunes of
    448-position models) keeps half of max_length for the prompt, so the window keeps room."""
    recognizer = make_engine(tiny_whisper("short-max-length", seed=3)).recognizer
    options = recognizer.decoding_options(config(language="en", **PROMPTS["longest_prompt"]))
    previous = recognizer.previous_tokens(options, first_window=True)
    prompt = recognizer.decoder.prompt("en", "transcribe", previous)
    assert prompt[1:-3] == previous[-(24 // 2 - 1) :]
    assert recognizer.decoder.max_new_tokens(prompt) >= 24 - len(prompt) > 1


# ------------------------------------------------------------------------- every path, end to end


# The greedy loop runs to the limit (its repetition check would start after it), or gives up
# early on a repeating window: both fall back to beam search, which loops to the limit too.
GIVES_UP_EARLY = FallbackOptions(repetition_check_from=16, repetition_check_every=8)
PATHS = {
    "batched": (False, {}, FallbackOptions()),
    "batched_longest_prompt": (False, PROMPTS["longest_prompt"], FallbackOptions()),
    "batched_gives_up_early": (False, {}, GIVES_UP_EARLY),
    "assisted": (True, {}, FallbackOptions()),
    "assisted_longest_prompt": (True, PROMPTS["longest_prompt"], FallbackOptions()),
}


@pytest.mark.parametrize(("assisted", "prompt", "fallback"), PATHS.values(), ids=PATHS.keys())
def test_a_window_looping_after_beam_search_is_left_out_with_a_warning(
    looping_engine, clip, assisted, prompt, fallback
) -> None:
    """Word times on (the alignment pass): every window loops, greedy and with beams; each is
    cut at its last good segment (it has none) and the response says so, window by window."""
    from tests.support.fallback import with_fallback

    engine = with_fallback(looping_engine, fallback)
    transcript = engine.transcribe(clip, config(return_timestamps="word", assisted=assisted, **SMALL_WINDOWS, **prompt))
    assert transcript.text == "" and transcript.chunks == ()
    assert transcript.warnings == tuple(left_out(span) for span in windows_of(engine, clip))
    assert len(transcript.warnings) == 2
    assert transcript.to_dict()["warnings"] == list(transcript.warnings)


def test_a_diarized_request_times_words_without_leaving_the_positions(make_engine, models, clip) -> None:
    """A diarizer makes the engine time every word: the reported failure, answered."""
    engine = make_engine(models["looping"], diarization="builtin")
    transcript = engine.run(clip.samples, SMALL_WINDOWS)
    assert transcript.diarized and transcript.text == ""
    assert transcript.warnings == tuple(left_out(span) for span in windows_of(engine, clip))


def test_the_other_windows_keep_their_text(make_engine, models, sample_audio) -> None:
    """Only the prompted first window loops; the others say "Hello world" and keep it."""
    engine = make_engine(models["loops_after_prompt"])
    spans = windows_of(engine, sample_audio)
    assert len(spans) == 4
    for timestamps in ("segment", "word"):
        transcript = engine.transcribe(
            sample_audio, config(initial_prompt=LONGEST_PROMPT, return_timestamps=timestamps, **SMALL_WINDOWS)
        )
        assert [chunk.text for chunk in transcript.chunks] == [" Hello world"] * 3
        for chunk, (start_s, end_s) in zip(transcript.chunks, spans[1:], strict=True):
            # Word times are rounded to 0.01 s.
            assert start_s - 0.005 <= chunk.start_s <= chunk.end_s <= end_s + 0.005
        assert transcript.warnings == (left_out(spans[0]),)
        unprompted = engine.transcribe(sample_audio, config(return_timestamps=timestamps, **SMALL_WINDOWS))
        assert unprompted.text == " ".join(["Hello world"] * 4) and unprompted.warnings == ()


def test_a_looping_window_keeps_its_whole_segments(make_engine, models, clip) -> None:
    """The segment before the loop is kept; the warning says from when the text was left out."""
    engine = make_engine(models["segment_then_loop"])
    spans = windows_of(engine, clip)
    for timestamps in ("segment", "word"):
        transcript = engine.transcribe(clip, config(return_timestamps=timestamps, **SMALL_WINDOWS))
        assert [chunk.text for chunk in transcript.chunks] == [" Hello world"] * 2
        assert transcript.warnings == tuple(left_out(span, min(span[0] + 1.0, span[1])) for span in spans)


def test_a_stream_ends_with_the_warnings_and_no_error(make_engine, models, clip) -> None:
    """stream=true with a diarizer (word times): text deltas, then the done event with the
    warnings, where the failure used to end the stream in an error event."""
    from openai import OpenAI

    from tests.support.audio_files import encode
    from whosaid.server.app import create_app
    from whosaid.server.settings import ServerSettings

    engine = make_engine(models["looping"], diarization="builtin")
    settings = ServerSettings(api_key=None)
    with threaded_server(create_app(lambda: engine, settings)) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        stream = client.audio.transcriptions.create(
            model="whisper-1",
            file=("clip.flac", encode(clip.samples, 16_000, "flac")),
            stream=True,
            extra_body=SMALL_WINDOWS,
        )
        events = list(stream)
    assert [event.type for event in events] == ["transcript.text.done"]
    done = events[-1].model_dump()
    assert done["text"] == ""
    assert done["warnings"] == [left_out(span) for span in windows_of(engine, clip)]


def test_a_trimmed_recognizer_stops_a_loop_at_its_cap_per_second_of_audio(make_engine, models, sample_audio) -> None:
    """Live captions' recognizer (`trimmed`) caps each window at TRIMMED_TOKENS_PER_S tokens per
    second of its audio: a short window that loops stops there, greedy and with beams, instead
    of running to the model's positions twice; the warning names the cap."""
    import math

    from whosaid.engine import Engine
    from whosaid.recognition.recognizer import TRIMMED_TOKENS_BASE, TRIMMED_TOKENS_PER_S

    engine = make_engine(models["looping"])
    short = audio_from_array(sample_audio.samples[int(6.0 * 16_000) : int(8.0 * 16_000)], 16_000)
    ((start_s, end_s),) = windows_of(engine, short)
    cap = math.ceil((end_s - start_s) * TRIMMED_TOKENS_PER_S) + TRIMMED_TOKENS_BASE
    assert cap < POSITIONS - 8  # well below the model's positions
    decoder_passes = []
    hook = engine.recognizer.model.get_decoder().register_forward_pre_hook(lambda *_: decoder_passes.append(1))
    try:
        transcript = Engine(engine.recognizer.trimmed(3.0), None).transcribe(short, config(language="en"))
    finally:
        hook.remove()
    assert transcript.text == ""
    assert transcript.warnings == (
        f"window {start_s:.1f}-{end_s:.1f} s: Whisper repeated itself until its {cap}-token limit, "
        "with beam search too; its text was left out",
    )
    # Beam search's passes (transformers' decoder module; the greedy loop runs its own steps):
    # one per token, the first with the prompt.
    assert len(decoder_passes) == cap
    assert engine.transcribe(short, config(language="en")).warnings == (left_out((start_s, end_s)),)
    # Drafts (live hypotheses before a pause): the failing window is left out, no beam search.
    decoder_passes.clear()
    hook = engine.recognizer.model.get_decoder().register_forward_pre_hook(lambda *_: decoder_passes.append(1))
    try:
        draft = Engine(engine.recognizer.trimmed(3.0, retry_with_beams=False), None).transcribe(
            short, config(language="en")
        )
    finally:
        hook.remove()
    assert draft.text == "" and draft.chunks == () and draft.warnings == () and decoder_passes == []
    import torch

    recognizer = engine.recognizer
    with torch.inference_mode():
        states = recognizer.encode(recognizer.features([short.samples]))
        (greedy,) = recognizer.decoder.decode(states, recognizer.decoder.prompt("en", "transcribe"), max_new_tokens=cap)
        (unbounded,) = recognizer.decoder.decode(states, recognizer.decoder.prompt("en", "transcribe"))
    assert len(greedy.tokens) == cap and len(unbounded.tokens) > cap


# ------------------------------------------------------------------------- the rules themselves


def test_a_looping_window_is_cut_after_its_last_good_segment(tokens) -> None:
    begin = tokens["0.00"]
    hello, world, la = tokens["hello"], tokens["world"], tokens["la"]

    def is_repeating(window: list[int]) -> bool:
        return window.count(la) > 3

    def stamp(second: float) -> int:
        return begin + round(second / 0.02)

    segment_1 = [stamp(0), hello, world, stamp(1)]
    segment_2 = [stamp(1), la, la, stamp(2)]
    segment_3 = [stamp(2), la, la, la, stamp(3)]
    # The unfinished tail goes; whole segments stay while the text is not a loop.
    assert complete_segments(segment_1 + segment_2 + [stamp(2), la, la], begin, is_repeating) == segment_1 + segment_2
    assert complete_segments(segment_1 + segment_2 + segment_3, begin, is_repeating) == segment_1 + segment_2
    # A closing timestamp that Whisper does not repeat closes the segment too.
    assert complete_segments([stamp(0), hello, stamp(1), world, stamp(2), la], begin, is_repeating) == [
        stamp(0), hello, stamp(1), world, stamp(2)
    ]
    # Nothing whole, or nothing that is not a loop: nothing.
    assert complete_segments([stamp(0), la, la, la, la], begin, is_repeating) == []
    assert complete_segments([stamp(0), la, la, la, la, stamp(1)], begin, is_repeating) == []
    assert complete_segments([], begin, is_repeating) == []


def test_word_alignment_leaves_out_text_past_the_positions(looping_engine, sample_audio, tokens) -> None:
    """Given more text than the positions hold (the recognizer never gives it), the alignment
    pass times the text that fits and leaves the rest out, rather than failing."""
    import torch

    recognizer = looping_engine.recognizer
    start = recognizer.decoder.prompt("en", "transcribe")
    samples = 8 * 16_000
    with torch.inference_mode():
        states = recognizer.encode(recognizer.features([sample_audio.samples[:samples]]))
    text = (tokens["hello"],) * 40 + (tokens["world"],) * 40
    segments = [DecodedSegment(text[:50], 0.0, 4.0), DecodedSegment(text[50:], 4.0, 8.0)]
    window = DecodedWindow(tuple(start), tuple(segments), offset_s=0.0, samples=samples, language="en")
    (timed,) = recognizer.word_timer.window_words(states, [window])
    room = POSITIONS - len(start) - 2
    assert [segment.tokens for segment in timed] == [text[:50], text[50:room]]
    words = [word for segment in timed for word in segment.words]
    assert "".join(word.text for word in words) == " Hello" * 40 + " world" * (room - 40)
    assert all(0.0 <= word.start_s <= word.end_s <= 8.0 for word in words)


def test_a_failure_in_a_window_names_its_time_span(make_engine, models, sample_audio) -> None:
    """Something the recognizer does not expect fails the request; the error says in which
    window, so that the audio there can be looked at (the encoder fails on the third window,
    a real failure of the model's own code, not a stand-in for ours)."""
    engine = make_engine(models["loops_after_prompt"])
    encoder = engine.recognizer.model.get_encoder()
    calls = []

    def fail_on_the_third_window(module, inputs) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the encoder gave up")

    hook = encoder.register_forward_pre_hook(fail_on_the_third_window)
    try:
        with pytest.raises(InferenceError) as raised:
            engine.transcribe(sample_audio, config(**SMALL_WINDOWS))
    finally:
        hook.remove()
    start_s, end_s = windows_of(engine, sample_audio)[2]
    assert str(raised.value) == (
        f"speech recognition failed in window {start_s:.1f}-{end_s:.1f} s: RuntimeError: the encoder gave up"
    )
