"""A speculative-decoding assistant made from the main model itself, and when to use one."""
