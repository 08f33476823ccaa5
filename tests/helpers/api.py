"""JSON request helpers for API tests."""


def post_json(client, url, body, **kwargs):
    return client.post(url, body, content_type="application/json", **kwargs)


def put_json(client, url, body, **kwargs):
    return client.put(url, body, content_type="application/json", **kwargs)


def patch_json(client, url, body, **kwargs):
    return client.patch(url, body, content_type="application/json", **kwargs)
