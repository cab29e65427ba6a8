"""A speculative-decoding assistant made from the main model itself, and when to use one.

`build_assistant` makes a decoder-only `WhisperForCausalLM` the way distil-whisper initialises
its students: the main model's token and position embeddings, final layer norm, and a few of its
decoder layers (by default the first and the last). It has no encoder: transformers' speculative
decoding hands it the main model's encoder output, so the audio is encoded once. `tune_assistant`
then distils the main model into it on the user's own audio: the main model's greedy output
(timestamps included, as the engine decodes) is the pseudo-label, the loss is distil-whisper's
(cross-entropy on the labels plus the KL divergence to the main model's distribution at
temperature 2). Drafts are only ever proposals, verified by the main model, so the transcript
never changes; a better assistant only drafts more tokens that are kept.

`assists` is the rule behind `assisted: "auto"`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from whosaid.errors import InvalidParametersError

#: Written beside the weights: how the assistant was made (source model, layers, tuning).
ASSISTANT_INFO_FILE = "whosaid_assistant.json"
# distil-whisper's distillation loss: 0.8 x cross-entropy + 1.0 x KL at temperature 2 (the KL
# scaled by T^2 so that its gradients keep their size).
CROSS_ENTROPY_WEIGHT = 0.8
KL_WEIGHT = 1.0
KL_TEMPERATURE = 2.0
# The main model's distribution is kept for its most likely tokens only, computed once per window:
# running the main decoder at every step cost more than the step itself (whisper-base, 2 cores).
KL_TOP_TOKENS = 64


@dataclass(frozen=True)
class TuningOptions:
    steps: int = 200
    learning_rate: float = 1e-4
    batch_size: int = 1  # windows per step: each window's forward and backward pass is slow on CPU
    warmup_steps: int = 10
    seed: int = 0


@dataclass(frozen=True)
class TuningReport:
    windows: int  # speech windows the pseudo-labels were made from
    label_tokens: int  # tokens the assistant learnt to draft
    steps: int
    first_loss: float
    last_loss: float  # mean of the last 10 steps
    agreement_before: float  # see token_agreement, on the tuning windows
    agreement_after: float
    seconds: float


# ---------------------------------------------------------------------------------- building


def parse_decoder_layers(spec: str, num_layers: int) -> list[int]:
    """'first,last' or indices ('0,3,5'; negative count from the end) -> sorted unique indices."""
    indices = []
    for word in (part.strip().lower() for part in spec.split(",")):
        if not word:
            continue
        if word == "first":
            index = 0
        elif word == "last":
            index = num_layers - 1
        else:
            try:
                index = int(word)
            except ValueError:
                raise InvalidParametersError(
                    f"--decoder-layers takes 'first', 'last' or layer numbers separated by commas, not {word!r}"
                ) from None
            index = index + num_layers if index < 0 else index
        if not 0 <= index < num_layers:
            raise InvalidParametersError(
                f"decoder layer {word} does not exist: "
                f"the main model has {num_layers} decoder layers (0-{num_layers - 1})"
            )
        indices.append(index)
    if not indices:
        raise InvalidParametersError("--decoder-layers names no layer: e.g. 'first,last'")
    return sorted(set(indices))


def build_assistant(main_model: Any, decoder_layers: Sequence[int]) -> Any:
    """A decoder-only `WhisperForCausalLM` holding copies of `main_model`'s embeddings, final
    layer norm and the decoder layers at `decoder_layers` (in order). Its config keeps the main
    model's encoder shape (width, encoder layers, mel bins): that is how `load_assistant`
    recognises an assistant that reads the main model's encoder output."""
    import torch
    from transformers import WhisperConfig, WhisperForCausalLM

    config = WhisperConfig.from_dict(main_model.config.to_dict())
    config.decoder_layers = len(decoder_layers)
    config.architectures = ["WhisperForCausalLM"]
    assistant = WhisperForCausalLM(config).to(main_model.dtype)
    teacher = main_model.model.decoder
    student = assistant.model.decoder
    with torch.no_grad():
        student.embed_tokens.load_state_dict(teacher.embed_tokens.state_dict())
        student.embed_positions.load_state_dict(teacher.embed_positions.state_dict())
        student.layer_norm.load_state_dict(teacher.layer_norm.state_dict())
        for student_layer, index in zip(student.layers, decoder_layers, strict=True):
            student_layer.load_state_dict(teacher.layers[index].state_dict())
    assistant.tie_weights()  # proj_out is the token embedding, as in Whisper
    assistant.generation_config = type(main_model.generation_config).from_dict(main_model.generation_config.to_dict())
    return assistant.eval()


