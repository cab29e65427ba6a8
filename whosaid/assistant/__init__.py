"""A speculative-decoding assistant made from the main model itself: building and saving it
(build) and tuning it on the user's audio (tune). When a request is assisted: recognition.assisted."""
