# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The docs name only config keys that exist and link only to files and headings that exist
(issue 44): `clipo.denominator` in docs/method.md was a key no config had, so a reader who
copied it got an error instead of the variant it described."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from clipo_megatron.core.config import ClipoBlock, CLIPOConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
KEY = re.compile(r"(?<![\w./:-])clipo((?:\.[A-Za-z_]\w*)+)(\(?)")
FILE_SUFFIXES = {"yaml", "yml", "py", "md", "json", "pt"}
# Keys the docs name because they are refused: each must stay absent from the config.
REFUSED = {"clipo.method.enabled"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _code(text: str) -> list[str]:
    """The fenced blocks and the inline code spans of a markdown text."""
    blocks = FENCE.findall(text)
    return blocks + INLINE.findall(FENCE.sub("", text))


def documented_keys(text: str) -> set[str]:
    """Every dotted `clipo.*` name in the code of `text`, less file names and calls."""
    keys = set()
    for span in _code(text):
        for m in KEY.finditer(span):
            name = "clipo" + m.group(1)
            if m.group(2) or name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue  # clipo.is_correct(...) is a function, clipo.yaml a file
            keys.add(name)
    return keys


def _dotted(node: object, prefix: str) -> set[str]:
    out = {prefix}
    if isinstance(node, dict):
        for k, v in node.items():
            out |= _dotted(v, f"{prefix}.{k}")
    return out


def config_keys() -> set[str]:
    """The `clipo:` block as the shipped mixin writes it, plus every field of its dataclasses."""
    mixin = OmegaConf.load(ROOT / "clipo_megatron" / "configs" / "clipo.yaml")
    keys = _dotted(OmegaConf.to_container(mixin.clipo, resolve=False), "clipo")
    keys |= {f"clipo.{f.name}" for f in dataclasses.fields(ClipoBlock)}
    keys |= {f"clipo.method.{f.name}" for f in dataclasses.fields(CLIPOConfig)}
    return keys


def test_the_mixin_and_the_dataclasses_name_the_method_block():
    keys = config_keys()
    assert {"clipo.enabled", "clipo.method.denominator", "clipo.method.temperature"} <= keys
    assert "clipo.denominator" not in keys and not REFUSED & keys


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_clipo_key_exists(doc):
    wrong = sorted(documented_keys(doc.read_text(encoding="utf-8")) - config_keys() - REFUSED)
    assert not wrong, f"{doc.relative_to(ROOT)} names keys the config does not have: {wrong}"


def test_the_extractor_finds_keys_and_skips_files_and_calls():
    text = "`clipo.method.temperature=0.02` `clipo_megatron:clipo.yaml` `clipo.is_correct(r)`\n"
    text += "```bash\npython x.py clipo.enabled=false +clipo.objective=dapo cfg.clipo.x=1\n```\n"
    assert documented_keys(text) == {"clipo.method.temperature", "clipo.enabled", "clipo.objective"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = _slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_reaches_its_file_and_heading(doc):
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not this test's business (no network)
        rel, _, anchor = target.partition("#")
        path = (doc.parent / rel).resolve() if rel else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_the_slug_is_githubs():
    assert (
        _slug("What CLIPO's diagnostics read (2026-11-24)")
        == "what-clipos-diagnostics-read-2026-11-24"
    )
    assert _slug("TransferQueue: what was checked") == "transferqueue-what-was-checked"
