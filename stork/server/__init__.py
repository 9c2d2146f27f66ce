"""The stork_server daemon: API, dispatcher, attempt runner, periodic work."""
