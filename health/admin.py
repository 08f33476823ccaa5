"""Breaker settings are edited through the services (console tab and API) so every change is audited."""
