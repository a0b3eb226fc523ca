"""Hostile variations of the import corpus (tests/fixtures/import_corpus): each script cut after up to LINES evenly
spaced lines, given a quote or shell metacharacter at INSERTS random places, and one of its numbers replaced by a
count no job launcher takes (0, -1, 99999999999, ٨, …) at NUMBERS random places (a fixed seed), each taken through
`launch import` as a user types it (the arguments INDEX.json gives). Every one must end with a report (exit 0 or 2)
or an `error:` line, and a preset it writes must have its nodes and gpus_per_node within 1 … MAX_COUNT; a traceback
or such a count is listed with the input kept under --out.

    python scripts/fuzz_import_corpus.py [--only NAME …] [--lines 60] [--inserts 40] [--numbers 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import signal
import sys
import time
import traceback
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.cli.job import job_as_declared  # noqa: E402
from launcher.errors import UserError  # noqa: E402
from launcher.importer.run import main as import_main  # noqa: E402
from launcher.importer.words import MAX_COUNT  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "import_corpus"
# what a hostile edit inserts: quotes, expansions left open, operators, a NUL, non-ASCII
INSERTS = ['"', "'", "`", "$(", "${", "\\", ";", "&&", "|", "<<", "$((", "{", "}", "(", ")", "#", "\x00", "é",
           "$'\\x", "*", "!"]
# what replaces a number: counts no job launcher, scheduler or manifest takes, and values that are no number
NUMBERS = ["0", "-1", "99999999999", "٨", "８", "1e9", "4.5", "$(rm -rf ~)", "9" * 400]


def variations(text: str, lines: int, inserts: int, seed: int, numbers: int = 0) -> list[str]:
    """The script cut after up to `lines` evenly spaced lines, then `inserts` copies with one insertion each, then
    `numbers` copies with one of its numbers replaced."""
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
    found = list(re.finditer(r"(?<![\w.])[0-9]+(?![\w.])", text))
    for _ in range(numbers if found else 0):
        at = rnd.choice(found)
        out.append(text[:at.start()] + rnd.choice(NUMBERS) + text[at.end():])
    return out


SLOW_S = 60  # an import still running after this is a finding (unbounded work), stopped


class _Slow(Exception):
    pass


def _stop(*_: object) -> None:
    raise _Slow


def run_one(text: str, args: list[str], scratch: Path, environment: dict[str, str] | None = None) -> str | None:
    """None when the import ended with a report or an error line within SLOW_S and wrote no count out of range;
    else the traceback's last line, the count, or that it ran on."""
    script, preset = scratch / "script.sh", scratch / "imported.yaml"
    script.write_bytes(text.encode("utf-8", "surrogateescape"))
    preset.unlink(missing_ok=True)
    signal.signal(signal.SIGALRM, _stop)
    signal.alarm(SLOW_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import_main([str(script), *args], str(preset), job_as_declared, environment=environment)
    except UserError:
        pass
    except _Slow:
        return f"still running after {SLOW_S} s"
    except Exception:  # the finding this script exists for
        return traceback.format_exc().strip().splitlines()[-1]
    finally:
        signal.alarm(0)
    launcher = (yaml.safe_load(preset.read_text()) or {}).get("launcher") or {} if preset.exists() else {}
    for setting in ("nodes", "gpus_per_node"):
        value = launcher.get(setting)
        if value is not None and not (isinstance(value, int) and 1 <= value <= MAX_COUNT):
            return f"launcher.{setting} {value!r} written"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="corpus file names (default: all)")
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--inserts", type=int, default=40)
    parser.add_argument("--numbers", type=int, default=20)
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
        for variant in variations(text, options.lines, options.inserts, options.seed, options.numbers):
            imports += 1
            started = time.monotonic()
            failed = run_one(variant, index[name].get("args", []), options.out, index[name].get("env"))
            slowest = max(slowest, time.monotonic() - started)
            if failed:
                failures += 1
                kept = options.out / f"finding-{failures}-{name}"
                kept.write_bytes(variant.encode("utf-8", "surrogateescape"))
                print(f"{name}: {failed} (input kept in {kept})", flush=True)
    print(f"{len(names)} scripts, {imports} imports, {failures} tracebacks, counts out of range or slow runs, slowest "
          f"{slowest:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
