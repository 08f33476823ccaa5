"""API plumbing shared by every app: the exception handler, input validation, paging, and
one URL served by several single-operation views.

Input validation raises ValidationFailed, so every 400 has the `{"detail", "errors"}` shape.

A nested object that may be null derives from NullableObjectSerializer, so that the schema declares it in a way
OpenAPI 3.0.3 tools read as nullable.
"""

import copy
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import models, transaction
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings
from rest_framework import serializers, status
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import CONCURRENT_ABORT_MESSAGE, ApplicationError, ValidationFailed, concurrent_abort

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map ApplicationError to 400/409 with a message and per-field errors, an oversized body to 413, and a
    transaction the database aborted for a concurrent one (a deadlock) to 409."""
    if isinstance(exc, RequestDataTooBig):
        # Raised by Django when the parser reads the body; unhandled it becomes an HTML 400.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            {"detail": f"Request body is too large: the limit is {limit} bytes."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if concurrent_abort(exc):  # a deadlock between two writers: this one was rolled back whole
        return Response(
            {"detail": CONCURRENT_ABORT_MESSAGE, "errors": {"__all__": [CONCURRENT_ABORT_MESSAGE]}},
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, ApplicationError):
        body: dict[str, Any] = {"detail": exc.message}
        if exc.errors:
            body["errors"] = exc.errors
        return Response(body, status=exc.status_code)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, NotAuthenticated | AuthenticationFailed):
        # Session auth comes first and has no WWW-Authenticate scheme, so DRF would answer 403.
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response["WWW-Authenticate"] = 'Token realm="api"'
    return response


class StandardPagination(PageNumberPagination):
    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 100


def _flatten(detail: Any, prefix: str, out: dict[str, list[str]]) -> None:
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                _flatten(value, prefix, out)
            else:
                _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        # One error dict per list item (an empty one for a valid item).
        for i, item in enumerate(detail):
            if item:
                _flatten(item, f"{prefix}.{i}" if prefix else str(i), out)
    elif isinstance(detail, list):
        out.setdefault(prefix or "__all__", []).extend(str(message) for message in detail)
    else:
        out.setdefault(prefix or "__all__", []).append(str(detail))


def input_validate(serializer: serializers.Serializer) -> dict[str, Any]:
    """Validated data, or ValidationFailed with field paths like "entries.0.model" (the services' keys)."""
    return dict(_validated(serializer, prefix=""))


def nested_input_validate(serializer: serializers.BaseSerializer, *, field: str) -> Any:
    """A nested object (or list of them) sent in a PATCH, validated whole; errors are prefixed with `field`.

    With partial=True DRF drops the required checks inside nested serializers too, so a PATCH
    validates each nested value it received again with a non-partial serializer.
    """
    data = _validated(serializer, prefix=field)
    return [dict(item) for item in data] if isinstance(data, list) else dict(data)


def _validated(serializer: serializers.BaseSerializer, *, prefix: str) -> Any:
    if serializer.is_valid():
        return serializer.validated_data
    errors: dict[str, list[str]] = {}
    _flatten(serializer.errors, prefix, errors)
    field_name, messages = next(iter(errors.items()))
    summary = messages[0] if field_name == "__all__" else f"{field_name}: {messages[0]}"
    raise ValidationFailed(summary, errors=errors)


def paginated_response(*, request: Request, view: APIView, queryset: Any, serializer_class: type) -> Response:
    """One page of `queryset` with count, next and previous (`?page=`, `?page_size=` up to 100)."""
    paginator = StandardPagination()
    page: list[Any] | None = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


class _RowMoved(Exception):
    """The row changed between the unlocked read `first` was given and its lock: run the transaction again."""


# Runs of a locked update whose row changed under it before the last one goes ahead with the locks it took.
_LOCKED_UPDATE_ATTEMPTS = 3


def row_locked_update(
    model: type[models.Model],
    *,
    first: Callable[[Mapping[str, Any], Any], None] | None = None,
    input_serializer: type[serializers.Serializer] | None = None,
) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """Run an update view's `_update(request, pk, *, partial)` in one transaction that locks the row first.

    A PATCH keeps the fields it does not send from the stored row. Read before the lock, that row may be stale:
    two PATCHes of different fields, sent together, each wrote back the other's field as it was before, and
    one change was silently undone. Locked first, the second PATCH waits for the first and merges into what
    it saved. (On SQLite the transaction's BEGIN IMMEDIATE serialises writers the same way.) A missing row
    locks nothing, and the view answers 404 as before.

    `first(data, stored)` takes the locks the update's service takes before this row in the one lock order
    (docs/decisions.md, "One lock order": a model's or an alias's name, an application's team, the models a
    provider's deployments name, ...), from the request's data as `input_serializer` validates it (a body it
    refuses is its 400, before any lock) and the row as stored (read without a lock):
    taken after the row, a concurrent write taking them in order (a team's delete, a model's create) and this
    one would each wait for the other, a deadlock. Should the row change between that read and its lock (what
    `first` locked may no longer be what it names), the transaction is rolled back and run again.

    The body is read before the lock: read lazily inside it, a client that stops sending halfway would hold
    the row (and its transaction) for as long as it stalls. `FOR NO KEY UPDATE` keeps rows that only refer to
    this one (a chain entry naming a locked model) insertable meanwhile.
    """

    def wrap(view: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(view)
        def locked(request: Request, pk: int, *args: Any, **kwargs: Any) -> Response:
            request.data  # noqa: B018 - parsed now, off the lock (a parse error is answered as before)
            for attempt in range(1, _LOCKED_UPDATE_ATTEMPTS + 1):
                try:
                    with transaction.atomic():
                        rows = model._default_manager.filter(pk=pk)
                        seen = rows.values().first() if first is not None else None
                        if first is not None and seen is not None:  # a missing row is the view's 404
                            assert input_serializer is not None, "first needs the serializer of its data"
                            # Validated (again by the view): a refused body is its 400, with no lock taken.
                            serializer = input_serializer(data=request.data, partial=kwargs.get("partial", False))
                            first(input_validate(serializer), model(**seen))
                        stored = rows.select_for_update(no_key=True).values().first()
                        if stored != seen and first is not None and attempt < _LOCKED_UPDATE_ATTEMPTS:
                            raise _RowMoved
                        return view(request, pk, *args, **kwargs)
                except _RowMoved:
                    continue
            raise AssertionError("unreachable: the last attempt goes ahead")

        return locked

    return wrap


def api_endpoint(*operations: type[APIView]) -> Callable[..., Any]:
    """Serve one URL with several single-operation APIViews, each handling its own HTTP method(s).

    The combined class only routes methods; operations name their own nested serializers by class
    (`ChainCreateApi.InputSerializer`), because `self.InputSerializer` would find the first operation's.
    """
    combined: type[APIView] = type(
        "".join(op.__name__ for op in operations), operations, {"__doc__": operations[0].__doc__}
    )
    view: Callable[..., Any] = combined.as_view()
    return view


class StrictBooleanField(serializers.BooleanField):
    """JSON true/false only: "yes", 1 or "false" are refused instead of guessed."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid")
        raise AssertionError  # unreachable: fail() raises


# A nested object that an answer may give as null (use it with allow_null=True). drf-spectacular declares a nullable
# nested serializer as `{"allOf": [{"$ref": ...}], "nullable": true}`, and OpenAPI 3.0.3 lets `nullable` add null
# only next to a `type` in the same schema object, so strict validators and SDK generators refuse the null the API
# sends. This one is declared the way drf-spectacular declares a nullable choice:
# `{"oneOf": [{"$ref": ...}, {"$ref": "#/components/schemas/NullEnum"}], "nullable": true}`.
# (Comments, not a docstring: the schema would show a docstring as every subclass's description.)
class NullableObjectSerializer(serializers.Serializer):
    pass


class _NullableObjectSchema(OpenApiSerializerFieldExtension):
    target_class = NullableObjectSerializer
    match_subclasses = True

    def map_serializer_field(self, auto_schema: "AutoSchema", direction: Any) -> dict[str, Any]:
        component = auto_schema.resolve_serializer(self.target, direction)
        if not self.target.allow_null:
            return dict(component.ref)
        # The component drf-spectacular's enum hook makes for a nullable choice; the same object, so no collision.
        name = f"Null{spectacular_settings.ENUM_SUFFIX}"
        null = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, schema={"enum": [None]}, object=name)
        auto_schema.registry.register_on_missing(null)
        return {"oneOf": [component.ref, null.ref]}


# The answer every API error has (the exception handler above; DRF's own for 401, 403 and 404).
API_ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "detail": {"type": "string", "description": "What went wrong, in a sentence."},
        "errors": {
            "type": "object",
            "description": "Messages per field (dotted paths such as entries.0.model; __all__ for the whole input).",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["detail"],
}
_ERROR_DESCRIPTIONS = {
    "400": "Invalid input: `errors` names each field.",
    "401": "No valid credentials.",
    "403": "The caller's role may not do this.",
    "404": "No such object (or page).",
    "409": "Conflicts with the current state: a stale version, an object still referenced, a hold already set.",
    "413": "The request body is over the size limit.",
    "415": "The body is not JSON (the API takes application/json only).",
    "429": "Too many failed token checks from this address: wait the seconds `Retry-After` gives.",
    "503": "A service this operation needs is unreachable (the breaker's Redis); nothing was changed.",
}
# Errors an operation answers beyond what the rules in declare_error_responses give it.
_EXTRA_ERRORS = {
    "circuit_release": ("404",),  # nothing held to release
    "circuit_reset": ("503",),  # Redis unreachable: a reset of this process's state alone would be undone
}


def declare_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: declare each operation's error answers, so generated SDKs know them.

    Every operation may answer 401, 403 and 429 (a token locked out); one with a body or query parameters 400;
    one with path parameters or pages 404; every write 409, and with a body 413 and 415. What a view declares
    itself is kept. (406, for an `Accept` other than JSON, is left out: no JSON client asks for another type.)
    """
    result.setdefault("components", {}).setdefault("schemas", {})["ApiError"] = copy.deepcopy(API_ERROR_SCHEMA)
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            query = {p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"}
            has_body = "requestBody" in operation
            codes = ["401", "403", "429"]
            if has_body or query:
                codes.append("400")
            if "{" in path or "page" in query:
                codes.append("404")
            if method != "get":
                codes.append("409")
                if has_body:
                    codes.extend(("413", "415"))
            codes.extend(_EXTRA_ERRORS.get(operation.get("operationId", ""), ()))
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(
                    code,
                    {
                        "description": _ERROR_DESCRIPTIONS[code],
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApiError"}}},
                    },
                )
    return result
