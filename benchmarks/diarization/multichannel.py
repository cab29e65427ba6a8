"""Stereo calls: per-channel transcription (multichannel=true) against the downmixed
transcription with diarization of the same call, in time and in who-said-what.

    .venv/bin/python -m benchmarks.diarization.multichannel [--model models/whisper-base] [--threads 2] [--repeats 3]
        [--no-levels]

The call is built from real speech with human transcripts (../shared/data/asr, read in place,
never copied): two parties, one per channel, taking turns that overlap (each turn starts
OVERLAP_S before the other party's ends), with each party's voice on the other channel
attenuated by CROSSTALK_ATTENUATION_DB and delayed by CROSSTALK_DELAY_S (a headset's echo).
Both runs use the Whisper model in --model, float32 on the CPU, greedy, in English; the downmix
run adds the built-in diarizer. After one warm-up of each, the runs go in ABBA order (per channel,
downmix, downmix, per channel, ...) --repeats times each, so that a load that comes and goes on a
shared machine falls on both alike; the ratio is the median per-channel time over the median
downmix time. Also reported: the cpWER and WER of the per-channel transcript, and (unless
--no-levels) the crosstalk levels: how much quieter each kept word's channel is than the other,
and the words dropped as crosstalk.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from benchmarks.common.environment import load_average
from benchmarks.common.scoring import SHARED_DATA

ASR_DIR = SHARED_DATA / "asr"
RATE = 16_000
#: The other party's voice on a channel: this much quieter, this much later (a headset's echo).
CROSSTALK_ATTENUATION_DB = 26.0
CROSSTALK_DELAY_S = 0.06
#: Each turn starts this long before the previous one (of the other party) ends.
OVERLAP_S = 1.5
#: (party, clip) in the order the turns come: party 0 a LibriSpeech reader, party 1 LJSpeech's.
CALL_TURNS = (
    (0, "librispeech_2412-153948-0000"),
    (1, "ljspeech_LJ001-0003"),
)
LONG_CALL_TURNS = (
    (0, "librispeech_2412-153948-0000"),
    (1, "ljspeech_LJ001-0003"),
    (0, "mfa_acoustic_corpus"),
    (1, "ljspeech_LJ001-0004"),
    (0, "mfa_cold_corpus"),
    (1, "ljspeech_LJ001-0005"),
)


@dataclass(frozen=True)
class Call:
    """A two-channel call (channels x samples, 16 kHz float32) and what each party said, with
    when each turn starts and ends."""

    samples: np.ndarray
    references: tuple[str, str]
    #: What was said, turn by turn in the order the turns start.
    spoken: str
    turns: tuple[tuple[int, float, float], ...]

    @property
    def duration_s(self) -> float:
        return self.samples.shape[1] / RATE

    def wav_bytes(self) -> bytes:
        """The call as a 16-bit stereo WAV file."""
        import io
        import wave

        pcm = np.clip(np.round(self.samples.T * 32767), -32768, 32767).astype("<i2")
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as file:
            file.setnchannels(self.samples.shape[0])
            file.setsampwidth(2)
            file.setframerate(RATE)
            file.writeframes(pcm.tobytes())
        return buffer.getvalue()


def available(turns: Sequence[tuple[int, str]] = CALL_TURNS, directory: Path = ASR_DIR) -> bool:
    return all((directory / f"{name}.wav").is_file() for _, name in turns)


def build_call(
    turns: Sequence[tuple[int, str]] = CALL_TURNS,
    *,
    directory: Path = ASR_DIR,
    overlap_s: float = OVERLAP_S,
    attenuation_db: float = CROSSTALK_ATTENUATION_DB,
    delay_s: float = CROSSTALK_DELAY_S,
) -> Call:
    """The call of `turns`, starting 0.5 s in and ending 0.5 s after the last word."""
    from whosaid.audio.loading import load_audio_file

    clips = [(party, load_audio_file(directory / f"{name}.wav").samples, name) for party, name in turns]
    starts, position_s = [], 0.5
    for _, samples, _ in clips:
        starts.append(position_s)
        position_s += len(samples) / RATE - overlap_s
    total = int((position_s + overlap_s + delay_s + 0.5) * RATE)
    own = np.zeros((2, total), np.float32)
    references: list[list[str]] = [[], []]
    spans = []
    for (party, samples, name), start_s in zip(clips, starts, strict=True):
        start = int(start_s * RATE)
        own[party, start : start + len(samples)] += samples
        references[party].append((directory / f"{name}.txt").read_text().strip())
        spans.append((party, start_s, start_s + len(samples) / RATE))
    delay = int(delay_s * RATE)
    gain = 10 ** (-attenuation_db / 20)
    mixed = own.copy()
    mixed[0, delay:] += gain * own[1, : total - delay]
    mixed[1, delay:] += gain * own[0, : total - delay]
    peak = float(np.abs(mixed).max())
    if peak > 0.99:
        mixed *= 0.99 / peak
    spoken = " ".join((directory / f"{name}.txt").read_text().strip() for _, _, name in clips)
    return Call(mixed, (" ".join(references[0]), " ".join(references[1])), spoken, tuple(spans))


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    from benchmarks.asr.wer_real import errors

    return errors(reference, hypothesis, "en")


def channel_text(transcript, channel: int) -> str:
    return "".join(chunk.text for chunk in transcript.chunks if chunk.channel == channel)


def scores(call: Call, transcript) -> dict[str, float]:
    """cpWER (each party's reference against its channel's words) and WER (what was said, turn by
    turn, against the whole text), both pooled over the parties' words."""
    cp = [
        word_errors(reference, channel_text(transcript, channel)) for channel, reference in enumerate(call.references)
    ]
    whole = word_errors(call.spoken, transcript.text)
    return {
        "cpwer": sum(e for e, _ in cp) / sum(w for _, w in cp),
        "wer": whole[0] / whole[1],
        "words": sum(w for _, w in cp),
    }


