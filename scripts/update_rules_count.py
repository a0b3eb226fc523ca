"""Runs that would update nothing or less than they say (launcher/pipeline/update_rules.py) in real configurations,
counted.

    python scripts/update_rules_count.py [--megatron-path DIR]

The configurations of scripts/inert_settings_count.py (the import corpus, and with --megatron-path the checkout's
functional tests), each imported as it is and resolved on one GPU as that script does; each finding of the update
rules is printed under its configuration ("refused:" or "warned:"), then the totals.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inert_settings_count  # noqa: E402

from launcher.errors import UserError  # noqa: E402
from launcher.importer.build import import_source  # noqa: E402
from launcher.pipeline import update_rules  # noqa: E402
from launcher.pipeline.load_rules import training_iterations  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402
from launcher.pipeline.resolve import attempt  # noqa: E402


def judged(name: str, text: str, workdir: Path, args: list[str] | None = None,
           env: dict[str, str] | None = None) -> list[str] | None:
    """The update rules' findings on one configuration (None: it does not import or resolve)."""
    try:
        imported = import_source(text, name, args or [], environment=env)
        path = workdir / (name.replace("/", "-") + ".yaml")
        path.write_text(imported.text)
        job, _ = attempt(load_preset(str(path), []), 1, 1, run_dir=workdir / "runs" / path.stem)
    except UserError:
        return None
    lay = job.layout
    lengths = {name: job.arg(name) for name in ("train_iters", "train_samples")}
    iterations = training_iterations(lengths, lay.global_batch_size, bool(lay.batch_schedule)) \
        if sum(v is not None for v in lengths.values()) == 1 else None
    found: list[str] = []
    update_rules.check(job.arg, lambda message, hint="", stage="": found.append(f"refused: {message}"),
                       lambda text: found.append(f"warned: {text}"), iterations,
                       lay.global_batch_size if not lay.batch_schedule else None)
    return found


def main(argv: list[str] | None = None) -> int:
    return inert_settings_count.main(argv, judged, __doc__.split("\n")[0])


if __name__ == "__main__":
    sys.exit(main())
