"""Rejection-sampled thinking traces for supervised fine-tuning (`worldline traces`).

queries (`queries`) → K candidates from a generator (`generate`, `engine`) under prompt-template
variants (`prompts`) → strict parse (`form`) → verifiers per domain and an optional judge
(`verify`, `prompts`) → best of K above a per-domain threshold → SFT set (`stage`), checked by
`checks`. Nothing here imports torch until a local model is set up.
"""

from typing import Any

__all__ = ["JudgeConfig", "TracesConfig", "TracesSummary", "traces"]


def __getattr__(name: str) -> Any:
    """The stage's names, imported when first used: the CLI's parser imports `pipelines.traces.cli`
    for every command, and the stage's imports cost it half a second."""
    if name in __all__:
        from pipelines.traces import stage

        return getattr(stage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