def abba(names: Sequence[str], repeats: int) -> list[str]:
    """The runs in ABBA order, `repeats` of each: A B B A A B B A ... for two names."""
    order: list[str] = []
    for repeat in range(repeats):
        order += list(names) if repeat % 2 == 0 else list(reversed(names))
    return order


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/whisper-base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--short", action="store_true", help="the two-turn call instead of the six-turn one")
    parser.add_argument("--no-levels", action="store_true", help="time and scores only, no crosstalk levels")
    args = parser.parse_args(argv)
    if not available(LONG_CALL_TURNS):
        raise SystemExit(f"the clips are not in {ASR_DIR}")
    import torch

    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    torch.set_num_threads(args.threads)
    call = build_call(CALL_TURNS if args.short else LONG_CALL_TURNS)
    data = call.wav_bytes()
    asr = Engine.from_settings(ModelSettings(asr_model=args.model, device="cpu"))
    diarized = Engine.from_settings(ModelSettings(asr_model=args.model, diarization_model="builtin", device="cpu"))
    per_channel, downmix = "per-channel (multichannel=true)", "downmix + diarization"
    runs = {
        per_channel: (asr, {"multichannel": True, "language": "en"}),
        downmix: (diarized, {"language": "en"}),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = load_average()
    results = {name: engine.run(data, parameters) for name, (engine, parameters) in runs.items()}  # warm-up
    for name in abba(list(runs), args.repeats):
        engine, parameters = runs[name]
        started = time.perf_counter()
        results[name] = engine.run(data, parameters)
        times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"call: {call.duration_s:.1f} s, {len(call.turns)} turns, {args.threads} threads, {args.model}")
    print(f"load average (1, 5, 15 min): {load_before} before the runs, {load_average()} after")
    for name, seconds in medians.items():
        print(f"{name}: {seconds:.2f} s (runs {', '.join(f'{v:.2f}' for v in times[name])})")
    print(f"ratio per-channel / downmix+diarization: {medians[per_channel] / medians[downmix]:.2f}")
    print("per-channel scores:", scores(call, results[per_channel]))
    if not args.no_levels:
        print_levels(asr, data)
    return 0


def print_levels(asr, data: bytes) -> None:
    """Crosstalk levels: every word each channel's recogniser found, how much louder the other
    channel is over it, and whether the crosstalk rule dropped it."""
    from whosaid.audio.loading import load_audio
    from whosaid.config import InferenceConfig
    from whosaid.speakers.channels import crosstalk_words, loudest_other

    audio = load_audio(data, multichannel=True)
    config = InferenceConfig(return_timestamps="word", language="en")
    words = [
        [word for chunk in asr.recognizer.transcribe(track, config).chunks for word in chunk.words]
        for track in audio.channels
    ]
    gone = crosstalk_words(words, audio.channels)
    for channel, channel_words in enumerate(words):
        levels = [loudest_other(audio.channels, channel, w.start_s, w.end_s)[1] for w in channel_words]
        kept = [level for position, level in enumerate(levels) if position not in gone[channel]]
        dropped = [level for position, level in enumerate(levels) if position in gone[channel]]
        print(
            f"channel {channel}: {len(levels)} words; kept {len(kept)} (the other channel at most "
            f"{max(kept, default=float('nan')):+.1f} dB), dropped {len(dropped)} as crosstalk (the other "
            f"channel {min(dropped, default=float('nan')):+.1f} to {max(dropped, default=float('nan')):+.1f} dB)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
