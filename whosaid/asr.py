"""Whisper speech recognition: model loading, the batched path (transformers pipeline, chunks
decoded in batches) and the assisted path (speculative decoding at batch size 1)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from whosaid.audio import Audio
from whosaid.config import WHISPER_SAMPLE_RATE_HZ, WHISPER_WINDOW_S, InferenceConfig, ModelSettings
from whosaid.errors import InvalidParametersError, ModelLoadError
from whosaid.results import Chunk

logger = logging.getLogger(__name__)

ASSISTED = "assisted"
BATCHED = "batched"
# The batched path searches with 5 beams, as the transformers ASR pipeline (the seed) and
# openai/whisper do; greedy decoding of whisper-base loops on pyannote's sample (WER 0.53 vs
# 0.30). Speculative decoding is greedy by nature: it equals greedy decoding, token for token.
BATCHED_NUM_BEAMS = 5


@dataclass(frozen=True)
class AsrOutput:
    chunks: tuple[Chunk, ...]
    language: Optional[str]
    decoding: str  # ASSISTED or BATCHED


def _load_kwargs(settings: ModelSettings) -> dict[str, Any]:
    return {
        "token": settings.token(),
        "dtype": settings.resolved_dtype(),
        "attn_implementation": settings.resolved_attn_implementation(),
        "low_cpu_mem_usage": True,
    }


def _candidate_whisper_class() -> type:
    """A full Whisper model used as an assistant must draft candidates with plain greedy
    `GenerationMixin.generate`. Whisper's own `generate` re-runs its timestamp and prompt
    machinery inside the candidate generator, which breaks timestamped output (FINDINGS.md);
    the main model still verifies every token, so the result stays exactly greedy."""
    from transformers import GenerationMixin, WhisperForConditionalGeneration

    class CandidateWhisper(WhisperForConditionalGeneration):
        def generate(self, *args: Any, **kwargs: Any) -> Any:
            return GenerationMixin.generate(self, *args, **kwargs)

    return CandidateWhisper


def load_assistant(name: str, main_model: Any, settings: ModelSettings) -> Any:
    """Load the speculative-decoding assistant.

    distil-whisper checkpoints keep the teacher's encoder, so their decoder can read the main
    model's encoder output: same width, layer count and mel bins load as a decoder-only
    `WhisperForCausalLM` (the encoder runs once). Any other Whisper with the same vocabulary is
    used whole, encoder included.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, WhisperForConditionalGeneration

    try:
        config = AutoConfig.from_pretrained(name, token=settings.token())
    except Exception as error:  # noqa: BLE001 - hub and file errors come in many types
        raise ModelLoadError(f"cannot load the assistant model {name!r}: {error}") from error
    main_config = main_model.config
    if config.model_type != "whisper":
        raise ModelLoadError(
            f"the assistant model {name!r} is a {config.model_type!r} model; speculative decoding "
            "needs a Whisper model (e.g. distil-whisper/distil-large-v3 for whisper-large-v3)"
        )
    if config.vocab_size != main_config.vocab_size:
        raise ModelLoadError(
            f"the assistant model {name!r} has a vocabulary of {config.vocab_size} tokens but the "
            f"main model has {main_config.vocab_size}: speculative decoding needs the same "
            "tokenizer (an English-only model cannot assist a multilingual one)"
        )
    shares_encoder = all(
        getattr(config, field) == getattr(main_config, field)
        for field in ("d_model", "encoder_layers", "num_mel_bins")
    )
    try:
        if shares_encoder:
            assistant = AutoModelForCausalLM.from_pretrained(name, **_load_kwargs(settings))
        else:
            assistant = WhisperForConditionalGeneration.from_pretrained(name, **_load_kwargs(settings))
            assistant.__class__ = _candidate_whisper_class()
    except Exception as error:  # noqa: BLE001
        raise ModelLoadError(f"cannot load the assistant model {name!r}: {error}") from error
    return assistant.to(settings.resolved_device()).eval()


