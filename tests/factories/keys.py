from catalog.services import CreatedKey, api_key_create


def make_key(*, user, actor=None, name="test key", **scope) -> CreatedKey:
    """Issue a real gateway key through the service."""
    return api_key_create(actor=actor, name=name, user=user, **scope)
