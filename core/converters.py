"""URL converters for names in paths: a provider or model name can hold no control character (core.validators),
so a path segment that does is no name and answers 404 before any query (PostgreSQL refuses NUL in text)."""


class NameConverter:
    """One path segment of a name: anything but "/" and control characters."""

    regex = "[^/\x00-\x1f\x7f]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class NamePathConverter(NameConverter):
    """A name that may hold "/" (a model such as "meta/llama-3"), without control characters."""

    regex = "[^\x00-\x1f\x7f]+"
