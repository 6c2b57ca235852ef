"""The score stage's model tier as an Apache Beam pipeline: the causal LM on many workers (GPUs).

Each unit (one md5 range of the trajectories, `pipelines.score.ModelUnit`) is scored by
`score_unit`, the same loop the local run uses, on a worker that loads the model once in its
DoFn's `setup()` and frees it in `teardown()`. A unit writes its rows to a Parquet file of its own
and its counts to a small JSON file (written then renamed) in the stage's work folder, which must
be on storage every worker can reach; the driver then writes the side table exactly as a local run
does. A retried unit writes another rows file; only the one its surviving result names is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam

from pipelines.score import ModelUnit, score_unit
from pipelines.store import write_json_atomic

RESULTS_DIR = "results"


class _ScoreUnits(beam.DoFn):
    def __init__(self, scorer: Any):
        self.scorer = scorer  # pickled without its model (`TurnScorer.__getstate__`)

    def setup(self) -> None:
        self.scorer.setup()

    def process(self, unit: ModelUnit):  # noqa: ANN201 - Beam's generator
        result = score_unit(unit, self.scorer)
        write_json_atomic(Path(unit.out) / RESULTS_DIR / f"{unit.index:05d}.json", result)
        yield unit.index

    def teardown(self) -> None:
        self.scorer.teardown()


class BeamModelRunner:
    """Runs the model tier's units with Beam (`runner`: DirectRunner, PrismRunner, DataflowRunner,
    ...; `options`: pipeline options as on a Beam command line, e.g. a GPU worker image). A runner
    Beam cannot make is a ValueError here, before the stage reads anything."""

    def __init__(self, runner: str = "DirectRunner", options: list[str] | None = None):
        from apache_beam.runners.runner import create_runner

        try:
            self._runner = create_runner(runner)
        except (ValueError, ImportError, AttributeError, TypeError) as e:
            raise ValueError(f"Beam runner {runner!r} cannot be used: {type(e).__name__}: {e}") from None
        self.name = f"Beam {runner}"
        self.options = list(options or [])

    def __call__(self, units: list[ModelUnit], scorer: Any) -> list[dict[str, Any]]:
        from apache_beam.options.pipeline_options import PipelineOptions

        if not units:
            return []
        results = Path(units[0].out) / RESULTS_DIR
        results.mkdir(parents=True, exist_ok=True)
        with beam.Pipeline(runner=self._runner, options=PipelineOptions(self.options)) as p:
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
