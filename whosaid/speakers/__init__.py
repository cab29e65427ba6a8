"""Who spoke when: the `Diarizer` and `SpeakerEmbedder` protocols and the factory (diarizer), the
pyannote and built-in diarizers, clustering, CAM++ embeddings, known speakers, and the words'
attribution to speakers."""
