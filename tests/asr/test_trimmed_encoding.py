"""Live captions encode a turn's audio and a few seconds after it instead of Whisper's 30 s
(`SpeechRecognizer.trimmed`, `encode_frames`): the same modules as transformers' encoder, the
features cut to whole seconds, the same models shared."""

from __future__ import annotations

import pytest

from tests.support.engines import config, cut
from whosaid.recognition.encoding import encode_frames


@pytest.fixture(scope="module")
def recognizer(converted_model, make_engine):
    return make_engine(converted_model("whisper-base")).recognizer


def test_over_30_s_of_frames_it_is_the_encoders_own_forward_pass(recognizer, sample_audio) -> None:
    import torch

    features = recognizer.features([sample_audio.samples[: 5 * 16_000]])
    encoder = recognizer.model.get_encoder()
    with torch.inference_mode():
        expected = encoder(features).last_hidden_state
        torch.testing.assert_close(encode_frames(encoder, features), expected, rtol=0, atol=1e-5)
        short = encode_frames(encoder, features[..., :800])
    assert short.shape == (1, 400, expected.shape[-1])
    with pytest.raises(ValueError, match="odd"):
        encode_frames(encoder, features[..., :801])


def test_a_trimmed_recognizer_shares_the_models_and_cuts_features_to_whole_seconds(recognizer, sample_audio) -> None:
    from whosaid.audio.vad import SpeechWindow
    from whosaid.recognition.recognizer import TrackWindow

    trimmed = recognizer.trimmed(3.0)
    assert trimmed.model is recognizer.model and trimmed.decoder is recognizer.decoder
    assert recognizer.encoder_margin_s is None and trimmed.encoder_margin_s == 3.0
    # A turn's loop is too short for the compression ratio: a phrase said thrice fails the checks.
    assert recognizer.fallback.loop_phrase_words == 0 and trimmed.fallback.loop_phrase_words == 12
    assert trimmed.fallback.num_beams == recognizer.fallback.num_beams
    audio = cut(sample_audio, 6.0, 14.2)  # 8.2 s: 8.2 + 3 s, rounded up to 12 s of frames
    window = TrackWindow(0, SpeechWindow(0.0, audio.duration_s))
    features, lengths = trimmed._features_of([audio], [window])
    assert features.shape[-1] == 1200 and lengths == [len(audio.samples)]
    assert recognizer._features_of([audio], [window])[0].shape[-1] == 3000
    long = cut(sample_audio, 0.0, 28.0)
    assert trimmed._features_of([long], [TrackWindow(0, SpeechWindow(0.0, 28.0))])[0].shape[-1] == 3000


def test_a_trimmed_recognizer_hears_the_sentence_with_its_word_times(recognizer, sample_audio) -> None:
    from whosaid.engine import Engine

    audio = cut(sample_audio, 6.0, 14.2)
    transcript = Engine(recognizer.trimmed(3.0), None).transcribe(
        audio, config(language="en", return_timestamps="word")
    )
    assert "this is diane in new jersey" in transcript.text.lower()
    words = [word for chunk in transcript.chunks for word in chunk.words]
    assert all(0 <= word.start_s <= word.end_s <= audio.duration_s for word in words)
    assert [word.start_s for word in words] == sorted(word.start_s for word in words)


def test_a_draft_stops_at_its_next_token_once_its_job_is_stopped(recognizer, sample_audio) -> None:
    """A live draft is stopped when its turn pauses: the lean loop checks the job's stop signal
    at every token, not only between window batches (this audio is one batch)."""
    from whosaid.engine import Engine
    from whosaid.errors import SupersededError
    from whosaid.runtime.cancellation import StopSignal

    class StopAfter(StopSignal):
        def __init__(self, checks: int) -> None:
            super().__init__()
            self.allowed, self.checks = checks, 0

        def check(self) -> None:
            self.checks += 1
            if self.checks > self.allowed:
                self.cancel(SupersededError("a newer hypothesis replaces this draft"))
            super().check()

    audio = cut(sample_audio, 6.0, 14.2)
    drafts = Engine(recognizer.trimmed(3.0, retry_with_beams=False), None)
    whole = StopAfter(10**6)
    assert "diane in new jersey" in drafts.transcribe(audio, config(language="en"), should_stop=whole).text.lower()
    assert whole.checks > 20  # a batch, then every token of "... this is Diane in New Jersey ..."
    stopped = StopAfter(8)
    with pytest.raises(SupersededError, match="replaces this draft"):
        drafts.transcribe(audio, config(language="en"), should_stop=stopped)
    assert stopped.checks == 9
