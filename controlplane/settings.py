"""Control Plane settings, read from the environment.

Defaults run a fresh checkout in embedded mode (SQLite file under var/, no Redis).
DATABASE_URL and REDIS_URL switch the backends and nothing else changes.
"""

import ipaddress
import secrets
from pathlib import Path

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from controlplane.env import env_bool, env_int, env_list, env_proxy_ssl_header, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CONTROLPLANE_VAR_DIR", str(BASE_DIR / "var")))

REDIS_URL = env_str("REDIS_URL")
# Embedded mode: no Redis, the console and gateway share one process.
EMBEDDED = not REDIS_URL
ENVIRONMENT_NAME = env_str("ENVIRONMENT_NAME", "embedded" if EMBEDDED else "production")

DEBUG = env_bool("DEBUG", False)
# Where demo providers point (the simulator started by `make run`).
SIMULATOR_URL = env_str("SIMULATOR_URL", "http://127.0.0.1:8001")


def _secret_key() -> str:
    key = env_secret("SECRET_KEY")
    if key:
        return key
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) must be set when REDIS_URL is set (production mode)."
        )
    # Embedded mode: generate one once and keep it beside the SQLite file.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
# Fernet keys (comma separated, newest first) for secrets at rest; derived from SECRET_KEY when unset.
FIELD_ENCRYPTION_KEYS = env_list("FIELD_ENCRYPTION_KEYS", [])
for _position, _key in enumerate(FIELD_ENCRYPTION_KEYS, start=1):
    # Checked here, not at the first encrypt: a malformed key made every stored provider key read as
    # undecryptable and every save fail. The message names the entry, never its value (a secret).
    try:
        Fernet(_key)
    except ValueError:
        raise ImproperlyConfigured(
            f"FIELD_ENCRYPTION_KEYS: entry {_position} is not a Fernet key (32 url-safe base64-encoded bytes, "
            "e.g. from `python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`)."
        ) from None
    del _key
# Previous SECRET_KEYs (comma separated) while rotating: old sessions and signatures stay valid, and
# provider API keys encrypted under a key derived from one of them still decrypt.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
if not ALLOWED_HOSTS:
    # Set but empty: Django would refuse every request's Host (400) once DEBUG is off.
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS is set but empty: list the host names the console is served under, or unset it "
        "for the loopback default"
    )
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

GATEWAY_PROCESS = env_str("CONTROLPLANE_PROCESS") == "gateway"
# Embedded mode runs the periodic jobs (controlplane.periodic) in a thread of its one process.
EMBEDDED_PERIODIC_JOBS = env_bool("EMBEDDED_PERIODIC_JOBS", True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "drf_spectacular",
    "controlplane",
    "core",
    "audit",
    "access",
    "catalog",
    "routing",
    "chains",
    "health",
    "gateway",
    "requestlogs",
    "alerts",
    "dashboards",
    "demo",
]

if GATEWAY_PROCESS:
    # The data plane needs the ORM models (to build its snapshot), not the console's apps.
    INSTALLED_APPS = [
        app
        for app in INSTALLED_APPS
        if not app.startswith(
            (
                "django.contrib.admin",
                "django.contrib.messages",
                "django.contrib.sessions",
                "django.contrib.staticfiles",
                "django_htmx",
                "rest_framework",
                "drf_spectacular",
                "access",
                "alerts",
                "dashboards",
                "demo",
            )
        )
    ]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.HtmxMessagesMiddleware",
    "core.middleware.ConcurrentAbortMiddleware",
]

ROOT_URLCONF = "gateway.urls" if GATEWAY_PROCESS else "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.context_processors.console",
                "alerts.context_processors.alerts",
            ],
        },
    },
]

_default_sqlite = f"sqlite:///{VAR_DIR / 'controlplane.sqlite3'}"
DATABASE_URL = env_str("DATABASE_URL") or _default_sqlite
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60))}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is malformed: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if DATABASE_URL == _default_sqlite:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets the console read while the log writer commits; IMMEDIATE avoids
        # "database is locked" when a read transaction upgrades to a write.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
        "transaction_mode": "IMMEDIATE",
    }

elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # libpq waits for a connection as long as the kernel does (minutes, when packets to the database are dropped):
    # the gateway's snapshot rebuild and its shutdown, and every console request, would wait with it. A
    # `connect_timeout` in DATABASE_URL's query wins.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The cache holds small things every console page may read (the alert banner): a Redis that accepts connections