def save_assistant(assistant: Any, processor: Any, output_dir: Path, info: dict[str, Any]) -> None:
    """Weights, config, generation config and the tokenizer/feature-extractor files: a directory
    that ASSISTANT_MODEL can name."""
    output_dir.mkdir(parents=True, exist_ok=True)
    assistant.save_pretrained(output_dir)
    processor.save_pretrained(output_dir)
    (output_dir / ASSISTANT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")


# ---------------------------------------------------------------------------------- tuning data


@dataclass(frozen=True)
class PseudoLabels:
    """The main model's encoder output and greedy token sequences (prompt, text, timestamps,
    end-of-text) for each speech window of the tuning audio."""

    encoder_states: Any  # (windows, frames, d_model)
    sequences: list[list[int]]
    prompt_lengths: list[int]  # tokens of each sequence that are given, never drafted
    # The main model's next-token log-probabilities at KL_TEMPERATURE, KL_TOP_TOKENS most likely
    # tokens, at each drafted position: (ids, log-probabilities), each (drafted tokens, top).
    main_top: list[tuple[Any, Any]]


def pseudo_labels(
    main_model: Any, processor: Any, clips: Sequence[np.ndarray], *, max_window_s: float = 30.0
) -> PseudoLabels:
    """Cut each clip (16 kHz float32) into the engine's VAD speech windows and let the main
    model decode them greedily with timestamps: what the assistant will be asked to draft."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    from whosaid.audio.vad import VoiceActivityDetector
    from whosaid.config import WHISPER_SAMPLE_RATE_HZ

    vad = VoiceActivityDetector.load()
    windows = [window.samples(clip) for clip in clips for window in vad.windows(clip, max_window_s)]
    if not windows:
        raise InvalidParametersError("the tuning audio holds no speech: give recordings of people talking")
    states, sequences, prompt_lengths, main_top = [], [], [], []
    eos = main_model.generation_config.eos_token_id
    for window in windows:
        features = processor.feature_extractor(
            [window], sampling_rate=WHISPER_SAMPLE_RATE_HZ, return_tensors="pt"
        ).input_features.to(main_model.device, main_model.dtype)
        with torch.inference_mode():
            encoded = main_model.get_encoder()(features).last_hidden_state
            encoder_outputs = BaseModelOutput(last_hidden_state=encoded)
            language = {}
            if getattr(main_model.generation_config, "is_multilingual", False):
                # generate cannot detect the language from encoder outputs: detected here, as the engine does.
                (token_id,) = main_model.detect_language(encoder_outputs=encoder_outputs).tolist()
                code = processor.tokenizer.convert_ids_to_tokens(token_id).strip("<|>")
                language = {"language": code, "task": "transcribe"}
            output = main_model.generate(
                features,
                encoder_outputs=encoder_outputs,
                return_timestamps=True,
                return_dict_in_generate=True,
                force_unique_generate_call=True,
                **language,
            )
        sequence = output.sequences[0].tolist()
        sequence = sequence[: sequence.index(eos) + 1] if eos in sequence else sequence
        prompt_length = _prompt_length(sequence, main_model.generation_config)
        if len(sequence) - prompt_length < 2:  # nothing said in this window
            continue
        with torch.inference_mode():
            logits = _main_logits(main_model, torch.tensor([sequence], device=main_model.device), encoded)
            drafted_logits = logits[0, prompt_length - 1 : len(sequence) - 1].float() / KL_TEMPERATURE
            top = torch.log_softmax(drafted_logits, dim=-1).topk(KL_TOP_TOKENS, dim=-1)
        states.append(encoded[0])
        sequences.append(sequence)
        prompt_lengths.append(prompt_length)
        main_top.append((top.indices.cpu(), top.values.cpu()))
    if not sequences:
        raise InvalidParametersError("the main model heard no words in the tuning audio: give recordings of speech")
    return PseudoLabels(torch.stack(states), sequences, prompt_lengths, main_top)


def _prompt_length(sequence: Sequence[int], generation_config: Any) -> int:
    """<|startoftranscript|>, then the language and task tokens when the model has them."""
    special = {generation_config.decoder_start_token_id}
    special |= set((getattr(generation_config, "lang_to_id", None) or {}).values())
    special |= set((getattr(generation_config, "task_to_id", None) or {}).values())
    length = 0
    while length < len(sequence) and sequence[length] in special:
        length += 1
    return length


def _batch(labels: PseudoLabels, rows: Sequence[int], pad_token_id: int) -> tuple[Any, Any, Any]:
    """Token ids (padded after the end: causal attention never reads the padding), the encoder
    states of `rows`, and a mask of the positions whose next token the assistant drafts (after
    the prompt, up to the end-of-text)."""
    import torch

    longest = max(len(labels.sequences[row]) for row in rows)
    input_ids = torch.full((len(rows), longest), pad_token_id, dtype=torch.long)
    drafted = torch.zeros((len(rows), longest - 1), dtype=torch.bool)
    for position, row in enumerate(rows):
        sequence = labels.sequences[row]
        input_ids[position, : len(sequence)] = torch.tensor(sequence)
        drafted[position, labels.prompt_lengths[row] - 1 : len(sequence) - 1] = True
    states = labels.encoder_states[list(rows)]
    return input_ids.to(states.device), states, drafted.to(states.device)


def _main_logits(main_model: Any, input_ids: Any, states: Any) -> Any:
    hidden = main_model.model.decoder(
        input_ids=input_ids, encoder_hidden_states=states, use_cache=False
    ).last_hidden_state
    return main_model.proj_out(hidden)


def token_agreement(assistant: Any, labels: PseudoLabels, *, batch_size: int = 4) -> float:
    """Along the main model's own transcripts, the share of drafted positions where the
    assistant's most likely next token is the main model's: the chance that a drafted token is
    kept, before the logits processors (suppressed tokens, timestamp rules) that both share."""
    import torch

    matches = total = 0
    with torch.inference_mode():
        for first in range(0, len(labels.sequences), batch_size):
            rows = list(range(first, min(first + batch_size, len(labels.sequences))))
            input_ids, states, drafted = _batch(labels, rows, pad_token_id=0)
            logits = assistant(input_ids=input_ids, encoder_outputs=(states,), use_cache=False).logits[:, :-1]
            main_choice = torch.cat([labels.main_top[row][0][:, 0] for row in rows]).to(logits.device)
            matches += int((logits[drafted].argmax(-1) == main_choice).sum())
            total += int(drafted.sum())
    return matches / total


def tune_assistant(assistant: Any, labels: PseudoLabels, options: TuningOptions = TuningOptions()) -> TuningReport:
    """Distil the main model into `assistant` on `labels`, in place. Only the decoder layers
    and layer norm learn: the embeddings are the main model's own (tied to the output
    projection), and keeping them fixed keeps every step cheap (whisper-base: 6 M parameters
    instead of 33 M)."""
    import torch
    import torch.nn.functional as F

    started = time.perf_counter()
    agreement_before = token_agreement(assistant, labels)
    generator = torch.Generator().manual_seed(options.seed)
    decoder = assistant.model.decoder
    for parameter in assistant.parameters():
        parameter.requires_grad_(False)
    trainable = [parameter for module in (decoder.layers, decoder.layer_norm) for parameter in module.parameters()]
    for parameter in trainable:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(trainable, lr=options.learning_rate, weight_decay=0.0)
    warmup = max(1, options.warmup_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * max(0.0, 1 - step / max(options.steps, 1))
    )
    count = len(labels.sequences)
    order: list[int] = []
    losses: list[float] = []
    assistant.train()
    for _ in range(options.steps):
        if len(order) < options.batch_size:
            order += torch.randperm(count, generator=generator).tolist()
        rows, order = order[: min(options.batch_size, count)], order[min(options.batch_size, count) :]
        input_ids, states, drafted = _batch(labels, rows, pad_token_id=0)
        student = (
            assistant(input_ids=input_ids, encoder_outputs=(states,), use_cache=False).logits[:, :-1][drafted].float()
        )
        # Rows of `drafted` are in batch order, as are the main model's kept distributions.
        top_ids = torch.cat([labels.main_top[row][0] for row in rows]).to(student.device)
        main_log_probs = torch.cat([labels.main_top[row][1] for row in rows]).to(student.device)
        # The target is the main model's own most likely token at each position of its
        # transcript, before the logits processors, as token_agreement scores it.
        cross_entropy = F.cross_entropy(student, top_ids[:, 0])
        student_log_probs = F.log_softmax(student / KL_TEMPERATURE, dim=-1).gather(-1, top_ids)
        kl = (main_log_probs.exp() * (main_log_probs - student_log_probs)).sum(-1).mean() * KL_TEMPERATURE**2
        loss = CROSS_ENTROPY_WEIGHT * cross_entropy + KL_WEIGHT * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    assistant.eval()
    for parameter in assistant.parameters():
        parameter.requires_grad_(False)
    return TuningReport(
        windows=count,
        label_tokens=sum(
            len(sequence) - length
            for sequence, length in zip(labels.sequences, labels.prompt_lengths, strict=True)
        ),
        steps=options.steps,
        first_loss=losses[0] if losses else float("nan"),
        last_loss=float(np.mean(losses[-10:])) if losses else float("nan"),
        agreement_before=agreement_before,
        agreement_after=token_agreement(assistant, labels),
        seconds=time.perf_counter() - started,
    )


# ---------------------------------------------------------------------------------- the command


def make_assistant(
    model_dir: str,
    output_dir: Path,
    *,
    decoder_layers: str = "first,last",
    tuning_clips: Sequence[np.ndarray] = (),
    tuning: TuningOptions = TuningOptions(),
    device: str = "cpu",
) -> dict[str, Any]:
    """Build (and with `tuning_clips`, tune on `device`) an assistant for the Whisper model in
    `model_dir` and save it to `output_dir`, in float32. Returns what was written to its info file."""
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    main_model = WhisperForConditionalGeneration.from_pretrained(model_dir).to(device).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    layers = parse_decoder_layers(decoder_layers, main_model.config.decoder_layers)
    assistant = build_assistant(main_model, layers)
    info: dict[str, Any] = {
        "main_model": str(model_dir),
        "decoder_layers_of_main_model": layers,
        "main_model_decoder_layers": main_model.config.decoder_layers,
        "tuning": None,
    }
    if tuning_clips:
        labels = pseudo_labels(main_model, processor, tuning_clips)
        report = tune_assistant(assistant, labels, tuning)
        info["tuning"] = {**asdict(tuning), **asdict(report)}
    save_assistant(assistant, processor, output_dir, info)
    return info


# ---------------------------------------------------------------------------------- when to assist

#: assisted="auto" assists audio up to this many seconds, by device type, unless
#: ASSISTED_MAX_DURATION_S says otherwise. CPU: speculative decoding lost at every length
#: measured (benchmarks/assisted.py with a make-assistant assistant, untuned and tuned), so 'auto'
#: never assists there. CUDA: one Whisper window, where published figures for whisper-large-v3
#: with distil-large-v3 show the gain turn into a loss. The numbers: benchmarks/README.md,
#: "Speculative decoding on CPU".
DEFAULT_ASSISTED_MAX_DURATION_S = {"cpu": 0.0, "cuda": 30.0}


def assisted_max_duration_s(settings: Any, device_type: str) -> float:
    """The longest audio 'auto' may assist: ASSISTED_MAX_DURATION_S, or the default for the
    device the models run on (the crossover belongs to the pair of models and the device)."""
    limit = settings.assisted_max_duration_s
    if limit is None:
        limit = DEFAULT_ASSISTED_MAX_DURATION_S.get(device_type, 0.0)
    return float(limit)


def assists(assistant: Any, config: Any, duration_s: float, max_duration_s: float) -> bool:
    """The request's `assisted` resolved: true and false as sent; 'auto' assists when an
    assistant is loaded, the request did not ask for batches of several windows (an explicit
    `batch_size` above 1), and the audio lasts at most `max_duration_s`, the pair's crossover duration.
    Speculative decoding runs one window at a time, so the longer the audio, the more windows
    batched decoding decodes together for the price of one."""
    if config.assisted != "auto":
        return bool(config.assisted)
    if assistant is None or ("batch_size" in config.model_fields_set and config.batch_size > 1):
        return False
    return duration_s <= max_duration_s
