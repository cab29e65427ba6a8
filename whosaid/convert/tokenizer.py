"""Tokenizer and generation config: Whisper's special tokens found by name and checked against the
vocabulary and the weights, the generation_config.json transformers needs, the tokenizer files."""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whosaid.convert.errors import ConversionError
from whosaid.convert.weights import WhisperDims

logger = logging.getLogger(__name__)

TIMESTAMP_TOKEN_COUNT = 1501  # <|0.00|> ... <|30.00|> in 0.02 s steps, after <|notimestamps|>
# openai/whisper's default max_initial_timestamp of 1.0 s, in 0.02 s timestamp tokens.
MAX_INITIAL_TIMESTAMP_INDEX = 50


@dataclass(frozen=True)
class WhisperTokenIds:
    """Special token ids, looked up by name in tokenizer.json: English-only vocabularies number
    them one lower than multilingual ones."""

    end_of_text: int
    start_of_transcript: int
    translate: int
    transcribe: int
    start_of_prev: int
    no_timestamps: int
    language_ids: dict[str, int]  # "<|en|>" -> id


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConversionError(f"cannot read {path} ({e}); fetch the checkpoint again") from e


def read_tokenizer_json(path: Path) -> dict[str, Any]:
    data = load_json(path)
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or "vocab" not in model:
        raise ConversionError(f"{path} is not a Whisper (byte-level BPE) tokenizer.json; pass the checkpoint's own")
    return data


def read_vocabulary(path: Path) -> list[str]:
    """CTranslate2's vocabulary: vocabulary.json (a list) or vocabulary.txt (one token a line,
    split on "\\n" only, as CTranslate2 reads it)."""
    if path.suffix == ".json":
        tokens = load_json(path)
        if not isinstance(tokens, list):
            raise ConversionError(f"{path} is not a JSON list of tokens; pass the checkpoint's own vocabulary")
        return tokens
    lines = path.read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def whisper_token_ids(
    tokenizer_json: dict[str, Any], vocabulary: list[str], dims: WhisperDims
) -> WhisperTokenIds:
    """Find Whisper's special tokens in tokenizer.json and check that tokenizer, vocabulary and
    weights agree, since a mismatched tokenizer decodes fluent nonsense rather than failing."""
    added = {token["content"]: token["id"] for token in tokenizer_json.get("added_tokens", [])}

    def special(name: str) -> int:
        if name not in added:
            raise ConversionError(f"tokenizer.json lacks the Whisper special token {name}; pass the checkpoint's own")
        return added[name]

    start_of_transcript, translate = special("<|startoftranscript|>"), special("<|translate|>")
    ids = WhisperTokenIds(
        end_of_text=special("<|endoftext|>"),
        start_of_transcript=start_of_transcript,
        translate=translate,
        transcribe=special("<|transcribe|>"),
        start_of_prev=special("<|startofprev|>"),
        no_timestamps=special("<|notimestamps|>"),
        language_ids={
            token: token_id
            for token, token_id in sorted(added.items(), key=lambda item: item[1])
            if start_of_transcript < token_id < translate
        },
    )
    expected_vocab_size = ids.no_timestamps + 1 + TIMESTAMP_TOKEN_COUNT
    if dims.vocab_size != expected_vocab_size:
        raise ConversionError(
            f"the embeddings have {dims.vocab_size} rows but tokenizer.json implies "
            f"{expected_vocab_size} (<|notimestamps|> = {ids.no_timestamps}, then "
            f"{TIMESTAMP_TOKEN_COUNT} timestamps): the tokenizer does not belong to these weights; "
            "pass the checkpoint's own tokenizer.json"
        )
    if len(vocabulary) != dims.vocab_size:
        raise ConversionError(
            f"the vocabulary file has {len(vocabulary)} tokens, the weights {dims.vocab_size}; "
            "pass the checkpoint's own vocabulary"
        )
    by_id = {token_id: token for token, token_id in tokenizer_json["model"]["vocab"].items()}
    by_id.update({token_id: token for token, token_id in added.items()})
    for token_id in range(ids.no_timestamps + 1):
        if by_id.get(token_id) != vocabulary[token_id]:
            raise ConversionError(
                f"tokenizer.json and the vocabulary file disagree at id {token_id}: "
                f"{by_id.get(token_id)!r} vs {vocabulary[token_id]!r}; pass files of one checkpoint"
            )
    return ids


