"""Whisper speech recognition: the recognizer, model loading, the greedy loop and its decoder step,
the logits rules, word timing, and the spans made into chunks."""