# and never answers must cost a page a quarter of a second, not redis-py's 5 s per call.
CACHE_REDIS_OPTIONS = {"socket_timeout": 0.25, "socket_connect_timeout": 0.25}
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": CACHE_REDIS_OPTIONS,
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# Throttling of sign-in (console and admin) and console API token failures (access app; README, Configuration):
# AUTH_FAILURE_LIMIT failures within AUTH_FAILURE_WINDOW_SECONDS lock the account name and the client address
# for AUTH_LOCKOUT_SECONDS. The client address is REMOTE_ADDR; with TRUSTED_PROXY_COUNT = N it is the address
# N entries from the right of X-Forwarded-For (set it only behind that many proxies that append to the header).
AUTH_FAILURE_LIMIT = env_int("AUTH_FAILURE_LIMIT", 5)
AUTH_FAILURE_WINDOW_SECONDS = env_int("AUTH_FAILURE_WINDOW_SECONDS", 15 * 60)
AUTH_LOCKOUT_SECONDS = env_int("AUTH_LOCKOUT_SECONDS", 15 * 60)
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
if min(AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_SECONDS, AUTH_LOCKOUT_SECONDS) < 1 or TRUSTED_PROXY_COUNT < 0:
    raise ImproperlyConfigured(
        "AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_SECONDS and AUTH_LOCKOUT_SECONDS must be at least 1, "
        "TRUSTED_PROXY_COUNT 0 or more."
    )

# GET /metrics (gateway and console; docs/metrics.md) answers clients whose address is in one of these networks
# (comma-separated CIDRs, default loopback), or that send an admin console API token. The gateway checks the TCP
# peer's address, never X-Forwarded-For; the console checks the address throttling counts (TRUSTED_PROXY_COUNT-aware,
# access.client.client_ip), so a proxy on the same host does not make every client loopback (docs/decisions.md).
METRICS_ALLOWED_NETWORKS = env_list("METRICS_ALLOWED_NETWORKS", ["127.0.0.0/8", "::1/128"])
for _network in METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_NETWORKS: {_network!r} is not a CIDR network.") from None

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# collectstatic target in production; embedded mode serves from the source folders instead.
STATIC_ROOT = None if EMBEDDED else BASE_DIR / "staticfiles"
# Embedded mode serves static files straight from the source folders (no collectstatic step).
WHITENOISE_USE_FINDERS = EMBEDDED or DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if EMBEDDED
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Transport security. Production runs behind a TLS-terminating proxy (README, Configuration), so
# everything is on by default there; embedded mode (`make run`: plain http on 127.0.0.1) turns it off.
_TLS_DEFAULT = not EMBEDDED and not DEBUG
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", _TLS_DEFAULT)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Console requests over http get a 301 to https. The gateway's /v1, /healthz and /readyz are served
# by its own ASGI app, never by Django's middleware, so load-balancer health checks are not redirected.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _TLS_DEFAULT)
# ("HTTP_X_FORWARDED_PROTO", "https") from SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https": the
# header the proxy sets to say the client spoke https. Without it a proxied request looks like http.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if _TLS_DEFAULT else 0)
if SECURE_HSTS_SECONDS < 0:
    # A negative max-age passes check --deploy (it asks for non-zero) and browsers ignore the header it makes.
    raise ImproperlyConfigured(f"SECURE_HSTS_SECONDS must be 0 or more (0 sends no HSTS), got {SECURE_HSTS_SECONDS}.")
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _TLS_DEFAULT)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", _TLS_DEFAULT)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# Strict CSP: no inline script or style anywhere in the console.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "catalog.authentication.ConsoleTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.permissions.IsAdminRole"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # The API takes JSON only: a form-encoded or multipart body is a 415 naming its type. (Forms flatten
    # nested objects, a chain's entries and scope, into keys the views do not read.)
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    # Non-ASCII characters escaped in answers, so a lone surrogate echoed in an error message (an unknown
    # knob's name) still encodes: the 400 stays a 400.
    "UNICODE_JSON": False,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Control Plane API",
    "DESCRIPTION": "Configuration API of the Control Plane LLM gateway.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {
        "AlertRuleKindEnum": "alerts.models.RuleKind",
        "CircuitHoldKindEnum": "health.models.CircuitControl.Kind",
        "CircuitEventKindEnum": "health.models.CircuitEvent.Kind",
    },
    # The default enum hook, then every operation's error answers (core.api.declare_error_responses).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.declare_error_responses",
    ],
}

