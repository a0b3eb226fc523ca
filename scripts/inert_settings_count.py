"""The settings Megatron would not read (launcher/pipeline/inert_settings.py) in real configurations, counted.

    python scripts/inert_settings_count.py [--megatron-path DIR]

Every script of tests/fixtures/import_corpus (INDEX.json) and, with --megatron-path, every
tests/functional_tests/test_cases/{gpt,moe,mixtral}/*/model_config.yaml of that checkout goes through `launch import`
as it is (no `--set`), then the same judgement a dry-run makes: the imported preset's own Megatron settings against
the job the launcher resolves from it (its run directory's save, load and TensorBoard paths included). A
configuration the launcher refuses is judged all the same: the warnings do not depend on the refusal. Where the
import stood in for what it could not resolve (mock data and a NullTokenizer for a data path or tokenizer file
named through an unknown variable), a warning holds for the preset, not for the script as it ran. Prints each
warning under its configuration, then the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from functional_test_matrix import configurations  # noqa: E402

from launcher.errors import UserError  # noqa: E402
from launcher.importer.build import import_source  # noqa: E402
from launcher.megatron.effective import effective_settings  # noqa: E402
from launcher.pipeline.inert_settings import inert_settings  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402
from launcher.pipeline.resolve import attempt  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "import_corpus"


def judged(name: str, text: str, workdir: Path, args: list[str] | None = None,
           env: dict[str, str] | None = None) -> list[str] | None:
    """The inert-setting warnings of one configuration (None: it does not import)."""
    try:
        imported = import_source(text, name, args or [], environment=env)
    except UserError:
        return None
    path = workdir / (name.replace("/", "-") + ".yaml")
    path.write_text(imported.text)
    try:
        preset = load_preset(str(path), [])
        job, _ = attempt(preset, 1, 1, run_dir=workdir / "runs" / path.stem)
    except UserError:
        return None
    return inert_settings(preset.megatron, effective_settings(job.megatron).__getitem__)


def count(title: str, items: list[tuple[str, list[str] | None]]) -> None:
    judged_items = [(name, found) for name, found in items if found is not None]
    named = [(name, found) for name, found in judged_items if found]
    print(f"## {title}: {len(judged_items)} configurations judged ({len(items) - len(judged_items)} did not "
          f"import), {sum(len(f) for _, f in named)} warnings in {len(named)}")
    for name, found in named:
        print(f"{name}:")
        for warning in found:
            print(f"  {warning}")


Judge = Callable[..., "list[str] | None"]  # judged's signature: (name, text, workdir, args, env) → findings


def main(argv: list[str] | None = None, judge: Judge | None = None, description: str | None = None) -> int:
    """Each configuration of the corpus (and the checkout's functional tests) through `judge`, counted."""
    judge = judge or judged
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    parser.add_argument("--megatron-path", type=Path, help="a Megatron-LM checkout: its functional tests too")
    options = parser.parse_args(argv)
    index = json.loads((CORPUS / "INDEX.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        count("import corpus", [(name, judge(name, (CORPUS / name).read_text(), workdir, entry.get("args"),
                                             entry.get("env")))
                                for name, entry in sorted(index.items())])
        if options.megatron_path:
            root = options.megatron_path / "tests" / "functional_tests" / "test_cases"
            count("functional tests", [(str(c.parent.relative_to(root)), judge(str(c), c.read_text(), workdir))
                                       for c in configurations(options.megatron_path)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
