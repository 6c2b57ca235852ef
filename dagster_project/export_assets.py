"""The training export in the Dagster graph: the `training_export` asset and its data contracts.

The body calls the same core as `worldline export` (pipelines.export); the checks run
pipelines.export_contracts over the files written. Wire into `definitions.py` with
`assets=[..., training_export]`, `asset_checks=[..., export_checks]`; settings are run config.
"""


import time
from pathlib import Path

import dagster as dg

from dagster_project.assets import _md_table
from dagster_project.clean_assets import dedup_clusters
from dagster_project.contract_checks import check_result, check_specs, materialization_checked, only_selected
from dagster_project.resources import CorpusResource
from pipelines.export import (
    ExportConfig,
    SplitConfig,
    export,
    parse_weights,
    read_chat_template,
    read_manifest,
)
from pipelines.export_contracts import EXPORT_CONTRACTS, run_export_contracts


class ExportRunConfig(dg.Config):
    """`worldline export`'s options (`use_redaction_scan: false` is `--redact-every-text`)."""

    out: str = ""  # default: `export/` beside the corpus
    seq_len: int = 2048
    tokenizer: str = "smollm2"
    chat_template: str = ""  # a Jinja chat template file instead of the tokenizer's
    formats: list[str] = ["parquet", "chat", "megatron"]
    validation: float = 0.05
    test: float = 0.05
    domain_weights: list[str] = []  # NAME=WEIGHT
    source_weights: list[str] = []
    seed: int = 0
    shard_tokens: int = 1 << 24
    eval_middle_turns: int = 2
    use_redaction_scan: bool = True
    force: bool = False  # rebuild even when the export is up to date
    workers: int = 0  # processes building documents (0: one per core, up to 8, from 4,096 trajectories)


def export_out(corpus: CorpusResource, out: str = "") -> Path:
    return Path(out) if out else corpus.beside("export")


@dg.asset(
    deps=[dedup_clusters, "turn_scores"],
    group_name="export",
    kinds={"python", "parquet"},
    description="Tokenized, packed training shards with per-token loss masks (Parquet, chat JSONL.zst, Megatron "
                "indexed binary), task-disjoint train/validation/test splits, the mixture, an AgentWorldBench "
                "eval set from the test split, and manifest.json — beside the corpus.",
)
def training_export(context: dg.AssetExecutionContext, corpus: CorpusResource, config: ExportRunConfig) -> dg.MaterializeResult:
    cfg = ExportConfig(seq_len=config.seq_len, tokenizer=config.tokenizer, formats=tuple(config.formats),
                       chat_template=read_chat_template(config.chat_template) if config.chat_template else None,
                       split=SplitConfig(validation=config.validation, test=config.test),
                       domain_weights=parse_weights(config.domain_weights), source_weights=parse_weights(config.source_weights),
                       seed=config.seed, shard_tokens=config.shard_tokens, eval_middle_turns=config.eval_middle_turns,
                       use_redaction_scan=config.use_redaction_scan, workers=config.workers)
    out = export_out(corpus, config.out)
    t0 = time.monotonic()
    s = export(corpus.root, out, cfg, progress=True, echo=context.log.info, force=config.force)
    context.log.info(s.render())
    m = read_manifest(out) or {}
    splits = [(n, v["trajectories"], v["documents"], v["samples"], v["tokens"], v["loss_tokens"], f"{100 * v['masked_fraction']:.1f} %")
              for n, v in m.get("splits", {}).items()]
    mix = [(d, v["documents"], v["tokens"], f"{100 * v['token_share']:.1f} %")
           for d, v in sorted(m.get("mix", {}).get("train", {}).get("domain", {}).items(), key=lambda x: -x[1]["tokens"])]
    return dg.MaterializeResult(metadata={
        "fingerprint": s.fingerprint, "up_to_date": s.up_to_date, "tokens": sum(v[4] for v in splits),
        "splits": _md_table(["split", "trajectories", "documents", "samples", "tokens", "loss tokens", "masked"], splits),
        "train_mix_by_domain": _md_table(["domain", "documents", "tokens", "share"], mix),
        "eval_rows": dg.MetadataValue.json(m.get("eval", {}).get("rows", {})),
        "redactions": dg.MetadataValue.json(m.get("redactions", {})),
        "seconds": round(time.monotonic() - t0, 3),
        "manifest": dg.MetadataValue.path(str(out / "manifest.json")),
    })


@dg.multi_asset_check(specs=check_specs(EXPORT_CONTRACTS, training_export), can_subset=True)
def export_checks(context: dg.AssetCheckExecutionContext, corpus: CorpusResource):
    out = export_out(corpus)
    mat, _ = materialization_checked(context, training_export.key)
    if mat is not None and "manifest" in mat.metadata:  # the directory the run really wrote
        out = Path(str(mat.metadata["manifest"].value)).parent
    yield from only_selected(context, (check_result(r, training_export.key) for r in run_export_contracts(out, corpus.root)))