# Prefix of the breaker's Redis keys and channels (several deployments may share one Redis).
BREAKER_REDIS_NAMESPACE = env_str("BREAKER_REDIS_NAMESPACE", "cp:breaker")
REQUEST_LOG_RETENTION_DAYS = env_int("REQUEST_LOG_RETENTION_DAYS", 30)
# The Dashboard's per-minute and per-hour request aggregates (docs/dashboard.md): days kept by the retention job.
REQUEST_AGGREGATE_MINUTE_DAYS = env_int("REQUEST_AGGREGATE_MINUTE_DAYS", 8)
REQUEST_AGGREGATE_HOUR_DAYS = env_int("REQUEST_AGGREGATE_HOUR_DAYS", 90)
# 0 or less would put the hourly retention job's cutoff at now or later: everything deleted.
for _name in ("REQUEST_LOG_RETENTION_DAYS", "REQUEST_AGGREGATE_MINUTE_DAYS", "REQUEST_AGGREGATE_HOUR_DAYS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}.")
# Circuit history (CircuitEvent): days kept by the daily retention job; each circuit's last state is kept.
CIRCUIT_EVENT_RETENTION_DAYS = env_int("CIRCUIT_EVENT_RETENTION_DAYS", 90)
if CIRCUIT_EVENT_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("CIRCUIT_EVENT_RETENTION_DAYS must be at least 1.")
# Production: the Redis stream the gateways append request logs to and the ingest task drains.
REQUEST_LOG_STREAM = env_str("REQUEST_LOG_STREAM", "cp:requestlogs")
# Cap on that stream, in records (about 790 bytes each in Redis: the default is ~0.8 GiB, some 80 minutes
# of a PostgreSQL outage at 200 requests/s). Records trimmed before they were ingested are counted and
# reported (Request Logs page, /metrics, /readyz). 0 = no cap.
REQUEST_LOG_STREAM_MAXLEN = env_int("REQUEST_LOG_STREAM_MAXLEN", 1_000_000)
# A batch a dead ingest worker left unacknowledged is taken over by another after this long.
REQUEST_LOG_CLAIM_IDLE_SECONDS = env_int("REQUEST_LOG_CLAIM_IDLE_SECONDS", 15)
if REQUEST_LOG_STREAM_MAXLEN < 0 or REQUEST_LOG_CLAIM_IDLE_SECONDS < 1:
    raise ImproperlyConfigured(
        "REQUEST_LOG_STREAM_MAXLEN must be 0 or more and REQUEST_LOG_CLAIM_IDLE_SECONDS at least 1."
    )
# A gateway stopped while it cannot write its request logs spills them here; the next start replays them.
REQUEST_LOG_SPILL_DIR = VAR_DIR / "requestlog-spill"
GATEWAY_MAX_BODY_BYTES = env_int("GATEWAY_MAX_BODY_BYTES", 10 * 1024 * 1024)
GATEWAY_DEADLINE_SECONDS = env_int("GATEWAY_DEADLINE_SECONDS", 300)
# Bounds on a chat request's structure, checked before the body is parsed where a hostile body could
# multiply memory (gateway/bodies.py; defaults are the OpenAI API's own limits or above them).
GATEWAY_MAX_MESSAGES = env_int("GATEWAY_MAX_MESSAGES", 2048)
GATEWAY_MAX_CONTENT_PARTS = env_int("GATEWAY_MAX_CONTENT_PARTS", 2048)
GATEWAY_MAX_TOOLS = env_int("GATEWAY_MAX_TOOLS", 128)
GATEWAY_MAX_JSON_DEPTH = env_int("GATEWAY_MAX_JSON_DEPTH", 64)
GATEWAY_MAX_JSON_VALUES = env_int("GATEWAY_MAX_JSON_VALUES", 100_000)
GATEWAY_MAX_STRING_CHARS = env_int("GATEWAY_MAX_STRING_CHARS", 10 * 1024 * 1024)
# Bytes of large bodies (over 256 KiB) one gateway worker holds at once; more wait their turn.
GATEWAY_BODY_BUFFER_BYTES = env_int("GATEWAY_BODY_BUFFER_BYTES", 64 * 1024 * 1024)
# A client must send its whole body within this many seconds, or gets a 408 (a 10 MiB body needs 350 KB/s).
GATEWAY_BODY_READ_TIMEOUT_SECONDS = env_int("GATEWAY_BODY_READ_TIMEOUT_SECONDS", 30)
# Once a gateway has started, what it loaded is frozen out of the cyclic collector's view and a young collection
# runs every this many net container allocations (CPython's default is 700): gateway/heap.py. 0 = CPython's defaults.
GATEWAY_GC_YOUNG_THRESHOLD = env_int("GATEWAY_GC_YOUNG_THRESHOLD", 20_000)
if GATEWAY_GC_YOUNG_THRESHOLD < 0:
    raise ImproperlyConfigured(f"GATEWAY_GC_YOUNG_THRESHOLD must be 0 or more, got {GATEWAY_GC_YOUNG_THRESHOLD}.")
