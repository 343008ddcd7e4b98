"""The docs say what the code does: every option of ``relay serve`` and ``transceiver serve`` is in
its doc's option table (with its environment variable and default), every drop, eviction and end
reason the code counts is named, and every link between the docs leads to a file of this
repository."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from relay.cli import main as relay_main
from relay.counters import DROP_REASONS
from relay.flows import EVICTIONS
from transceiver.backends.realtime.policy import DEFAULT_ALLOWED
from transceiver.call.lifecycle import END_REASONS
from transceiver.cli import main as transceiver_main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def section(doc: Path, title: str) -> str:
    """The text of the ``## title`` section of ``doc``, up to the next ``## ``."""
    text = doc.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def option_table(doc: Path) -> dict[str, tuple[str, str]]:
    """Option name -> (its environment variable, its default in backticks or ""), from the
    ``## Options`` table of ``doc``."""
    rows = {}
    for line in section(doc, "Options").splitlines():
        if not line.startswith("| `--"):
            continue
        first, env, default = line.split("|")[1:4]
        variable = re.search(r"`(RTCEDGE_[A-Z_]+)`", env)
        value = re.search(r"`([^`]+)`", default)
        for name in re.findall(r"`(--[a-z-]+)`", first):
            rows[name] = (variable.group(1) if variable else "", value.group(1) if value else "")
    return rows


def command_options(group: click.Group) -> dict[str, click.Option]:
    """Option name -> its click option, as ``serve --help`` lists them (``--help`` aside)."""
    serve = group.commands["serve"]
    return {
        name: param
        for param in serve.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
        if name != "--help"
    }


def shown(default: object) -> str:
    """A default as the tables write it: 10.0 -> 10, 4 * 3600.0 -> 14400."""
    return f"{default:g}" if isinstance(default, float) else str(default)


@pytest.mark.parametrize(
    ("group", "doc"),
    [(relay_main, "relay.md"), (transceiver_main, "transceiver.md")],
    ids=["relay", "transceiver"],
)
def test_every_serve_option_is_in_its_docs_option_table_with_its_environment_variable(group, doc):
    documented = option_table(DOCS / doc)
    options = command_options(group)
    assert sorted(set(options) - set(documented)) == [], f"options missing from docs/{doc}"
    assert sorted(set(documented) - set(options)) == [], f"docs/{doc} names options serve lacks"
    variables = {name: option.envvar for name, option in options.items()}
    assert {name: row[0] for name, row in documented.items()} == variables, f"docs/{doc}"
    wrong = {
        name: (value, shown(options[name].default))
        for name, (_, value) in documented.items()
        if value and value != shown(options[name].default)
    }
    assert wrong == {}, f"defaults in docs/{doc} (documented, actual)"


def test_every_relay_drop_reason_and_eviction_scope_is_documented():
    metrics = section(DOCS / "relay.md", "Metrics (`/metrics`)")
    assert [r for r in DROP_REASONS if f"`{r}`" not in metrics] == []
    for table, scope in EVICTIONS:
        assert re.search(rf"`{table}` by [^;|]*`{scope}`", metrics), (table, scope)


def test_every_session_end_reason_is_in_the_transceiver_docs_table():
    ends = section(DOCS / "transceiver.md", "How a session ends")
    rows = {m for line in ends.splitlines() for m in re.findall(r"^\| `([a-z_]+)`", line)}
    rows |= set(re.findall(r"^\| `[a-z_]+` / `([a-z_]+)`", ends, re.MULTILINE))
    assert rows == set(END_REASONS)


def test_links_between_the_docs_lead_to_files_of_this_repository():
    broken = []
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_points_at_no_file_outside_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "../" not in readme and "DESIGN.md" not in readme
    assert (DOCS / "design.md").exists()


def test_the_realtime_docs_list_the_default_caller_allowlist_as_the_code_has_it():
    allowed = section(DOCS / "realtime.md", "What a caller may send")
    rows = {}
    for line in allowed.splitlines():
        found = re.match(r"^\| `([a-z_.]+)` \| (.*) \|$", line)
        if found:
            rows[found.group(1)] = tuple(re.findall(r"`([a-z_.]+)`", found.group(2)))
    assert rows == dict(DEFAULT_ALLOWED)


def test_every_option_the_realtime_docs_name_is_an_option_of_transceiver_serve():
    text = (DOCS / "realtime.md").read_text()
    options = command_options(transceiver_main)
    named = set(re.findall(r"`(--[a-z][a-z-]+)", text))
    assert sorted(named - set(options)) == []
    for name in ("--backend-url", "--backend-key-file", "--realtime-policy-file", "--audio-rate"):
        assert name in named


def anchors(doc: Path) -> set[str]:
    """The anchors of ``doc``'s headings as GitHub makes them: lower case, punctuation dropped,
    spaces to ``-`` (headings inside code blocks are not headings)."""
    prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.MULTILINE | re.DOTALL)
    titles = re.findall(r"^#+ (.+)$", prose, re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-") for title in titles}


def test_links_to_a_section_of_a_doc_name_one_of_its_headings():
    broken = []
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text()):
            if "://" in target:
                continue
            linked = (doc.parent / target) if target else doc
            if linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{doc.relative_to(ROOT)} -> {target}#{anchor}")
    assert broken == []
