"""Protocol badges for the console: which API a provider speaks ("OpenAI", "Anthropic", "Azure").

A chain may mix protocols and the gateway translates between them (docs/protocols.md), so wherever the
console names a provider it says which protocol that provider speaks.
"""

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from catalog.enums import Protocol
from catalog.selectors import provider_protocols

register = template.Library()

# Short enough for a badge next to a name.
_SHORT: dict[str, str] = {Protocol.OPENAI: "OpenAI", Protocol.ANTHROPIC: "Anthropic", Protocol.AZURE: "Azure"}
_CACHE_ATTRIBUTE = "_catalog_provider_protocols"


def protocol_short(protocol: str) -> str:
    """ "anthropic" → "Anthropic"; an unknown value reads as itself."""
    return _SHORT.get(protocol, protocol)


def _protocols(context: template.Context) -> dict[str, str]:
    """Provider name → protocol, read once per request (the editor renders one partial per entry)."""
    request = context.get("request")
    cached: dict[str, str] | None = getattr(request, _CACHE_ATTRIBUTE, None)
    if cached is None:
        cached = provider_protocols()
        if request is not None:
            setattr(request, _CACHE_ATTRIBUTE, cached)
    return cached


@register.simple_tag
def protocol_badge(protocol: str) -> SafeString:
    """A small tag naming the protocol; the title spells it out for screen readers and hover."""
    if not protocol:
        return SafeString("")
    label = Protocol(protocol).label if protocol in Protocol.values else protocol
    return format_html(
        '<span class="tag tag-protocol" data-protocol="{}" title="Protocol: {}">{}</span>',
        protocol,
        label,
        protocol_short(protocol),
    )


@register.simple_tag(takes_context=True)
def provider_protocol_badge(context: template.Context, provider: Any) -> SafeString:
    """protocol_badge of the provider named `provider` (nothing for an unknown or empty name)."""
    return protocol_badge(_protocols(context).get(str(provider or ""), ""))


@register.simple_tag(takes_context=True)
def provider_protocol_label(context: template.Context, provider: Any) -> str:
    """The short protocol name as plain text, for <option> labels (they cannot hold markup)."""
    protocol = _protocols(context).get(str(provider or ""), "")
    return protocol_short(protocol) if protocol else ""