class SpeechRecognizer:
    """A loaded Whisper model (and optional assistant), ready to transcribe `Audio`."""

    def __init__(self, model: Any, processor: Any, assistant: Any = None) -> None:
        from transformers import pipeline

        self.model = model
        self.processor = processor
        self.assistant = assistant
        tokenizer = processor.tokenizer
        if tokenizer.pad_token is None:
            # Batching pads with the end-of-text token, as Whisper's own tokenizers do.
            tokenizer.pad_token = tokenizer.eos_token
        self._pipeline = pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=tokenizer,
            feature_extractor=processor.feature_extractor,
            device=model.device,
        )
        generation_config = model.generation_config
        self.is_multilingual = bool(getattr(generation_config, "is_multilingual", False)) and bool(
            getattr(generation_config, "lang_to_id", None)
        )
        self.languages: dict[str, int] = dict(getattr(generation_config, "lang_to_id", None) or {})

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> "SpeechRecognizer":
        from transformers import AutoProcessor, WhisperForConditionalGeneration

        name = settings.asr_model
        try:
            processor = AutoProcessor.from_pretrained(name, token=settings.token())
            model = WhisperForConditionalGeneration.from_pretrained(name, **_load_kwargs(settings))
        except Exception as error:  # noqa: BLE001
            raise ModelLoadError(
                f"cannot load the ASR model {name!r}: {error}. ASR_MODEL must name a Whisper "
                "model on the Hub (e.g. openai/whisper-large-v3) or a local directory"
            ) from error
        model = model.to(settings.resolved_device()).eval()
        assistant = None
        if settings.assistant_model:
            assistant = load_assistant(settings.assistant_model, model, settings)
        return cls(model, processor, assistant)

    @property
    def has_assistant(self) -> bool:
        return self.assistant is not None

    def uses_assistant(self, config: InferenceConfig, duration_s: float) -> bool:
        """'auto' assists when an assistant is loaded and the audio fits in one chunk: there
        speculative decoding wins; on longer audio batching the chunks wins."""
        if config.assisted == "auto":
            return self.has_assistant and duration_s <= config.chunk_length_s
        return bool(config.assisted)

    def transcribe(self, audio: Audio, config: InferenceConfig) -> AsrOutput:
        language = self._resolve_language(config)
        if self.is_multilingual and language is None:
            language = self.detect_language(audio)
        generate_kwargs = self._generate_kwargs(config, language)
        if self.uses_assistant(config, audio.duration_s):
            chunks = self._transcribe_generate(audio, generate_kwargs, assistant=self.assistant)
            decoding = ASSISTED
        else:
            chunks = self._transcribe_batched(audio, config, generate_kwargs)
            decoding = BATCHED
        return AsrOutput(chunks=chunks, language=language or self._default_language(), decoding=decoding)

    def _default_language(self) -> Optional[str]:
        return None if self.is_multilingual else "en"

    def _resolve_language(self, config: InferenceConfig) -> Optional[str]:
        from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

        if not self.is_multilingual:
            if config.language not in (None, "en", "english"):
                raise InvalidParametersError(
                    f"this model only understands English; language={config.language!r} needs a "
                    "multilingual Whisper model"
                )
            if config.task == "translate":
                raise InvalidParametersError(
                    "task='translate' needs a multilingual Whisper model; this one is English-only"
                )
            return None
        if config.language is None:
            return None
        code = TO_LANGUAGE_CODE.get(config.language, config.language)
        if code not in LANGUAGES or f"<|{code}|>" not in self.languages:
            raise InvalidParametersError(
                f"unknown language {config.language!r}: send a Whisper language code such as "
                "'en', 'fr', 'de' or its English name, or leave it out to detect the language"
            )
        return code

    def detect_language(self, audio: Audio) -> str:
        """Detect the language once, on the first window, and keep it for every chunk: per-chunk
        detection makes Whisper switch languages mid-recording."""
        import torch

        window = audio.samples[: int(WHISPER_WINDOW_S * WHISPER_SAMPLE_RATE_HZ)]
        features, _ = self._features(window)
        with torch.inference_mode():
            token_ids = self.model.detect_language(input_features=features)
        token = self.processor.tokenizer.convert_ids_to_tokens(int(token_ids[0]))
        return token.strip("<|>")

    def _generate_kwargs(self, config: InferenceConfig, language: Optional[str]) -> dict[str, Any]:
        if not self.is_multilingual:
            return {}
        return {"task": config.task, "language": language}

    def _features(self, samples: np.ndarray) -> tuple[Any, Any]:
        """Log-mel features and the attention mask marking real audio. Up to 30 s the features
        are padded to one window (as the pipeline does); longer audio keeps its full length for
        sequential long-form decoding. The mask tells `generate` where the audio ends, so
        timestamps stay inside it."""
        long_form = len(samples) > int(WHISPER_WINDOW_S * WHISPER_SAMPLE_RATE_HZ)
        inputs = self.processor.feature_extractor(
            samples,
            sampling_rate=WHISPER_SAMPLE_RATE_HZ,
            return_tensors="pt",
            return_attention_mask=True,
            **({"truncation": False, "padding": "longest"} if long_form else {}),
        )
        features = inputs.input_features.to(self.model.device, self.model.dtype)
        return features, inputs.attention_mask.to(self.model.device)

    def _transcribe_batched(
        self, audio: Audio, config: InferenceConfig, generate_kwargs: dict[str, Any]
    ) -> tuple[Chunk, ...]:
        output = self._pipeline(
            {"raw": audio.samples, "sampling_rate": WHISPER_SAMPLE_RATE_HZ},
            chunk_length_s=config.chunk_length_s,
            batch_size=config.effective_batch_size,
            return_timestamps=True,
            generate_kwargs=dict(generate_kwargs, num_beams=BATCHED_NUM_BEAMS),
        )
        spans = [(chunk["timestamp"][0], chunk["timestamp"][1], chunk["text"]) for chunk in output["chunks"]]
        return clean_chunks(spans, audio.duration_s)

    def _transcribe_generate(
        self, audio: Audio, generate_kwargs: dict[str, Any], *, assistant: Any = None
    ) -> tuple[Chunk, ...]:
        """Whisper's own `generate` with timestamps: one window, or sequential long-form decoding
        for longer audio. Greedy; with an assistant, speculative decoding gives the same tokens."""
        import torch

        features, attention_mask = self._features(audio.samples)
        kwargs: dict[str, Any] = dict(
            generate_kwargs, attention_mask=attention_mask, return_timestamps=True, return_segments=True
        )
        if assistant is not None:
            kwargs["assistant_model"] = assistant
        with torch.inference_mode():
            output = self.model.generate(features, **kwargs)
        tokenizer = self.processor.tokenizer
        spans = [
            (float(segment["start"]), float(segment["end"]), tokenizer.decode(segment["tokens"], skip_special_tokens=True))
            for segment in output["segments"][0]
        ]
        return clean_chunks(spans, audio.duration_s)


def clean_chunks(
    spans: list[tuple[Optional[float], Optional[float], str]], duration_s: float
) -> tuple[Chunk, ...]:
    """Whisper's timestamps, made safe for speaker alignment: a missing start follows the previous
    chunk, a missing final end is the end of the audio, times stay within the audio and never go
    backwards. Text is kept as decoded, empty chunks dropped."""
    chunks: list[Chunk] = []
    previous_end = 0.0
    for start, end, text in spans:
        if not text.strip():
            continue
        start_s = previous_end if start is None else float(start)
        end_s = duration_s if end is None else float(end)
        start_s = min(max(start_s, chunks[-1].start_s if chunks else 0.0), duration_s)
        end_s = min(max(end_s, start_s), duration_s)
        chunks.append(Chunk(start_s=start_s, end_s=end_s, text=text))
        previous_end = end_s
    return tuple(chunks)
