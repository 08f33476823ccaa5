"""axe-core in the browser tests: serious and critical violations of a page, in light and dark themes.

axe comes from `vendor/axe.min.js` (see the README there), installed as an init script: the console's strict
CSP refuses injected <script> tags, while init scripts run outside it, and nothing is downloaded at run time.
Each check collects what it found instead of failing at once, so one run lists every page's problems.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from playwright.sync_api import BrowserContext, Page

AXE_SOURCE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
# The two impacts the issue forbids; "moderate" and "minor" are reported by axe but not asserted.
BLOCKING = frozenset({"serious", "critical"})
THEMES: tuple[Literal["light", "dark"], ...] = ("light", "dark")
# Selectors shown per rule in a failure message: enough to find the element, short enough to read.
TARGETS_SHOWN = 4

# Finite animations only: a spinner's infinite one never finishes. Colours mid-transition would give a
# contrast the user never sees once the page has settled.
_SETTLE = """() => Promise.all(document.getAnimations()
    .filter((a) => a.effect && a.effect.getComputedTiming().endTime !== Infinity)
    .map((a) => a.finished.catch(() => null)))"""
_RUN = "() => axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations)"


def install_axe(context: BrowserContext) -> None:
    """Make `axe` available on every page the context opens from now on."""
    context.add_init_script(path=AXE_SOURCE)


def blocking_violations(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe finds on the page as it is now (after animations finish)."""
    page.evaluate(_SETTLE)
    violations: list[dict[str, Any]] = page.evaluate(_RUN)
    return [v for v in violations if v.get("impact") in BLOCKING]


def describe(violation: dict[str, Any]) -> str:
    """One line a reader can act on: impact, rule id, axe's help, the first few offending selectors."""
    targets = [" ".join(str(part) for part in node["target"]) for node in violation["nodes"]]
    more = len(targets) - TARGETS_SHOWN
    shown = ", ".join(targets[:TARGETS_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
    return f"{violation['impact']} {violation['id']}: {violation['help']} — {shown}"


@dataclass
class AxeAudit:
    """Checks pages in both themes and remembers every blocking violation, labelled by page and theme."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def check(self, page: Page, label: str) -> None:
        """Run axe on the page in light, then dark, and leave the page in the light theme."""
        try:
            for theme in THEMES:
                page.emulate_media(color_scheme=theme)
                found = blocking_violations(page)
                self.problems.extend(f"[{label} · {theme}] {describe(v)}" for v in found)
                self.checked.append(f"{label} · {theme}")
        finally:
            page.emulate_media(color_scheme="light")

    def report(self) -> str:
        """The assertion message: every problem, one a line."""
        return f"{len(self.problems)} serious/critical axe violation(s):\n" + "\n".join(self.problems)
