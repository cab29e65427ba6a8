"""Audio in: whatever the client sent, decoded exactly once into float32 mono 16 kHz samples
(or, for `multichannel` requests, into one such track per channel).

PyAV (which bundles FFmpeg's libraries) decodes every common container and resamples, frame by
frame, into one store (whosaid.audio.store: in memory, or a temporary file for long recordings);
the rest of the core only ever sees `Audio`, and reads long audio a window at a time.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, Union

import numpy as np

from whosaid.audio.containers import check_complete, wav_declared_duration_s
from whosaid.audio.store import BLOCK_S, Samples, SampleWriter, SpilledSamples, spill_after_samples
from whosaid.config import MAX_CHANNELS, WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import AudioTooLongError, InvalidAudioError, InvalidParametersError

SUPPORTED_FORMATS = "wav, flac, mp3, ogg/opus, m4a/aac, webm"
# A decoded stream shorter than its header's duration by more than this is a truncated file.
TRUNCATION_TOLERANCE_S = 0.2
TRUNCATION_TOLERANCE_FRACTION = 0.02
# Shorter audio holds no word: refused the same way at every sample rate (a 1-sample file used
# to be 200 at 16 kHz and 400 at 8 kHz, where resampling left no sample).
MIN_AUDIO_DURATION_S = 0.1
# Frames quieter than this everywhere mean silence: Whisper would only hallucinate on them.
SILENCE_FRAME_S = 0.025
SILENCE_THRESHOLD_DBFS = -55.0
# A stopped job (client gone, shutdown) is noticed within this many decoded frames (a few seconds
# of audio each 100, a fraction of a second of decoding).
STOP_CHECK_FRAMES = 100
# Where a file declares no duration, decoding starts with room for this much and doubles it.
_FIRST_CAPACITY_S = 60.0
_LIMIT_ADVICE = "the limit of {limit:g} s (MAX_AUDIO_DURATION_S); split it and send the parts"
_NOT_FINITE = "the audio holds NaN or infinite samples"
_BASE64_TEXT = re.compile(rb"^[A-Za-z0-9+/_\-\s]+=*\s*$")


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples in [-1, 1] at `sample_rate_hz` (16 kHz: what Whisper takes).

    A long decoded recording lives in a temporary file (`spilled`); `samples` is then that file
    mapped into memory, for code that needs one array, and `reader` reads it a slice at a time
    without keeping what it read: what every stage of a job uses."""

    samples: np.ndarray  # shape (n_samples,), float32
    sample_rate_hz: int = WHISPER_SAMPLE_RATE_HZ
    spilled: Optional[SpilledSamples] = field(default=None, repr=False, compare=False)
    #: Decoded with `multichannel` from a recording of two or more channels: each channel on its
    #: own, in the file's order (all of the same length); `samples` is then the first channel's.
    #: Empty for mono audio and for audio decoded the usual way (downmixed).
    channels: tuple["Audio", ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_samples(cls, samples: Samples) -> "Audio":
        if isinstance(samples, SpilledSamples):
            return cls(samples.mapped(), spilled=samples)
        return cls(samples)

    @property
    def reader(self) -> Samples:
        """The samples to slice windows from: the array itself, or the spilled file's reader."""
        return self.spilled if self.spilled is not None else self.samples

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate_hz

    def is_silent(self) -> bool:
        """True when no 25 ms frame rises above -55 dBFS (digital silence, faint hiss). Read a
        block at a time: the frames' powers are float64, eight bytes for each sample."""
        frame = max(1, int(SILENCE_FRAME_S * self.sample_rate_hz))
        count = len(self.samples)
        if count == 0:
            return False
        # Whole frames only, or the few samples there are when they make no frame.
        framed_count = (count // frame) * frame if count >= frame else count
        block = frame * max(1, int(BLOCK_S * self.sample_rate_hz) // frame)
        loudest_rms = 0.0
        for start in range(0, framed_count, block):
            piece = self.reader[start : min(start + block, framed_count)]
            framed = piece.reshape(-1, frame if count >= frame else len(piece)).astype(np.float64)
            loudest_rms = max(loudest_rms, float(np.sqrt(np.mean(framed**2, axis=1)).max()))
        loudest_dbfs = 20 * np.log10(max(loudest_rms, 1e-12))
        return loudest_dbfs < SILENCE_THRESHOLD_DBFS


#: What `load_audio` decodes: a request's inputs, or a file on disk (a Path: the CLI's files; a
#: request's inputs never are one, so no request names a file to read).
AudioInput = Union[str, bytes, bytearray, memoryview, dict, list, np.ndarray, Path]


class StopCheck(Protocol):
    """What decoding asks of a job's stop signal (whosaid.runtime.cancellation.StopSignal)."""

    def check(self) -> None:
        """Raise the reason to stop, if there is one."""


def load_audio(
    inputs: AudioInput,
    *,
    sampling_rate_hz: int = WHISPER_SAMPLE_RATE_HZ,
    max_duration_s: Optional[float] = None,
    should_stop: Optional[StopCheck] = None,
    multichannel: bool = False,
) -> Audio:
    """Decode a request's `inputs` into 16 kHz mono float32.

    Accepts base64 text (str or ASCII bytes) of an audio file, the file's raw bytes, a dict
    {"array" | "raw": float samples, "sampling_rate": Hz}, or a bare float array whose rate is
    `sampling_rate_hz`. Audio longer than `max_duration_s` raises AudioTooLongError, from the
    header's declaration or as soon as decoding passes the limit (None: no limit).
    `should_stop` is checked as files decode: a job stopped meanwhile (client gone, shutdown)
    raises its JobStoppedError there. `multichannel`: keep a recording's channels apart
    (`Audio.channels`) instead of downmixing them; more than MAX_CHANNELS is an
    InvalidParametersError. Mono audio decodes the same either way. A Path is a file on disk
    (`load_audio_file`).
    """
    if isinstance(inputs, Path):
        return load_audio_file(
            inputs, max_duration_s=max_duration_s, should_stop=should_stop, multichannel=multichannel
        )
    if isinstance(inputs, str):
        return decode_audio_bytes(
            _decode_base64(inputs.encode("ascii", errors="replace")),
            max_duration_s=max_duration_s,
            should_stop=should_stop,
            multichannel=multichannel,
        )
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
        if _looks_like_base64(data):
            data = _decode_base64(data)
        return decode_audio_bytes(
            data, max_duration_s=max_duration_s, should_stop=should_stop, multichannel=multichannel
        )
    if isinstance(inputs, dict):
        samples = inputs.get("array", inputs.get("raw"))
        if samples is None:
            raise InvalidAudioError(
                "an inputs object must hold the samples under 'array' (or 'raw') and their rate "
                "under 'sampling_rate'"
            )
        rate = inputs.get("sampling_rate", sampling_rate_hz)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 1_000 <= rate <= 384_000:
            raise InvalidAudioError(f"sampling_rate must be a number of Hz in [1000, 384000], not {rate!r}")
        return audio_from_array(samples, int(rate), max_duration_s=max_duration_s, multichannel=multichannel)
    if isinstance(inputs, (list, np.ndarray)):
        return audio_from_array(inputs, sampling_rate_hz, max_duration_s=max_duration_s, multichannel=multichannel)
    if inputs is None:
        raise InvalidAudioError("no audio: send the audio file as base64 text in 'inputs'")
    raise InvalidAudioError(
        f"inputs of type {type(inputs).__name__} is not audio: send base64 text of an audio file, "
        "its raw bytes, or {'array': [...], 'sampling_rate': Hz}"
    )


def load_audio_file(
    path: Union[str, Path],
    *,
    max_duration_s: Optional[float] = None,
    should_stop: Optional[StopCheck] = None,
    multichannel: bool = False,
) -> Audio:
    """Decode an audio file from disk (CLI, benchmarks, tests)."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InvalidAudioError(f"cannot read audio file {str(path)!r}: {error.strerror}") from error
    return decode_audio_bytes(data, max_duration_s=max_duration_s, should_stop=should_stop, multichannel=multichannel)


def _looks_like_base64(data: bytes) -> bool:
    # Audio containers carry binary headers (RIFF sizes, NUL bytes), so bytes made only of
    # base64's alphabet are base64 text: what the endpoint toolkit hands over for JSON bodies.
    return len(data) >= 4 and _BASE64_TEXT.match(data[:4096]) is not None


def _decode_base64(text: bytes) -> bytes:
    stripped = b"".join(text.split())
    if not stripped:
        raise InvalidAudioError("empty input: send the audio file as base64 text in 'inputs'")
    try:
        if b"-" in stripped or b"_" in stripped:
            return base64.urlsafe_b64decode(stripped + b"=" * (-len(stripped) % 4))
        return base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidAudioError(
            f"inputs is not valid base64 ({error}); encode the audio file's bytes with base64"
        ) from error


def decode_audio_bytes(
    data: bytes,
    *,
    max_duration_s: Optional[float] = None,
    should_stop: Optional[StopCheck] = None,
    multichannel: bool = False,
) -> Audio:
    """Decode an audio file's bytes with FFmpeg (through PyAV), downmix and resample to 16 kHz.

    With `max_duration_s`, a header that declares longer audio is refused before decoding, and
    decoding stops as soon as it passes the limit: what a header says is never trusted alone
    (it may lie, or say nothing), and memory follows what has been decoded, not the file.
    `multichannel`: each channel resampled into a store of its own (`Audio.channels`); the limit
    counts the recording's duration, not channels x duration.
    """
    import av

    if not data:
        raise InvalidAudioError("empty input: the audio file has no bytes")
    if max_duration_s is not None:
        # Before the completeness checks: a WAV that declares hours over seconds of data is too
        # long by its own account, whatever is missing.
        _refuse_declared(wav_declared_duration_s(data), max_duration_s)
    check_complete(data)
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.error.FFmpegError, ValueError, OSError) as error:
        raise InvalidAudioError(
            f"could not decode the audio ({_reason(error)}): it is not in a common format, or it "
            f"is corrupt or truncated; send a complete file in a common format ({SUPPORTED_FORMATS})"
        ) from error
    with container:
        streams = [stream for stream in container.streams if stream.type == "audio"]
        if not streams:
            raise InvalidAudioError("the file holds no audio stream")
        stream = streams[0]
        channel_count = _channel_count(stream) if multichannel else 1
        declared_s = _declared_duration_s(container, stream)
        if max_duration_s is not None:
            _refuse_declared(declared_s, max_duration_s)
        writers = [
            SampleWriter(_initial_capacity(declared_s, max_duration_s), spill_after_samples())
            for _ in range(channel_count)
        ]
        try:
            decoded_s = _decode_into(writers, container, stream, max_duration_s, should_stop)
        except BaseException:
            for writer in writers:
                writer.free()  # now, not when the caller drops the traceback that refers to it
            raise
    finite = all(writer.finite for writer in writers)
    tracks = [writer.finish() for writer in writers]
    samples = tracks[0]
    if decoded_s > 0:
        _check_long_enough(decoded_s)
    if len(samples) == 0:
        raise InvalidAudioError("no audio samples could be decoded: the file is empty or truncated")
    if declared_s is not None and declared_s - decoded_s > _tolerance_s(declared_s):
        raise InvalidAudioError(
            f"the audio file is truncated: its header declares {declared_s:.2f} s but only "
            f"{decoded_s:.2f} s could be decoded; send the complete file"
        )
    if not finite:
        raise InvalidAudioError(_NOT_FINITE)
    if len(tracks) == 1:
        return Audio.from_samples(samples)
    channels = tuple(Audio.from_samples(track) for track in tracks)
    return Audio(channels[0].samples, spilled=channels[0].spilled, channels=channels)


def _channel_count(stream: Any) -> int:
    """The stream's channels, refused past MAX_CHANNELS before anything is decoded."""
    count = int(stream.codec_context.channels or stream.layout.nb_channels or 1)
    if count > MAX_CHANNELS:
        raise InvalidParametersError(_too_many_channels(count))
    return count


def _too_many_channels(count: int) -> str:
    return (
        f"multichannel=true takes at most {MAX_CHANNELS} channels, and the audio holds {count}: "
        f"send the channels in groups of at most {MAX_CHANNELS}, or multichannel=false to downmix them"
    )


def _decode_into(
    writers: list[SampleWriter],
    container: Any,
    stream: Any,
    max_duration_s: Optional[float],
    should_stop: Optional[StopCheck] = None,
) -> float:
    """Decode and resample frame by frame into `writers`: one writer takes the downmix; several
    take a channel each. The seconds decoded (at the file's own rate). Raises AudioTooLongError on
    the frame that passes `max_duration_s`, and `should_stop`'s error every STOP_CHECK_FRAMES
    frames once it is set."""
    import av

    if len(writers) > 1:
        resampler: Any = _ChannelResampler(len(writers))
    else:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=WHISPER_SAMPLE_RATE_HZ)

    def write(out: Any) -> None:
        planes = out if isinstance(out, list) else [out.to_ndarray().reshape(-1)]
        for writer, plane in zip(writers, planes, strict=True):
            writer.append(plane)

    decoded = _DecodedLength()
    try:
        for number, frame in enumerate(container.decode(stream)):
            if should_stop is not None and number % STOP_CHECK_FRAMES == 0:
                should_stop.check()
            decoded.add(frame.samples, frame.sample_rate)
            if max_duration_s is not None and decoded.seconds > max_duration_s:
                raise AudioTooLongError(
                    f"the audio lasts more than {max_duration_s:g} s (decoding stopped there), "
                    f"longer than {_LIMIT_ADVICE.format(limit=max_duration_s)}"
                )
            for out in resampler.resample(frame):
                write(out)
        for out in resampler.resample(None):
            write(out)
    except AudioTooLongError:
        raise  # a ValueError too, but not a corrupt file
    except (av.error.FFmpegError, ValueError) as error:
        raise InvalidAudioError(
            f"the audio is corrupt or truncated: decoding stopped after {decoded.seconds:.2f} s "
            f"({_reason(error)})"
        ) from error
    return decoded.seconds


class _ChannelResampler:
    """Each channel of a frame resampled to 16 kHz on its own: a list of arrays per output. Files
    with more than two channels often declare no layout (a plain PCM WAV), which FFmpeg's
    resampler cannot convert; each channel as a mono frame needs none."""

    def __init__(self, count: int) -> None:
        import av

        self.count = count
        self._resamplers = [
            av.AudioResampler(format="flt", layout="mono", rate=WHISPER_SAMPLE_RATE_HZ) for _ in range(count)
        ]

    def resample(self, frame: Any) -> list[list[np.ndarray]]:
        import av

        if frame is None:
            outs = [resampler.resample(None) for resampler in self._resamplers]
        else:
            outs = []
            for resampler, plane in zip(self._resamplers, _planes(frame, self.count), strict=True):
                mono = av.AudioFrame.from_ndarray(np.ascontiguousarray(plane[None, :]), format="flt", layout="mono")
                mono.sample_rate = frame.sample_rate
                outs.append(resampler.resample(mono))
        pieces = [np.concatenate([out.to_ndarray().reshape(-1) for out in channel]) for channel in outs if channel]
        return [pieces] if len(pieces) == self.count else []


def _planes(frame: Any, count: int) -> np.ndarray:
    """A frame's samples as float32, channels x samples, in [-1, 1]."""
    array = frame.to_ndarray()
    if not frame.format.is_planar:
        array = array.reshape(-1, count).T
    if array.dtype == np.uint8:
        return ((array.astype(np.float32) - 128.0) / 128.0).astype(np.float32)
    if np.issubdtype(array.dtype, np.integer):
        return (array.astype(np.float32) / float(-np.iinfo(array.dtype).min)).astype(np.float32)
    return np.ascontiguousarray(array, dtype=np.float32)


class _DecodedLength:
    """Seconds decoded, counted in whole samples at the stream's rate: a sum of per-frame
    fractions drifts, and 30 s of frames must compare equal to a 30 s limit."""

    def __init__(self) -> None:
        self._earlier_s = 0.0  # at rates the stream had before (a rate change mid-stream)
        self._samples = 0
        self._rate_hz = 0

    def add(self, samples: int, rate_hz: int) -> None:
        if not rate_hz:
            return
        if rate_hz != self._rate_hz:
            self._earlier_s = self.seconds
            self._samples, self._rate_hz = 0, rate_hz
        self._samples += samples

    @property
    def seconds(self) -> float:
        return self._earlier_s + (self._samples / self._rate_hz if self._rate_hz else 0.0)


def _initial_capacity(declared_s: Optional[float], max_duration_s: Optional[float]) -> int:
    """Room for the declared duration when it is within the limit (an honest file fills it in
    one allocation; the pages a lying header reserves are never written, so never resident),
    else for a minute."""
    expected_s = declared_s if declared_s is not None else _FIRST_CAPACITY_S
    if max_duration_s is not None:
        expected_s = min(expected_s, max_duration_s)
    return int((expected_s + _tolerance_s(expected_s)) * WHISPER_SAMPLE_RATE_HZ)


def _refuse_declared(declared_s: Optional[float], max_duration_s: float) -> None:
    # A margin as for truncation: some "declarations" are FFmpeg's estimates from the bitrate.
    if declared_s is not None and declared_s - max_duration_s > _tolerance_s(declared_s):
        raise AudioTooLongError(
            f"the audio file's header declares {declared_s:.1f} s, longer than "
            f"{_LIMIT_ADVICE.format(limit=max_duration_s)}"
        )


def _tolerance_s(duration_s: float) -> float:
    return max(TRUNCATION_TOLERANCE_S, TRUNCATION_TOLERANCE_FRACTION * duration_s)


def audio_from_array(
    samples: Any, sample_rate_hz: int, *, max_duration_s: Optional[float] = None, multichannel: bool = False
) -> Audio:
    """Raw PCM floats (mono, or channels x time) at `sample_rate_hz` -> 16 kHz mono (with
    `multichannel`, 16 kHz mono per channel)."""
    try:
        array = np.asarray(samples, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise InvalidAudioError(f"the audio array must hold numbers: {error}") from error
    if multichannel and array.ndim == 2 and min(array.shape) > 1:
        # channels x time, as torchaudio and pyannote lay them out (or time x channels)
        tracks = array if array.shape[0] <= array.shape[1] else array.T
        if len(tracks) > MAX_CHANNELS:
            raise InvalidParametersError(_too_many_channels(len(tracks)))
        channels = tuple(audio_from_array(track, sample_rate_hz, max_duration_s=max_duration_s) for track in tracks)
        return Audio(channels[0].samples, channels=channels)
    if array.ndim == 2:
        # channels x time, as torchaudio and pyannote lay them out
        array = array.mean(axis=0) if array.shape[0] <= array.shape[1] else array.mean(axis=1)
    if array.ndim != 1:
        raise InvalidAudioError(f"the audio array must be 1-D (or channels x time), not {array.ndim}-D")
    if array.size == 0:
        raise InvalidAudioError("empty input: the audio array has no samples")
    if not np.all(np.isfinite(array)):
        raise InvalidAudioError(_NOT_FINITE)
    peak = float(np.max(np.abs(array)))
    if peak > 1.0:
        # Refused, not normalised: a peak far above 1 means integer PCM sent as floats or garbage,
        # and guessing the scale would hide the client's bug.
        raise InvalidAudioError(
            f"float samples must lie in [-1, 1], but the array peaks at {peak:.3g}; scale 16-bit "
            "PCM by 1/32768 (or send the audio file itself)"
        )
    duration_s = array.size / sample_rate_hz
    _check_long_enough(duration_s)
    if max_duration_s is not None and duration_s > max_duration_s:
        raise AudioTooLongError(
            f"the audio lasts {duration_s:.1f} s, longer than {_LIMIT_ADVICE.format(limit=max_duration_s)}"
        )
    if sample_rate_hz != WHISPER_SAMPLE_RATE_HZ:
        array = _resample(array, sample_rate_hz)
    return _checked(np.ascontiguousarray(array, dtype=np.float32))


def _resample(samples: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    import av

    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = sample_rate_hz
    resampler = av.AudioResampler(format="flt", layout="mono", rate=WHISPER_SAMPLE_RATE_HZ)
    pieces = [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
    pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def _check_long_enough(duration_s: float) -> None:
    if duration_s < MIN_AUDIO_DURATION_S:
        raise InvalidAudioError(
            f"the audio lasts {duration_s:.4f} s, too short to hold speech; send at least "
            f"{MIN_AUDIO_DURATION_S:g} s"
        )


def _checked(samples: np.ndarray) -> Audio:
    if not np.all(np.isfinite(samples)):
        raise InvalidAudioError(_NOT_FINITE)
    return Audio(samples=samples)


def _declared_duration_s(container: Any, stream: Any) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    # Matroska/WebM declare the duration in the Segment's Info, not per stream. (Elsewhere the
    # container's duration may be FFmpeg's estimate from the bitrate: not a declaration.)
    if "matroska" in container.format.name and container.duration is not None:
        return container.duration / 1_000_000
    return None


def _reason(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text).strip()
