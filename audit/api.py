"""Audit log API: read only, for the admin and bi_read_only roles."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.selectors import audit_event_list
from core.api import StandardPagination, input_validate, paginated_response
from core.permissions import IsAuditReader


class AuditEventListApi(APIView):
    """Audit events newest first, filtered by exact actor, action, object type and object id."""

    permission_classes = [IsAuditReader]
    pagination_class = StandardPagination

    class FilterSerializer(serializers.Serializer):
        actor = serializers.CharField(required=False, allow_blank=True, default="", help_text="Username.")
        action = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. chain.update")
        object_type = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. chain")
        object_id = serializers.CharField(required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "AuditEventFilter"

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        created_at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor_name")
        action = serializers.CharField()
        object_type = serializers.CharField()
        object_id = serializers.CharField()
        object_repr = serializers.CharField()
        before = serializers.JSONField(allow_null=True)
        after = serializers.JSONField(allow_null=True)
        prev_hash = serializers.CharField()
        hash = serializers.CharField()

        class Meta:
            ref_name = "AuditEvent"

    @extend_schema(
        operation_id="audit_event_list", parameters=[FilterSerializer], responses=OutputSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        filters = input_validate(AuditEventListApi.FilterSerializer(data=request.query_params))
        events = audit_event_list(**filters)
        return paginated_response(
            request=request, view=self, queryset=events, serializer_class=AuditEventListApi.OutputSerializer
        )
