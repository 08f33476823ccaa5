from django.db import models


class Protocol(models.TextChoices):
    OPENAI = "openai", "OpenAI"
    ANTHROPIC = "anthropic", "Anthropic"
    AZURE = "azure", "Azure OpenAI"


class Capability(models.TextChoices):
    TEXT = "text", "Text"
    VISION = "vision", "Vision"
    TOOLS = "tools", "Tools"
    JSON_OUTPUT = "json_output", "JSON output"
    AUDIO = "audio", "Audio"
    ASSISTANT_PREFILL = "assistant_prefill", "Assistant prefill"


# Which scope wins where several match a caller: routing.resolution.SCOPE_PRECEDENCE.
class ScopeType(models.TextChoices):
    GLOBAL = "global", "Global"
    TEAM = "team", "Team"
    APPLICATION = "application", "Application"
    USER = "user", "User"
    AGENT = "agent", "Agent"
    KEY = "key", "API key"
