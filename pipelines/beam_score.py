"""The score stage's model tier as an Apache Beam pipeline: the causal LM on many workers (GPUs).

Each unit (one md5 range of the trajectories, `pipelines.score.ModelUnit`) is scored by
`score_unit`, the same loop the local run uses. A worker process loads the model once, in the
first of its DoFn instances' `setup()` (a runner may make one instance per thread, Dataflow and
Flink do: loading concurrently broke transformers' imports and would hold a model per thread), and
its threads score their units one at a time with it (a GPU runs one batch at a time anyway). A
unit writes its rows to a Parquet file of its own and its counts to a small JSON file (written then
renamed) in the stage's work folder, which must be on storage every worker can reach; the driver
then writes the side table exactly as a local run does. A retried unit writes another rows file;
only the one its surviving result names is read.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam

from pipelines.beam_ingest import DEFAULT_RUNNER, beam_options
from pipelines.score import ModelUnit, score_unit
from pipelines.store import write_json_atomic

RESULTS_DIR = "results"

@dataclass
class _Loaded:
    """A process's set-up scorer, the lock its units take turns on, and the DoFn instances using it."""

    scorer: Any
    key: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


_LOCK = threading.Lock()
_LOADED: dict[str, _Loaded] = {}  # scorer key -> the process's one loaded copy


def _key(scorer: Any) -> str:
    return f"{scorer.model_id}|{scorer.config!r}"


class _ScoreUnits(beam.DoFn):
    def __init__(self, scorer: Any):
        self.scorer = scorer  # pickled without its model (`TurnScorer.__getstate__`)
        self.loaded: _Loaded | None = None

    def setup(self) -> None:
        key = _key(self.scorer)  # before setup (which names the model file)
        with _LOCK:  # one model per process, set up once, whatever the number of instances
            if key not in _LOADED:
                self.scorer.setup()
                _LOADED[key] = _Loaded(self.scorer, key)
            self.loaded = _LOADED[key]
            self.loaded.users += 1

    def process(self, unit: ModelUnit):  # noqa: ANN201 - Beam's generator
        with self.loaded.lock:  # its counts (`stats`) are the unit's own only while no other unit runs
            result = score_unit(unit, self.loaded.scorer)
        write_json_atomic(Path(unit.out) / RESULTS_DIR / f"{unit.index:05d}.json", result)
        yield unit.index

    def teardown(self) -> None:
        if self.loaded is None:
            return
        with _LOCK:
            self.loaded.users -= 1
            if self.loaded.users == 0:
                _LOADED.pop(self.loaded.key, None)
                self.loaded.scorer.teardown()
            self.loaded = None


class BeamModelRunner:
    """Runs the model tier's units with Beam (`runner`: DirectRunner, PrismRunner, DataflowRunner,
    ...; `options`: pipeline options as on a Beam command line, e.g. a GPU worker image). A runner
    Beam cannot make is a ValueError here, before the stage reads anything."""

    def __init__(self, runner: str = DEFAULT_RUNNER, options: list[str] | None = None):
        from apache_beam.runners.runner import create_runner

        try:
            self._runner = create_runner(runner)
        except (ValueError, ImportError, AttributeError, TypeError) as e:
            raise ValueError(f"Beam runner {runner!r} cannot be used: {type(e).__name__}: {e}") from None
        self.name = f"Beam {runner}"
        self.options = list(options or [])
        self._pipeline_options = beam_options(self.options)  # one Beam does not know: refused here, not dropped

    def __call__(self, units: list[ModelUnit], scorer: Any) -> list[dict[str, Any]]:
        if not units:
            return []
        results = Path(units[0].out) / RESULTS_DIR
        results.mkdir(parents=True, exist_ok=True)
        with beam.Pipeline(runner=self._runner, options=self._pipeline_options) as p:
            _ = (
                p
                | "units" >> beam.Create(units)
                | "spread" >> beam.Reshuffle()
                | "score" >> beam.ParDo(_ScoreUnits(scorer))
            )
        out = []
        for u in units:
            path = results / f"{u.index:05d}.json"
            if not path.exists():
                raise RuntimeError(f"beam score: unit {u.index} left no result ({path})")
            out.append(json.loads(path.read_text()))
        return out
