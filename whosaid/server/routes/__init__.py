"""Thin routers: parse the HTTP request, call TranscriptionService, shape the response."""
