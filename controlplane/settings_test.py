"""Test overrides: fast hasher, eager Celery. Services come from DATABASE_URL/REDIS_URL."""

import os
import secrets
import tempfile

# Tests run in "production" mode when REDIS_URL is set; give them a throwaway key.
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
# Each test run gets its own breaker keys in the shared Redis, so concurrent runs never meet.
os.environ.setdefault("BREAKER_REDIS_NAMESPACE", f"test:breaker:{os.getpid()}")

from controlplane.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
# Tests run the periodic jobs themselves (EmbeddedScheduler.run_due), never on a timer.
EMBEDDED_PERIODIC_JOBS = False
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# The test client speaks plain http; tests/deploy/test_deploy_check.py checks the production values.
SECURE_SSL_REDIRECT = False
# No collectstatic in tests: serve and resolve static files from the source folders.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT = None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file (WAL) rather than shared-cache memory, so threads see the same locking as embedded mode.
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": os.path.join(tempfile.gettempdir(), f"controlplane-test-{os.getpid()}.sqlite3")
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # Django's flush between transactional tests truncates every table; the audit log's TRUNCATE trigger lets a
    # session that asks do so (audit/migrations/0005_refuse_truncate.py).
    _options = DATABASES["default"].setdefault("OPTIONS", {})  # noqa: F405
    _options["options"] = f"{_options.get('options', '')} -c audit.allow_truncate=on".strip()
