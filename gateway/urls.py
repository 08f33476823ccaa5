"""URLconf of a gateway process: empty. The data plane is the ASGI app in gateway/app.py, not Django
views; the console's URLs need apps (admin, DRF) a gateway process does not load."""

urlpatterns: list = []
