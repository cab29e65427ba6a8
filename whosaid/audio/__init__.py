"""Audio in: decoding whatever the client sent (loading), container checks, and where the speech is (vad)."""
