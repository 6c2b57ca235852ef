"""Rejection-sampled thinking traces for supervised fine-tuning (`worldline traces`).

queries (`queries`) → K candidates from a generator (`generate`, `engine`) under prompt-template
variants (`prompts`) → strict parse (`form`) → verifiers per domain and an optional judge
(`verify`, `prompts`) → best of K above a per-domain threshold → SFT set (`stage`), checked by
`checks`. Nothing here imports torch until a local model is set up.
"""

from pipelines.traces.stage import JudgeConfig, TracesConfig, TracesSummary, traces

__all__ = ["JudgeConfig", "TracesConfig", "TracesSummary", "traces"]
