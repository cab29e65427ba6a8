"""Word error rate on real speech with human transcripts, pooled per language: each
`benchmarks.asr.speed` implementation (same loaders, same parameters, told each clip's language) on
every clip of ../shared/data/asr (read in place, never copied). No timing: quality only.

    python -m benchmarks.asr.wer_real
    python -m benchmarks.asr.wer_real --implementations whosaid,faster-whisper-fp32-greedy --model whisper-base

Both sides are normalised as Whisper's own evaluation does (transformers' `EnglishTextNormalizer`
for English, without the checkpoint's British-to-American spelling table, and
`BasicTextNormalizer` otherwise), after the references' bracketed tags ([noise], <VOCNOISE>) are
removed. Pooled WER: the errors of every clip of a language over their reference words (jiwer's
alignment), and over all clips. Results: benchmarks/results/wer-real-<timestamp>.json and
wer-real-latest.md (or --output-dir).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from benchmarks.asr.speed import DEFAULT_BATCH_SIZE, DEFAULT_MODEL, comma_separated, refuse_unknown_implementations
from benchmarks.asr.speed_implementations import ASR_IMPLEMENTATIONS, IMPLEMENTATIONS, Job
from benchmarks.common.environment import result_head, usable_cpus, utc_minute
from benchmarks.common.report import RESULTS_DIR, markdown_table, write_results
from benchmarks.common.scoring import SHARED_DATA

ASR_DIR = SHARED_DATA / "asr"
DEFAULT_IMPLEMENTATIONS = ("whosaid", "faster-whisper-fp32-greedy", "whosaid-int8", "faster-whisper-int8-greedy")
_TAGS = re.compile(r"\[[^\]]*\]|<[^>]*>")
_TABLE_ROW = re.compile(r"^\|\s*([\w.-]+)\s*\|\s*([a-z]{2})\s*\|")


@dataclass(frozen=True)
class Clip:
    name: str
    language: str
    path: Path
    reference: str


def clips(directory: Path = ASR_DIR) -> list[Clip]:
    """The clips that have a transcript, with the language the folder's README table gives each;
    none where the folder is absent."""
    readme = directory / "README.md"
    if not readme.is_file():
        return []
    languages = dict(match.groups() for line in readme.read_text().splitlines() if (match := _TABLE_ROW.match(line)))
    return [
        Clip(path.stem, languages[path.stem], path, path.with_suffix(".txt").read_text().strip())
        for path in sorted(directory.glob("*.wav"))
        if path.stem in languages and path.with_suffix(".txt").is_file()
    ]


def normaliser(language: str) -> Callable[[str], str]:
    """Whisper's normaliser for `language`, after bracketed tags are removed."""
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

    normalise = EnglishTextNormalizer({}) if language == "en" else BasicTextNormalizer()
    return lambda text: " ".join(normalise(_TAGS.sub(" ", text)).split())


