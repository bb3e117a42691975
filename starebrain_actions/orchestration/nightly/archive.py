"""Where the report is kept: the JSON file (``--report``), written atomically, and the
Markdown copy in an archive directory (``--archive``), committed when that is a git
repository."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import attrs

from starebrain_actions.orchestration.nightly.report import NightlyReport
from starebrain_actions.orchestration.nightly.text import report_markdown
from starebrain_actions.render.json_output import json_text
from starebrain_actions.render.sanitize import clean_text

#: Author of archive commits unless ``GIT_AUTHOR_*`` / ``GIT_COMMITTER_*`` say otherwise.
GIT_AUTHOR_NAME: Final = "starebrain nightly"
GIT_AUTHOR_EMAIL: Final = "nightly@localhost"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so readers see the old file or the new one, never
    half of one: a temporary file in the same directory, fsynced, then renamed over.

    Raises:
        FileNotFoundError: the directory does not exist (it is not created: a typo in a
            cron line should fail, not scatter directories).
        OSError: the file cannot be written.
    """
    # as printed: characters a terminal could act on (C1 controls, bidi overrides) escaped
    write_text_atomic(path, (json_text(data), "\n"))


def write_text_atomic(path: Path, chunks: Iterable[str]) -> None:
    """Write the text ``chunks`` make to ``path`` as :func:`write_json_atomic` does (a
    temporary file, fsynced, renamed over), a chunk at a time (the nightly report's JSON:
    ``report_json_chunks``).

    Raises:
        FileNotFoundError: the directory does not exist (it is not created).
        OSError: the file cannot be written.
    """
    if not path.parent.is_dir():
        raise FileNotFoundError(f"directory {path.parent} does not exist (it is not created)")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@attrs.frozen(kw_only=True)
class ArchiveResult:
    """Where the Markdown copy went and whether it was committed."""

    path: Path
    #: the commit id, when the archive is a git repository and the commit succeeded
    commit: str | None = None
    #: why it was not committed, when it should have been
    error: str | None = None
    #: True when the directory is inside a git work tree
    in_git: bool = False


def archive_path(directory: Path, report: NightlyReport) -> Path:
    """``DIR/YYYY-MM-DD.md`` (UTC date); a later run the same day gets ``-2``, ``-3``…, so no
    report is ever overwritten."""
    day = report.generated_at.date().isoformat()
    candidate = directory / f"{day}.md"
    number = 2
    while candidate.exists():
        candidate = directory / f"{day}-{number}.md"
        number += 1
    return candidate


def archive_report(directory: Path, report: NightlyReport) -> ArchiveResult:
    """Write the Markdown copy into ``directory``; commit it when that is a git repository."""
    directory.mkdir(parents=True, exist_ok=True)
    path = archive_path(directory, report)
    path.write_text(report_markdown(report), encoding="utf-8")
    git = shutil.which("git")
    if git is None:
        return ArchiveResult(path=path)
    probe = _git(git, directory, "rev-parse", "--is-inside-work-tree")
    if probe.returncode != 0 or probe.stdout.strip() != "true":
        return ArchiveResult(path=path)
    message = f"nightly report {path.stem}: " + (
        clean_text("; ".join(report.attention)) if report.needs_person else "nothing needs a person"
    )
    for args in (("add", "--", path.name), ("commit", "--quiet", "-m", message, "--", path.name)):
        done = _git(git, directory, *args)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            return ArchiveResult(
                path=path,
                in_git=True,
                error=f"git {args[0]} failed: {detail[-1] if detail else done.returncode}",
            )
    head = _git(git, directory, "rev-parse", "HEAD")
    return ArchiveResult(path=path, in_git=True, commit=head.stdout.strip() or None)


def _git(git: str, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        git,
        "-C",
        str(directory),
        "-c",
        f"user.name={GIT_AUTHOR_NAME}",
        "-c",
        f"user.email={GIT_AUTHOR_EMAIL}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
