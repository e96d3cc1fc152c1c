"""The docs say that what the README lists is there (issue 37 item 18: docs/reports.md said compression and
resource profiles "are not produced by this version yet" long after both were).

Each feature the README lists (a bullet of its Features section, or a section that links a doc page) links a
page that exists, with the anchor it names; the page names the feature's public classes and functions; and no
page of the docs describes anything as not available yet.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import vertebrae

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: How a page says that something is missing from this version.
NOT_YET = re.compile(r"not (?:produced|implemented|available|supported|built|included)(?: by this version| here)? yet"
                     r"|not yet (?:produced|implemented|available|supported|built)|(?:a )?(?:later|future|next) "
                     r"(?:version|release)|coming soon|\bTODO\b|\bTBD\b|placeholder", re.IGNORECASE)
LINK = re.compile(r"\((docs/[A-Za-z0-9_]+\.md)(?:#([A-Za-z0-9_-]+))?\)")


def features() -> list[tuple[str, str]]:
    """(title, text) of every README feature: the Features bullets (titled in bold), then every other section
    linking a doc page (titled ``## ...``)."""
    sections = re.split(r"^## ", README, flags=re.MULTILINE)[1:]
    found = []
    for section in sections:
        title, _, body = section.partition("\n")
        if title.strip() == "Features":
            for bullet in re.split(r"^- ", body, flags=re.MULTILINE)[1:]:
                found.append((re.match(r"\*\*(.+?)\*\*", bullet).group(1), bullet))
        elif LINK.search(body):
            found.append((f"## {title.strip()}", body))
    return found


def anchors(page: pathlib.Path) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


FEATURES = features()


def test_the_readme_lists_its_features():
    titles = [title for title, _ in FEATURES]
    assert len(FEATURES) >= 20 and "Compression variants" in " ".join(titles) and "## Resource profiles" in titles


@pytest.mark.parametrize("title,text", FEATURES, ids=[title[:40] for title, _ in FEATURES])
def test_each_feature_links_a_page_that_describes_it(title, text):
    links = LINK.findall(text)
    assert links or title.startswith(("Extractors", "Overlap scoring")), f"{title!r} links no doc page"
    pages = []
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), f"{title!r} links {target}, which does not exist"
        if anchor:
            assert anchor in anchors(page), f"{title!r} links {target}#{anchor}: no such heading"
        pages.append(page.read_text(encoding="utf-8"))
    public = [name for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\(|`)", text) if name in vertebrae.__all__]
    # a bullet is one feature, described on its page; a section may name what other pages describe
    everywhere = not pages or title.startswith("## ")
    described = "\n".join(page.read_text(encoding="utf-8") for page in DOCS) if everywhere else "\n".join(pages)
    missing = [name for name in public if name not in described]
    assert not missing, f"{title!r}: its doc page never names {missing}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda page: page.name)
def test_no_page_says_a_feature_is_not_there_yet(page):
    text = page.read_text(encoding="utf-8")
    claims = [text[max(0, m.start() - 80):m.end() + 40].replace("\n", " ") for m in NOT_YET.finditer(text)]
    assert not claims, f"{page.name} describes something as unavailable: {claims}"