for _name in (
    "GATEWAY_MAX_BODY_BYTES",
    "GATEWAY_DEADLINE_SECONDS",
    "GATEWAY_MAX_MESSAGES",
    "GATEWAY_MAX_CONTENT_PARTS",
    "GATEWAY_MAX_TOOLS",
    "GATEWAY_MAX_JSON_DEPTH",
    "GATEWAY_MAX_JSON_VALUES",
    "GATEWAY_MAX_STRING_CHARS",
    "GATEWAY_BODY_BUFFER_BYTES",
    "GATEWAY_BODY_READ_TIMEOUT_SECONDS",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}.")
# A half-open probe that never reports frees its slot after this long. It must outlast the upstream deadline by a
# margin (the probe's outcome is recorded after the deadline fires), or a slow but live probe would lose its slot
# to a second probe (docs/breaker.md).
BREAKER_PROBE_MARGIN_SECONDS = 5
BREAKER_PROBE_TIMEOUT_SECONDS = env_int("BREAKER_PROBE_TIMEOUT_SECONDS", GATEWAY_DEADLINE_SECONDS + 30)
if BREAKER_PROBE_TIMEOUT_SECONDS < GATEWAY_DEADLINE_SECONDS + BREAKER_PROBE_MARGIN_SECONDS:
    raise ImproperlyConfigured(
        f"BREAKER_PROBE_TIMEOUT_SECONDS ({BREAKER_PROBE_TIMEOUT_SECONDS}) must be at least "
        f"GATEWAY_DEADLINE_SECONDS + {BREAKER_PROBE_MARGIN_SECONDS} "
        f"({GATEWAY_DEADLINE_SECONDS + BREAKER_PROBE_MARGIN_SECONDS}): a probe still waiting for its upstream "
        "would lose its half-open slot to a second probe."
    )

# Alerts (docs/alerts.md): webhook POST timeout, tries before a delivery is given up, the retry backoff (base
# doubling up to the cap), and the console address the notifications link back to.
ALERT_WEBHOOK_TIMEOUT_SECONDS = env_int("ALERT_WEBHOOK_TIMEOUT_SECONDS", 5)
ALERT_WEBHOOK_MAX_ATTEMPTS = env_int("ALERT_WEBHOOK_MAX_ATTEMPTS", 5)
ALERT_WEBHOOK_BACKOFF_SECONDS = env_int("ALERT_WEBHOOK_BACKOFF_SECONDS", 10)
ALERT_WEBHOOK_BACKOFF_CAP_SECONDS = env_int("ALERT_WEBHOOK_BACKOFF_CAP_SECONDS", 600)
ALERT_CONSOLE_URL = env_str("ALERT_CONSOLE_URL", "http://127.0.0.1:8000").rstrip("/")
if min(ALERT_WEBHOOK_TIMEOUT_SECONDS, ALERT_WEBHOOK_MAX_ATTEMPTS, ALERT_WEBHOOK_BACKOFF_SECONDS) < 1:
    raise ImproperlyConfigured(
        "ALERT_WEBHOOK_TIMEOUT_SECONDS, ALERT_WEBHOOK_MAX_ATTEMPTS and ALERT_WEBHOOK_BACKOFF_SECONDS "
        "must be at least 1."
    )

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = EMBEDDED
CELERY_TASK_IGNORE_RESULT = True
# The broker queue beat publishes to and workers read; one per deployment sharing a Redis.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "celery")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # One INFO line per upstream call would cost more than the gateway itself.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
