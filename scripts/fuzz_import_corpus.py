"""Hostile variations of the import corpus (tests/fixtures/import_corpus): each script cut after up to LINES evenly
spaced lines, and given a quote or shell metacharacter at INSERTS random places (a fixed seed), each taken through
`launch import` as a user types it (the arguments INDEX.json gives). Every one must end with a report (exit 0 or 2)
or an `error:` line; a traceback is listed with the input kept under --out.

    python scripts/fuzz_import_corpus.py [--only NAME …] [--lines 60] [--inserts 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.cli.job import job_as_declared  # noqa: E402
from launcher.errors import UserError  # noqa: E402
from launcher.importer.run import main as import_main  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "import_corpus"
# what a hostile edit inserts: quotes, expansions left open, operators, a NUL, non-ASCII
INSERTS = ['"', "'", "`", "$(", "${", "\\", ";", "&&", "|", "<<", "$((", "{", "}", "(", ")", "#", "\x00", "é",
           "$'\\x", "*", "!"]


def variations(text: str, lines: int, inserts: int, seed: int) -> list[str]:
    """The script cut after up to `lines` evenly spaced lines, then `inserts` copies with one insertion each."""
    rows = text.splitlines(keepends=True)
    step = max(1, len(rows) // lines)
    out = ["".join(rows[:k]) for k in range(0, len(rows) + 1, step)]
    rnd = random.Random(seed)
    for _ in range(inserts if rows else 0):
        edited = list(rows)
        k = rnd.randrange(len(edited))
        at = rnd.randrange(len(edited[k]) + 1)
        edited[k] = edited[k][:at] + rnd.choice(INSERTS) + edited[k][at:]
        out.append("".join(edited))
    return out


def run_one(text: str, args: list[str], scratch: Path) -> str | None:
    """None when the import ended with a report or an error line; else the traceback's last line."""
    script = scratch / "script.sh"
    script.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import_main([str(script), *args], str(scratch / "imported.yaml"), job_as_declared)
    except UserError:
        pass
    except Exception:  # the finding this script exists for
        return traceback.format_exc().strip().splitlines()[-1]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="corpus file names (default: all)")
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--inserts", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("fuzz-import-corpus"))
    options = parser.parse_args()
    index = json.loads((CORPUS / "INDEX.json").read_text())
    names = options.only or sorted(index)
    options.out.mkdir(parents=True, exist_ok=True)
    imports = failures = 0
    slowest = 0.0
    for name in names:
        text = (CORPUS / name).read_text(encoding="utf-8", errors="surrogateescape")
        for variant in variations(text, options.lines, options.inserts, options.seed):
            imports += 1
            started = time.monotonic()
            failed = run_one(variant, index[name].get("args", []), options.out)
            slowest = max(slowest, time.monotonic() - started)
            if failed:
                failures += 1
                kept = options.out / f"traceback-{failures}-{name}"
                kept.write_bytes(variant.encode("utf-8", "surrogateescape"))
                print(f"{name}: {failed} (input kept in {kept})")
    print(f"{len(names)} scripts, {imports} imports, {failures} tracebacks, slowest {slowest:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
