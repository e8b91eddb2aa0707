"""History lives in CHANGES.md and git: nothing else in src/, tests/, bench/, tools/, docs/ or the README
refers to how development went. No tags that point into the issue tracker, no numbered work sessions or
words that date a sentence to when it was written (:data:`DIARY_WORDS`), no word that names a commit of
this repository, and no dates but the ones that say when a table of docs/benchmarks.md was measured.
This file holds the patterns themselves and is not scanned; its planted cases are built from them."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import ROOT

FOLDERS = ("src", "tests", "bench", "tools", "docs")
ISSUE_TAG = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
#: Ordinals of numbered work sessions, and words that date a sentence to the moment it was written.
SESSION_ORDINALS = ("tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth")
DIARY_WORDS = ("tonight", "late on", "this morning", "this evening", "one evening", "earlier today", "yesterday")
DIARY = re.compile(
    r"\b((" + "|".join(SESSION_ORDINALS) + r") session|" + "|".join(DIARY_WORDS) + r"|(this|last) session)\b",
    re.IGNORECASE,
)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: How docs/benchmarks.md names the machine a table was measured on (the 2-core reference machine, a lent GPU).
MEASURING_MACHINES = ("reference machine", "NVIDIA H200")
HEX_WORD = re.compile(r"\b[0-9a-f]{7,40}\b")


def _files() -> list:
    listed = subprocess.run(["git", "ls-files", *FOLDERS, "README.md"], capture_output=True, text=True, cwd=ROOT, check=True)
    paths = [ROOT / name for name in listed.stdout.split() if name != "tests/test_history.py"]  # its planted faults
    return [p for p in paths if p.suffix in (".py", ".md", ".toml", ".cpp", ".json", ".txt", "") and p.is_file()]


def _texts() -> dict:
    texts = {}
    for path in _files():
        try:
            texts[path.relative_to(ROOT)] = path.read_text()
        except UnicodeDecodeError:
            continue
    return texts


def _dates_outside_measurements(relative, text: str) -> list[str]:
    """Dates in ``text``, but on docs/benchmarks.md's lines that name a command, a machine and a date."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if str(relative) == "docs/benchmarks.md" and any(machine in line for machine in MEASURING_MACHINES):
            continue
        found += [f"{relative}:{number}: {date}" for date in DATE.findall(line)]
    return found


def faults(texts: dict, commit_names) -> list[str]:
    """Every reference to the development history in ``texts`` (path -> text); ``commit_names(words)``
    returns the words that name a commit of this repository."""
    found, words = [], {}
    for relative, text in texts.items():
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{relative}:{number}: {m.group(0)!r}" for m in ISSUE_TAG.finditer(line)]
            found += [f"{relative}:{number}: {m.group(0)!r}" for m in DIARY.finditer(line)]
            for word in HEX_WORD.findall(line):
                words.setdefault(word, f"{relative}:{number}")
        found += _dates_outside_measurements(relative, text)
    found += [f"{words[word]}: {word!r} names a commit" for word in commit_names(list(words))]
    return found


def commits_named(words: list[str]) -> list[str]:
    """The words that name a commit of this repository (``git cat-file`` finds ``WORD^{commit}``)."""
    if not words:
        return []
    completed = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        input="".join(f"{word}^{{commit}}\n" for word in words),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    answers = completed.stdout.splitlines()
    return [word for word, answer in zip(words, answers) if not answer.endswith("missing") and "ambiguous" not in answer]


def test_nothing_outside_changes_refers_to_the_development_history():
    found = faults(_texts(), commits_named)
    assert found == [], "\n".join(found[:40])


def _planted(kind: str, rng) -> str:
    """A sentence with one reference of ``kind`` to the history, built from the patterns above."""
    if kind == "tag":
        return f"as {'issue'} {int(rng.integers(1, 100))} asks"
    if kind == "session":
        return f"measured in the {rng.choice(SESSION_ORDINALS)} session"
    if kind == "word":
        return f"it ran past 5 minutes {rng.choice(DIARY_WORDS)}"
    if kind == "date":
        return f"the table of 20{int(rng.integers(10, 40))}-0{int(rng.integers(1, 10))}-1{int(rng.integers(0, 10))}"
    head = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True)
    return f"since commit {head.stdout.strip()}"


@pytest.mark.parametrize("kind", ["tag", "session", "word", "date", "commit"])
def test_a_planted_reference_to_the_history_is_found(kind, rng):
    assert len(faults({"docs/example.md": f"A line.\n{_planted(kind, rng)}\n"}, commits_named)) == 1
    # a date on a benchmarks line that names the machine is allowed; a checksum is not a commit
    allowed = "`bench/x.py`, reference machine, 2026-11-29.\n" + "sha256 " + "ab" * 32 + "\n"
    assert faults({"docs/benchmarks.md": allowed}, commits_named) == []
