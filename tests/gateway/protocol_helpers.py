"""A catalog whose primary model is served over one of the three upstream protocols, all at the simulator.

The chain `gpt-4o chain` (the name `resilience_helpers.rig()` sets its policy on) is: the primary `gpt-4o`
on provider `primary` (protocol `openai`, `anthropic` or `azure`) → `fallback` on the OpenAI provider
`backup` (the same 8k context window, no prefill) → `claude-long` on the Anthropic provider `claude`
(a larger window and `assistant_prefill`), so one chain shows a plain move (to `backup`), a move to a
larger window only, and a continuation into an Anthropic upstream (both to `claude`).
"""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from catalog.models import LlmModel, Provider
from chains.services import ChainInput, EntryInput, chain_create
from gateway.simulator import Simulator
from tests.factories import LlmModelFactory, ProviderFactory, UserFactory
from tests.factories.keys import make_key

PROTOCOLS = ("openai", "anthropic", "azure")
# Azure calls a deployment; the simulator answers with its name as the `model`.
AZURE_DEPLOYMENT = "prod-gpt4o"
SMALL_WINDOW = 8192
LARGE_WINDOW = 200_000


@dataclass
class ProtocolWorld:
    """What `resilience_helpers.rig()` needs (`sim`, `secret`), and which protocol the primary speaks."""

    sim: Simulator
    sim_url: str
    secret: str
    protocol: str

    @property
    def served_as(self) -> str:
        """The `model` the primary's answers carry (Azure's is its deployment)."""
        return AZURE_DEPLOYMENT if self.protocol == "azure" else "gpt-4o"


def provider(name: str, protocol: str, sim_url: str) -> Provider:
    """A provider at the simulator, its base URL in the shape its protocol expects."""
    extra: dict[str, Any] = {}
    base = f"{sim_url}/{name}"
    if protocol == "openai":
        base = f"{base}/v1"
    elif protocol == "azure":
        extra = {"api_version": "2024-10-21", "deployments": {"gpt-4o": AZURE_DEPLOYMENT}}
    # factory_boy's factories are untyped: calling one gives the model instance.
    return cast(
        Provider,
        ProviderFactory(
            name=name,
            protocol=protocol,
            base_url=base,
            api_key=f"sk-{name}",
            connect_timeout=2,
            read_timeout=5,
            **extra,
        ),
    )


def model(name: str, on: Provider, *, window: int, prefill: bool = False) -> LlmModel:
    capabilities = ["text", "assistant_prefill"] if prefill else ["text"]
    created = LlmModelFactory(
        name=name,
        provider=on,
        capabilities=capabilities,
        context_window=window,
        input_price_per_mtok=Decimal("1"),
        output_price_per_mtok=Decimal("2"),
    )
    return cast(LlmModel, created)


def build_world(sim: Simulator, sim_url: str, protocol: str) -> ProtocolWorld:
    model("gpt-4o", provider("primary", protocol, sim_url), window=SMALL_WINDOW)
    model("fallback", provider("backup", "openai", sim_url), window=SMALL_WINDOW)
    model("claude-long", provider("claude", "anthropic", sim_url), window=LARGE_WINDOW, prefill=True)
    chain_create(
        actor=None,
        data=ChainInput(
            name="gpt-4o chain", source_model="gpt-4o", entries=[EntryInput("fallback"), EntryInput("claude-long")]
        ),
    )
    created = make_key(user=UserFactory())
    return ProtocolWorld(sim=sim, sim_url=sim_url, secret=created.secret, protocol=protocol)


def overload_status(protocol: str) -> int:
    """How each protocol says "overloaded": Anthropic's own 529, an OpenAI-shaped 503."""
    return 529 if protocol == "anthropic" else 503


def cut_after_first_token(protocol: str) -> int:
    """`fail_after_chunks` that lets exactly the first word through: OpenAI streams a role chunk first;
    Anthropic streams `message_start`, `content_block_start` and `ping` first."""
    return 4 if protocol == "anthropic" else 2
