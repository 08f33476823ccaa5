"""REST API authentication for scripts: `Authorization: Token <secret>` with a catalog ConsoleToken.

Only the SHA-256 of a token is stored (like the gateway keys), so a request is matched by hashing the
secret it presents. The "Token" keyword is the one DRF's authtoken used, so scripts keep their header.
"""

import math
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from access.client import client_address
from access.enums import ThrottleKind, ThrottleScope
from access.selectors import auth_locked_until
from access.services import auth_failure_record
from catalog.keys import key_hash
from catalog.models import ConsoleToken
from catalog.selectors import console_token_live

TOKEN_LOCKED_MESSAGE = "Too many failed token attempts from this address; token authentication is paused."

# last_used_at is a hint for people, not an audit trail: one write a minute per token is precise enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ConsoleTokenAuthentication(BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, ConsoleToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None  # not ours: another scheme, or no credentials at all
        # Failures are throttled per client address, like sign-in: a locked address is refused (429) before any
        # token is looked up, valid or not.
        address = client_address(request._request)
        idents = [(ThrottleKind.ADDRESS.value, address)]
        if until := auth_locked_until(scope=ThrottleScope.API, idents=idents):
            raise self._throttled(until)
        try:
            return self._authenticate(parts)
        except AuthenticationFailed:
            if until := auth_failure_record(scope=ThrottleScope.API, idents=idents, address=address):
                raise self._throttled(until) from None
            raise

    @staticmethod
    def _throttled(until: datetime) -> Throttled:
        wait = max(1, math.ceil((until - timezone.now()).total_seconds()))
        return Throttled(wait=wait, detail=TOKEN_LOCKED_MESSAGE)

    def _authenticate(self, parts: list[bytes]) -> tuple[Any, ConsoleToken]:
        if len(parts) == 1:
            raise AuthenticationFailed("Invalid token header. No credentials provided.")
        if len(parts) > 2:
            raise AuthenticationFailed("Invalid token header. Token string should not contain spaces.")
        try:
            secret = parts[1].decode()
        except UnicodeError:
            raise AuthenticationFailed("Invalid token header. Token string should not contain invalid characters.")
        return self.authenticate_credentials(secret)

    def authenticate_credentials(self, secret: str) -> tuple[Any, ConsoleToken]:
        token = console_token_live(secret_hash=key_hash(secret))
        # One message for every refusal, so a caller learns nothing about which tokens exist.
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        self._touch(token)
        return token.user, token

    def _touch(self, token: ConsoleToken) -> None:
        now = timezone.now()
        stale = now - LAST_USED_RESOLUTION
        if token.last_used_at is not None and token.last_used_at > stale:
            return  # fresh enough: no write at all on most requests
        # Conditional, so concurrent requests with the same token write once, not once each.
        ConsoleToken.objects.filter(Q(last_used_at=None) | Q(last_used_at__lte=stale), pk=token.pk).update(
            last_used_at=now
        )
        token.last_used_at = now

    def authenticate_header(self, request: Request) -> str:
        return 'Token realm="api"'


class ConsoleTokenScheme(OpenApiAuthenticationExtension):
    """Documents ConsoleTokenAuthentication in the OpenAPI schema as DRF's TokenAuthentication was."""

    target_class = ConsoleTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")