def _default_alignment_heads(dims: WhisperDims) -> list[list[int]]:
    """CTranslate2's fallback: every head of the second half of the decoder layers."""
    return [
        [layer, head]
        for layer in range(dims.decoder_layers // 2, dims.decoder_layers)
        for head in range(dims.decoder_attention_heads)
    ]


def generation_config_dict(
    ct2_config: dict[str, Any], dims: WhisperDims, ids: WhisperTokenIds
) -> dict[str, Any]:
    """Everything WhisperGenerationMixin reads. Without `no_timestamps_token_id`,
    `max_initial_timestamp_index`, `lang_to_id` etc., timestamped and long-form generation refuse
    to run. Values follow the generation configs openai/whisper-* ship on the Hub."""
    for key in ("suppress_ids", "suppress_ids_begin"):
        if key not in ct2_config:
            raise ConversionError(f"the CTranslate2 config.json lacks {key!r}; pass the checkpoint's own config.json")
    # English-only checkpoints list language ids too (shifted by one in the packaged tiny.en);
    # they mean nothing there. For multilingual ones the tokenizer is the authority.
    config_lang_ids = sorted(ct2_config.get("lang_ids") or [])
    if dims.is_multilingual and config_lang_ids != sorted(ids.language_ids.values()):
        logger.warning("config.json lang_ids differ from tokenizer.json; using the tokenizer's.")
    generation: dict[str, Any] = {
        "alignment_heads": [list(pair) for pair in ct2_config.get("alignment_heads") or []]
        or _default_alignment_heads(dims),
        "begin_suppress_tokens": list(ct2_config["suppress_ids_begin"]),
        "suppress_tokens": list(ct2_config["suppress_ids"]),
        "bos_token_id": ids.end_of_text,
        "eos_token_id": ids.end_of_text,
        "pad_token_id": ids.end_of_text,
        "decoder_start_token_id": ids.start_of_transcript,
        "no_timestamps_token_id": ids.no_timestamps,
        "prev_sot_token_id": ids.start_of_prev,
        "is_multilingual": dims.is_multilingual,
        "max_initial_timestamp_index": MAX_INITIAL_TIMESTAMP_INDEX,
        "max_length": dims.max_target_positions,
        "return_timestamps": False,
    }
    if dims.is_multilingual:
        generation["lang_to_id"] = dict(ids.language_ids)
        generation["task_to_id"] = {"transcribe": ids.transcribe, "translate": ids.translate}
        # Without a language: detect it, then transcribe (never translate).
        generation["forced_decoder_ids"] = [[1, None], [2, ids.transcribe]]
    else:
        generation["forced_decoder_ids"] = [[1, ids.no_timestamps]]
    return generation


def save_tokenizer(
    tokenizer_path: Path, tokenizer_json: dict[str, Any], dims: WhisperDims, output_dir: Path
) -> Any:
    """Save slow and fast tokenizer files; vocab.json and merges.txt are extracted from
    tokenizer.json so that `WhisperTokenizer` (slow) loads too. Returns the fast tokenizer."""
    from transformers import WhisperTokenizerFast

    bpe = tokenizer_json["model"]
    added = sorted(tokenizer_json.get("added_tokens", []), key=lambda token: token["id"])
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file, merges_file = Path(scratch, "vocab.json"), Path(scratch, "merges.txt")
        vocab_file.write_text(json.dumps(bpe["vocab"], ensure_ascii=False), encoding="utf-8")
        merges = [m if isinstance(m, str) else " ".join(m) for m in bpe.get("merges", [])]
        merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
        tokenizer = WhisperTokenizerFast(
            vocab_file=str(vocab_file),
            merges_file=str(merges_file),
            tokenizer_file=str(tokenizer_path),
            unk_token="<|endoftext|>",
            bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            # In id order: WhisperTokenizer takes the last special id + 1 as the first timestamp.
            additional_special_tokens=[t["content"] for t in added if t.get("special", True)],
            model_max_length=dims.max_target_positions,
        )
        new_ids = {token["id"] for token in added} - set(bpe["vocab"].values())
        expected_size = len(bpe["vocab"]) + len(new_ids)
        if len(tokenizer) != expected_size:
            raise ConversionError(
                f"the rebuilt tokenizer has {len(tokenizer)} tokens, expected {expected_size}; "
                "this tokenizer.json is not one the converter can rebuild"
            )
        tokenizer.save_pretrained(output_dir)
    return tokenizer