def errors(reference: str, hypothesis: str, language: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference words) after normalisation."""
    import jiwer

    normalise = normaliser(language)
    reference, hypothesis = normalise(reference), normalise(hypothesis)
    words = len(reference.split())
    if not words:
        return len(hypothesis.split()), 0
    output = jiwer.process_words(reference, hypothesis)
    return output.substitutions + output.deletions + output.insertions, words


def pooled(rows: Sequence[dict], language: Optional[str] = None) -> float:
    """Errors over reference words of `rows` (of one language, or all)."""
    chosen = [row for row in rows if language is None or row["language"] == language]
    return sum(row["errors"] for row in chosen) / max(1, sum(row["words"] for row in chosen))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="whisper-base, whisper-tiny.en or a directory")
    parser.add_argument("--ct2-model", help="CTranslate2 checkpoint matching a --model directory (for faster-whisper)")
    parser.add_argument(
        "--implementations",
        type=comma_separated,
        default=list(DEFAULT_IMPLEMENTATIONS),
        help=f"comma-separated, from {', '.join(ASR_IMPLEMENTATIONS)}",
    )
    parser.add_argument("--languages", type=comma_separated, help="only the clips of these languages")
    parser.add_argument("--clips", type=comma_separated, help="only these clips (names without .wav)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="default %(default)s")
    parser.add_argument("--threads", type=int, default=usable_cpus(), help="default: usable CPUs, %(default)s")
    parser.add_argument("--asr-dir", type=Path, default=ASR_DIR, help="clips and transcripts (default %(default)s)")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    refuse_unknown_implementations(args.implementations)
    from benchmarks.common.models import resolve_model
    from whosaid.audio.loading import load_audio_file

    try:
        model = resolve_model(args.model, args.ct2_model)
    except ValueError as error:
        raise SystemExit(str(error)) from error
    chosen = [
        clip
        for clip in clips(args.asr_dir)
        if (not args.languages or clip.language in args.languages) and (not args.clips or clip.name in args.clips)
    ]
    if not chosen:
        raise SystemExit(f"no clips with transcripts in {args.asr_dir}")
    audio = {clip.name: load_audio_file(clip.path).samples for clip in chosen}
    languages = sorted({clip.language for clip in chosen}, key=lambda code: (code != "en", code))
    started = utc_minute()
    rows = []
    for name in args.implementations:
        for language in languages:
            job = Job(
                implementation=name,
                clip=language,
                model_name=model.name,
                transformers_model=model.transformers_model,
                ct2_model=model.ct2_model,
                batch_size=args.batch_size,
                repeats=1,
                warmup=0,
                threads=args.threads,
                language=language,
            )
            run = IMPLEMENTATIONS[name].load(job)
            for clip in (clip for clip in chosen if clip.language == language):
                text = run(audio[clip.name])["text"]
                wrong, words = errors(clip.reference, text, language)
                rows.append(
                    {
                        "implementation": name,
                        "clip": clip.name,
                        "language": language,
                        "errors": wrong,
                        "words": words,
                        "text": text,
                    }
                )
            del run
            gc.collect()
        print(f"  {name}: pooled WER {pooled([r for r in rows if r['implementation'] == name]):.3f}", file=sys.stderr)

    def cell(name: str, language: Optional[str]) -> str:
        return f"{pooled([row for row in rows if row['implementation'] == name], language):.3f}"

    headers = ["implementation", "strategy", "precision", *(f"{code} pooled" for code in languages), "all pooled"]
    table = markdown_table(
        headers,
        [
            [name, IMPLEMENTATIONS[name].strategy, IMPLEMENTATIONS[name].precision]
            + [cell(name, code) for code in languages]
            + [cell(name, None)]
            for name in args.implementations
        ],
    )
    per_clip = markdown_table(
        ["clip", "language", "words", *args.implementations],
        [
            [clip.name, clip.language, str(next(r["words"] for r in rows if r["clip"] == clip.name))]
            + [
                f"{row['errors'] / max(1, row['words']):.3f}"
                for name in args.implementations
                for row in rows
                if row["implementation"] == name and row["clip"] == clip.name
            ]
            for clip in chosen
        ],
    )
    words = {
        code: sum(r["words"] for r in rows if r["language"] == code) // len(args.implementations) for code in languages
    }
    counted = ", ".join(f"{code}: {count} words" for code, count in words.items())
    markdown = (
        f"WER pooled per language over {len(chosen)} clips of real speech ({counted}); "
        f"{model.name}, batch {args.batch_size}, {args.threads} threads\n\n{table}\n\n{per_clip}\n"
    )
    result = {
        **result_head("wer-real", started),
        "settings": {"model": model.name, "batch_size": args.batch_size, "threads": args.threads},
        "rows": rows,
    }
    json_path, markdown_path = write_results(args.output_dir, "wer-real", result, markdown)
    print(markdown)
    print(f"wrote {json_path} and {markdown_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
