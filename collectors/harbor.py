"""Harbor job and trial directories: the ATIF trajectory of every trial, and nothing else as input.

Harbor writes a job as `<job>/{config.json, result.json, job.log}` with one directory per trial,
`<trial>/{config.json, result.json, trial.log, agent/trajectory.json, agent/..., verifier/...}`
(agent logs and screenshots under `agent/`, the verifier's reward and test output under
`verifier/`). Only `agent/trajectory.json` is a trajectory (read by `collectors.atif`, which also
takes the reward and task name from the trial's `result.json`); the rest is Harbor's bookkeeping,
which this importer claims so that ingesting a job directory does not quarantine every log and
config file in it as an unknown format. Files outside that layout are left to the other importers.
The trajectory file alone, ingested as a file, is read by `AtifImporter` as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from collectors.atif import AtifImporter
from collectors.base import ImportContext, Importer, load_json_file
from schemas.records import RecordError, Trajectory

_TRAJECTORY = Path("agent") / "trajectory.json"
_TRIAL_FILES = ("result.json", "config.json", "trial.log", "exception.txt")
_TRIAL_DIRS = ("agent", "verifier")
_JOB_FILES = ("result.json", "config.json", "job.log")
_SNIFF_BYTES = 64 << 10
_MAX_TRAJECTORY_BYTES = 512 << 20
_ATIF = AtifImporter()


def _is_trial(d: Path) -> bool:
    """A trial directory: `result.json` next to an `agent/trajectory.json` that starts like ATIF."""
    traj = d / _TRAJECTORY
    if not (traj.is_file() and (d / "result.json").is_file()):
        return False
    with open(traj, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    return b'"schema_version"' in head and b"ATIF" in head.upper()


def _trials(directory: Path) -> list[Path]:
    """The trials of a job directory (`config.json` and trial subdirectories), or the directory itself."""
    if _is_trial(directory):
        return [directory]
    if not (directory / "config.json").is_file():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and _is_trial(p))


class HarborJobImporter(Importer):
    name = "harbor"
    container = "dir"

    def sniff(self, directory: Path) -> bool:
        return bool(_trials(directory))

    def consumes(self, directory: Path) -> list[Path]:
        trials = _trials(directory)
        files = [] if trials == [directory] else [directory / n for n in _JOB_FILES if (directory / n).is_file()]
        for trial in trials:
            files += [trial / n for n in _TRIAL_FILES if (trial / n).is_file()]
            for sub in _TRIAL_DIRS:
                files += [p for p in (trial / sub).rglob("*") if p.is_file()]
        return sorted(files)

    def split(self, directory: Path, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        for trial in _trials(directory):
            rel = (trial / _TRAJECTORY).relative_to(directory).as_posix()
            try:
                doc = self._load(trial / _TRAJECTORY, rel)
            except RecordError as e:
                yield rel, e
                continue
            for sub, record in _ATIF.split(doc, ctx):
                yield (rel if sub == "$" else f"{rel}/{sub}"), (trial, record)

    def convert(self, record: Any, locator: str, ctx: ImportContext) -> Trajectory:
        trial, rec = record
        # the ATIF importer finds the trial's result.json from the trajectory's own path
        return _ATIF.convert(rec, locator, replace(ctx, path=trial / _TRAJECTORY))

    @staticmethod
    def _load(path: Path, where: str) -> Any:
        doc = load_json_file(path, where, _MAX_TRAJECTORY_BYTES)
        if not _ATIF.sniff(doc):
            raise RecordError("malformed_record", f"{where}: not an ATIF trajectory", where)
        return doc
