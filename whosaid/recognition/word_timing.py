"""Word timestamps from Whisper's cross-attention, the method of openai/whisper's timing.py
(and faster-whisper's port of it).

For windows already decoded, one batched teacher-forced decoder pass over
<|startoftranscript|> <|lang|> <|task|> <|notimestamps|> text <|endoftext|> gives the
cross-attention of the alignment heads (the heads whose attention follows the audio, listed in
the generation config); normalised over tokens, median-filtered and averaged over heads it is a
token x audio-frame similarity, and dynamic time warping through it says at which frame each
token starts. Tokens are grouped into words (spaces, or characters for languages written without
them), punctuation joins its word, and the same heuristics as openai/whisper cut over-long
words at sentence and segment boundaries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import string
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from whosaid.config import WHISPER_FRAMES_PER_S, WHISPER_SAMPLE_RATE_HZ
from whosaid.recognition.segments import DecodedSegment
from whosaid.results import Word

logger = logging.getLogger(__name__)

# openai/whisper's constants (timing.py, transcribe.py).
MEDIAN_FILTER_WIDTH = 7
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
LANGUAGES_WITHOUT_SPACES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
#: Where a window decoded without timestamps is cut into chunks (sentence_pieces): a pause this
#: long between two words, or a piece this long; marks that may close a sentence after its end mark.
PIECE_PAUSE_S = 1.0
PIECE_MAX_S = 12.0
PIECE_CLOSERS = "\"'”’)]}»"
CLAUSE_END_MARKS = ",，、;；:："


@dataclass
class _Timing:
    """A word while it is built (punctuation merging empties some words in place)."""

    text: str
    tokens: list[int]
    start_s: float
    end_s: float
    probability: float


@dataclass(frozen=True)
class DecodedWindow:
    """One decoded window, as word timing reads it."""

    #: <|startoftranscript|> <|lang|> <|task|>: what its text is aligned after.
    start_sequence: tuple[int, ...]
    segments: tuple[DecodedSegment, ...]
    offset_s: float  # where the window's own time line starts on the audio's
    samples: int  # how many samples of audio it holds
    language: Optional[str]
    #: Decoded without timestamp tokens (one segment: the whole window): each segment is cut at
    #: its words into pieces, as Whisper's segments would be (`sentence_pieces`).
    split: bool = False


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai/whisper's dynamic time warping (dtw_cpu) with its tie-breaking, vectorised over
    the anti-diagonals. Returns (token indices, frame indices) of the cheapest monotonic path."""
    rows, columns = cost.shape
    total = np.full((rows + 1, columns + 1), np.inf, dtype=np.float64)
    trace = np.full((rows + 1, columns + 1), -1, dtype=np.int8)
    total[0, 0] = 0.0
    for diagonal in range(2, rows + columns + 1):
        i = np.arange(max(1, diagonal - columns), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
        take_diagonal = (c0 < c1) & (c0 < c2)
        take_up = ~take_diagonal & (c1 < c0) & (c1 < c2)
        step = np.where(take_diagonal, 0, np.where(take_up, 1, 2))
        best = np.where(take_diagonal, c0, np.where(take_up, c1, c2))
        total[i, j] = cost[i - 1, j - 1] + best
        trace[i, j] = step
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = rows, columns
    path: list[tuple[int, int]] = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    indices = np.array(path[::-1]).T
    return indices[0], indices[1]


def median_filter(weights: Any, width: int) -> Any:
    """Median over the last axis with reflected edges (openai/whisper's median_filter)."""
    import torch.nn.functional as F

    pad = width // 2
    if weights.shape[-1] <= pad:
        return weights
    padded = F.pad(weights[None], (pad, pad, 0, 0), mode="reflect")[0]
    return padded.unfold(-1, width, 1).sort()[0][..., pad]


class WordTimer:
    """Word timestamps for a Whisper model whose generation config lists its alignment heads."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        generation_config = model.generation_config
        config = model.config
        heads = [
            (int(layer), int(head))
            for layer, head in getattr(generation_config, "alignment_heads", None) or []
            if int(layer) < config.decoder_layers and int(head) < config.decoder_attention_heads
        ]
        # Without (valid) heads, openai/whisper's fallback: every head of the second half of the
        # decoder layers. A model's own list is what makes word times good.
        self.alignment_heads = heads or [
            (layer, head)
            for layer in range(config.decoder_layers // 2, config.decoder_layers)
            for head in range(config.decoder_attention_heads)
        ]
        self.eot_token_id = int(generation_config.eos_token_id)
        self.no_timestamps_token_id = int(generation_config.no_timestamps_token_id)
        self.max_target_positions = int(config.max_target_positions)

    def window_words(self, encoder_states: Any, windows: Sequence[DecodedWindow]) -> list[list[DecodedSegment]]:
        """Words of each window's segments, on the window's time line; row r of `encoder_states`
        is `windows[r]`. Returns, per window, each segment with its words, its (start, end) moved
        to its words' as openai/whisper does.

        The alignment pass reads each window's text in the model's positions after its start
        sequence: text that would not fit (never what the recognizer gives, its decoding leaves
        the room) is left out, segments and words alike, from the first token that does not."""
        windows = [
            dataclasses.replace(
                window,
                segments=tuple(self._fit(window.segments, self.max_target_positions - len(window.start_sequence) - 2)),
            )
            for window in windows
        ]
        token_lists = [
            [token for segment in window.segments for token in segment.tokens if token < self.eot_token_id]
            for window in windows
        ]
        alignments = self._align(encoder_states, windows, token_lists)
        return [
            self._segment_words(window.segments, alignment, window.offset_s, window.language, split=window.split)
            for window, alignment in zip(windows, alignments, strict=True)
        ]

    def _fit(self, segments: Sequence[DecodedSegment], room: int) -> list[DecodedSegment]:
        """`segments` cut after their first `room` text tokens (the <|notimestamps|> and
        <|endoftext|> around them are already counted out of the room)."""
        fitted: list[DecodedSegment] = []
        for segment in segments:
            text_tokens = [token for token in segment.tokens if token < self.eot_token_id]
            if len(text_tokens) > room:
                logger.warning("word alignment: text past %d decoder positions left out", self.max_target_positions)
                if room > 0:
                    fitted.append(dataclasses.replace(segment, tokens=tuple(text_tokens[:room])))
                return fitted
            room -= len(text_tokens)
            fitted.append(segment)
        return fitted

    def _align(
        self, encoder_states: Any, windows: Sequence[DecodedWindow], token_lists: Sequence[list[int]]
    ) -> list[Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """(token indices, frame indices, token probabilities) from DTW, per window; None for a
        window without text. One decoder pass for the whole batch."""
        import torch

        rows = [index for index, tokens in enumerate(token_lists) if tokens]
        results: list[Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [None] * len(token_lists)
        if not rows:
            return results
        states = encoder_states[rows]
        ids = self._alignment_ids([windows[row] for row in rows], [token_lists[row] for row in rows], states.device)
        decoder = self.model.get_decoder()
        with torch.inference_mode(), _cross_attention_inputs(decoder, self.alignment_heads) as queries:
            hidden = decoder(input_ids=ids, encoder_hidden_states=states, use_cache=False).last_hidden_state
            frames = max(self._frames(windows[row].samples, states.shape[1]) for row in rows)
            attention_logits = self._attention_logits(decoder, queries, states[:, :frames])
            for position, row in enumerate(rows):
                # A window's own text positions only: the vocabulary's logits for a whole
                # batch of long windows are hundreds of MB.
                start_length = len(windows[row].start_sequence)
                text = hidden[position, start_length : start_length + len(token_lists[row])]
                results[row] = self._dtw_row(
                    attention_logits[position],
                    self.model.proj_out(text).float(),
                    start_length,
                    token_lists[row],
                    windows[row].samples,
                )
        return results

    def _alignment_ids(self, windows: Sequence[DecodedWindow], token_lists: Sequence[list[int]], device: Any) -> Any:
        """The alignment pass's input of each window: its start sequence, <|notimestamps|>, its
        text tokens, <|endoftext|>; padded on the right with <|endoftext|> (the decoder is
        causal, so the padding changes no real position)."""
        import torch

        sequences = [
            [*window.start_sequence, self.no_timestamps_token_id, *tokens, self.eot_token_id]
            for window, tokens in zip(windows, token_lists, strict=True)
        ]
        length = max(len(sequence) for sequence in sequences)
        return torch.tensor(
            [sequence + [self.eot_token_id] * (length - len(sequence)) for sequence in sequences],
            dtype=torch.long,
            device=device,
        )

    def _attention_logits(self, decoder: Any, queries: dict[int, Any], states: Any) -> Any:
        """Pre-softmax cross-attention of the alignment heads, (batch, heads, tokens, frames), from
        each layer's `queries` (its cross-attention's input) over `states`, the frames that hold
        audio (keys are per frame: cutting first is exact)."""
        import torch

        projected = {}
        for layer in sorted(queries):
            attention = decoder.layers[layer].encoder_attn
            projected[layer] = (
                attention.q_proj(queries[layer]).float() * attention.scaling,
                attention.k_proj(states).float(),
            )
        scores = []
        for layer, head in self.alignment_heads:
            head_dim = decoder.layers[layer].encoder_attn.head_dim
            columns = slice(head * head_dim, (head + 1) * head_dim)
            query, key = projected[layer]
            scores.append(query[..., columns] @ key[..., columns].transpose(-1, -2))
        return torch.stack(scores, dim=1)

    @staticmethod
    def _frames(samples: int, available: int) -> int:
        """Encoder frames that hold the window's audio (openai/whisper: num_frames // 2)."""
        return max(1, min(available, samples * WHISPER_FRAMES_PER_S // WHISPER_SAMPLE_RATE_HZ))

    def _dtw_row(
        self, attention_logits: Any, text_logits: Any, start_length: int, tokens: list[int], samples: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import torch

        frames = self._frames(samples, attention_logits.shape[-1])
        token_count = len(tokens)
        # Rows: <|notimestamps|>, the text tokens, <|endoftext|> (prompt and padding cut off).
        weights = attention_logits[:, start_length : start_length + token_count + 2, :frames].softmax(dim=-1)
        std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
        weights = median_filter((weights - mean) / std, MEDIAN_FILTER_WIDTH)
        matrix = weights.mean(dim=0)[:-1]  # without the <|endoftext|> row
        token_indices, frame_indices = dtw(-matrix.double().cpu().numpy())
        probabilities = text_logits[:, : self.eot_token_id].softmax(dim=-1)
        token_probabilities = probabilities[torch.arange(token_count), torch.tensor(tokens)].cpu().numpy()
        return token_indices, frame_indices, token_probabilities

    def _words(
        self, tokens: list[int], alignment: tuple[np.ndarray, np.ndarray, np.ndarray], language: Optional[str]
    ) -> list[_Timing]:
        """openai/whisper's find_alignment after DTW: a word starts at the frame where its first
        token's row begins on the path."""
        token_indices, frame_indices, token_probabilities = alignment
        words, word_tokens = self._split_words(tokens + [self.eot_token_id], language)
        if len(word_tokens) <= 1:
            return []
        boundaries = np.pad(np.cumsum([len(group) for group in word_tokens[:-1]]), (1, 0))
        jumps = np.pad(np.diff(token_indices), (1, 0), constant_values=1).astype(bool)
        jump_times_s = frame_indices[jumps] / WHISPER_FRAMES_PER_S
        starts_s = jump_times_s[boundaries[:-1]]
        ends_s = jump_times_s[boundaries[1:]]
        # Not strict: `words` ends with the <|endoftext|> word, which has no boundary and is dropped.
        return [
            _Timing(word, group, float(start), float(end), float(np.mean(token_probabilities[first:last])))
            for word, group, start, end, first, last in zip(
                words, word_tokens, starts_s, ends_s, boundaries[:-1], boundaries[1:], strict=False
            )
        ]

    def _split_words(self, tokens: list[int], language: Optional[str]) -> tuple[list[str], list[list[int]]]:
        subwords, subword_tokens = self._split_on_unicode(tokens)
        if language in LANGUAGES_WITHOUT_SPACES:
            return subwords, subword_tokens
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for subword, group in zip(subwords, subword_tokens, strict=True):
            special = group[0] >= self.eot_token_id
            if special or subword.startswith(" ") or subword.strip() in string.punctuation or not words:
                words.append(subword)
                word_tokens.append(list(group))
            else:
                words[-1] += subword
                word_tokens[-1].extend(group)
        return words, word_tokens

    def _split_on_unicode(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Cut where the decoded text is whole characters (a character may span tokens)."""
        decode = self.tokenizer.decode
        full = decode(tokens)
        replacement = "\ufffd"
        words: list[str] = []
        word_tokens: list[list[int]] = []
        current: list[int] = []
        offset = 0
        for token in tokens:
            current.append(token)
            decoded = decode(current)
            if replacement not in decoded or full[offset + decoded.index(replacement)] == replacement:
                words.append(decoded)
                word_tokens.append(current)
                current = []
                offset += len(decoded)
        return words, word_tokens

    def _segment_words(
        self,
        segments: Sequence[DecodedSegment],
        alignment: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]],
        offset_s: float,
        language: Optional[str],
        *,
        split: bool = False,
    ) -> list[DecodedSegment]:
        """openai/whisper's add_word_timestamps for one window; with `split`, each segment is
        first cut into its `sentence_pieces`, each piece a segment of its words' tokens."""
        segment_tokens = [[token for token in segment.tokens if token < self.eot_token_id] for segment in segments]
        all_tokens = [token for tokens in segment_tokens for token in tokens]
        timings = self._words(all_tokens, alignment, language) if alignment is not None else []
        median_s, max_s = _shorten_long_words(timings)
        _merge_punctuations(timings)
        results: list[DecodedSegment] = []
        last_speech_s = offset_s
        index = 0
        for segment, tokens in zip(segments, segment_tokens, strict=True):
            words, index = _segment_timings(timings, index, len(tokens), offset_s)
            for piece, piece_words in _pieces(segment, words, split):
                piece = _with_words(piece, piece_words, last_speech_s, median_s, max_s)
                if piece_words:
                    last_speech_s = piece.end_s
                results.append(piece)
        return results


@contextlib.contextmanager
def _cross_attention_inputs(decoder: Any, alignment_heads: Sequence[tuple[int, int]]) -> Iterator[dict[int, Any]]:
    """The input of the cross-attention of each layer that holds an alignment head (its layer
    norm's output), by layer, caught as the decoder runs inside the block."""
    queries: dict[int, Any] = {}
    hooks = [
        decoder.layers[layer].encoder_attn_layer_norm.register_forward_hook(
            lambda module, inputs, output, layer=layer: queries.__setitem__(layer, output)
        )
        for layer in sorted({layer for layer, _ in alignment_heads})
    ]
    try:
        yield queries
    finally:
        for hook in hooks:
            hook.remove()


def _pieces(segment: DecodedSegment, words: list[_Timing], split: bool) -> list[tuple[DecodedSegment, list[_Timing]]]:
    """`segment` with its words; with `split`, each of its `sentence_pieces` as a segment of its
    words' tokens, from its first word's start to its last word's end."""
    if not split or not words:
        return [(segment, words)]
    return [
        (
            DecodedSegment(tuple(token for word in piece for token in word.tokens), piece[0].start_s, piece[-1].end_s),
            piece,
        )
        for piece in sentence_pieces(words)
    ]


def sentence_pieces(words: Sequence[_Timing]) -> list[list[_Timing]]:
    """`words` (one window's, decoded without timestamps) cut where Whisper would end a segment:
    after a sentence's last word and before a word that follows a pause of PIECE_PAUSE_S or more;
    a piece still longer than PIECE_MAX_S is halved (`_halves`)."""
    pieces: list[list[_Timing]] = []
    for word in words:
        previous = pieces[-1][-1] if pieces else None
        if (
            previous is None
            or previous.text.rstrip(PIECE_CLOSERS)[-1:] in SENTENCE_END_MARKS
            or word.start_s - previous.end_s >= PIECE_PAUSE_S
        ):
            pieces.append([word])
        else:
            pieces[-1].append(word)
    return [half for piece in pieces for half in _halves(piece)]


def _halves(piece: list[_Timing]) -> list[list[_Timing]]:
    """`piece`, or while it lasts over PIECE_MAX_S, its halves: cut in its middle half, after the
    clause mark (comma, colon, semicolon) nearest its middle, else at its widest pause between
    words (the one nearest the middle among equals)."""
    duration_s = piece[-1].end_s - piece[0].start_s
    if len(piece) < 2 or duration_s <= PIECE_MAX_S:
        return [piece]
    middle_s = piece[0].start_s + duration_s / 2

    def preference(cut: int) -> tuple[bool, bool, float, float]:
        from_middle_s = abs(piece[cut].start_s - middle_s)
        after_clause = piece[cut - 1].text.rstrip(PIECE_CLOSERS)[-1:] in CLAUSE_END_MARKS
        pause_s = 0.0 if after_clause else round(piece[cut].start_s - piece[cut - 1].end_s, 2)
        return from_middle_s <= duration_s / 4, after_clause, pause_s, -from_middle_s

    cut = max(range(1, len(piece)), key=preference)
    return _halves(piece[:cut]) + _halves(piece[cut:])


def _shorten_long_words(timings: list[_Timing]) -> tuple[float, float]:
    """openai/whisper: words at sentence boundaries are no longer than twice the median word.
    Returns the median word's duration (at most 0.7 s) and that limit."""
    durations = np.array([timing.end_s - timing.start_s for timing in timings])
    durations = durations[durations.nonzero()]
    median_s = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    max_s = median_s * 2
    if len(durations):
        for index in range(1, len(timings)):
            if timings[index].end_s - timings[index].start_s > max_s:
                if timings[index].text in SENTENCE_END_MARKS:
                    timings[index].end_s = timings[index].start_s + max_s
                elif timings[index - 1].text in SENTENCE_END_MARKS:
                    timings[index].start_s = timings[index].end_s - max_s
    return median_s, max_s


def _segment_timings(timings: Sequence[_Timing], index: int, count: int, offset_s: float) -> tuple[list[_Timing], int]:
    """The words of the segment of `count` tokens whose first word is `timings[index]`, moved by
    `offset_s` (words emptied by punctuation merging count their tokens, but are left out), and
    the index of the next segment's first word."""
    words: list[_Timing] = []
    saved = 0
    while index < len(timings) and saved < count:
        timing = timings[index]
        if timing.text:
            start_s, end_s = round(offset_s + timing.start_s, 2), round(offset_s + timing.end_s, 2)
            words.append(_Timing(timing.text, timing.tokens, start_s, end_s, timing.probability))
        saved += len(timing.tokens)
        index += 1
    return words, index


def _with_words(
    segment: DecodedSegment, words: list[_Timing], last_speech_s: float, median_s: float, max_s: float
) -> DecodedSegment:
    """`segment` with its `words`, its start and end moved to theirs (or theirs to its, where
    they run more than half a second past it), as openai/whisper does."""
    start_s, end_s = segment.start_s, segment.end_s
    if words:
        _shorten_words_after_pause(words, last_speech_s, median_s, max_s)
        first, last = words[0], words[-1]
        if start_s < first.end_s and start_s - 0.5 > first.start_s:
            first.start_s = max(0.0, min(first.end_s - median_s, start_s))
        else:
            start_s = first.start_s
        if end_s > last.start_s and end_s + 0.5 < last.end_s:
            last.end_s = max(last.start_s + median_s, end_s)
        else:
            end_s = last.end_s
    timed = tuple(Word(word.text, word.start_s, word.end_s, word.probability) for word in words)
    return DecodedSegment(segment.tokens, start_s, end_s, timed)


def _shorten_words_after_pause(words: list[_Timing], last_speech_s: float, median_s: float, max_s: float) -> None:
    """openai/whisper: the first and second word after a pause are no longer than twice the
    median word (DTW stretches the first word over the silence before it)."""
    first = words[0]
    if first.end_s - last_speech_s > median_s * 4 and (
        first.end_s - first.start_s > max_s or (len(words) > 1 and words[1].end_s - first.start_s > max_s * 2)
    ):
        if len(words) > 1 and words[1].end_s - words[1].start_s > max_s:
            boundary = max(words[1].end_s / 2, words[1].end_s - max_s)
            first.end_s = words[1].start_s = boundary
        first.start_s = max(0.0, first.end_s - max_s)


def _merge_punctuations(timings: list[_Timing]) -> None:
    """openai/whisper's merge_punctuations: opening marks join the next word, closing marks the
    previous one; the emptied words stay (their tokens count) with no text."""
    i, j = len(timings) - 2, len(timings) - 1
    while i >= 0:
        previous, following = timings[i], timings[j]
        if previous.text.startswith(" ") and previous.text.strip() in PREPEND_PUNCTUATIONS:
            following.text = previous.text + following.text
            following.tokens = previous.tokens + following.tokens
            previous.text, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(timings):
        previous, following = timings[i], timings[j]
        if not previous.text.endswith(" ") and following.text in APPEND_PUNCTUATIONS:
            previous.text = previous.text + following.text
            previous.tokens = previous.tokens + following.tokens
            following.text, following.tokens = "", []
        else:
            i = j
        j += 1
