"""Draw the 345m loss curves of bf16 and FP8 (torchao, no TE) that scripts/bench_fp8.py --parts loss saved.

    python scripts/plot_fp8_loss.py LOSS_JSON OUT_FILE    # OUT_FILE .png (matplotlib) or .svg (no dependency)

LOSS_JSON is {"bf16": [loss per iteration], "fp8": [...], "command": "..."}; the title gives the end losses (mean
of the last 20 iterations both logged) and their relative difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLOURS = {"bf16": "#1f77b4", "fp8": "#d62728"}


def end_losses(curves: dict[str, list[float]], last: int = 20) -> tuple[float, float, float]:
    n = min(len(curves["bf16"]), len(curves["fp8"]))
    tail = max(1, min(last, n))
    bf16 = sum(curves["bf16"][n - tail:n]) / tail
    fp8 = sum(curves["fp8"][n - tail:n]) / tail
    return bf16, fp8, (fp8 - bf16) / bf16


def title(curves: dict[str, list[float]]) -> str:
    bf16, fp8, rel = end_losses(curves)
    n = min(len(curves["bf16"]), len(curves["fp8"]))
    return (f"345m on mock data, {n} iterations: end loss bf16 {bf16:.4f}, FP8 (torchao, no TE) {fp8:.4f} "
            f"({rel:+.2%})")


def png(curves: dict[str, list[float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, diff) = plt.subplots(2, 1, figsize=(9, 6), dpi=110, sharex=True, height_ratios=(3, 1))
    for name, width in (("bf16", 2.5), ("fp8", 1.0)):  # bf16 wide underneath: the curves overlap
        ax.plot(range(1, len(curves[name]) + 1), curves[name], label=name, color=COLOURS[name], linewidth=width)
    ax.set_ylabel("lm loss")
    ax.set_title(title(curves), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    n = min(len(curves["bf16"]), len(curves["fp8"]))
    rel = [100 * (f - b) / b for b, f in zip(curves["bf16"][:n], curves["fp8"][:n])]
    diff.plot(range(1, n + 1), rel, color="#444444", linewidth=0.8)
    diff.axhline(0, color="#999999", linewidth=0.5)
    diff.set_ylabel("FP8 − bf16, %")
    diff.set_xlabel("iteration")
    diff.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


def svg(curves: dict[str, list[float]], out: Path, width: int = 900, height: int = 450, pad: int = 50) -> None:
    values = [v for name in ("bf16", "fp8") for v in curves[name]]
    low, high = min(values), max(values)
    n = max(len(curves["bf16"]), len(curves["fp8"]), 2)

    def point(i: int, v: float) -> str:
        x = pad + (width - 2 * pad) * i / (n - 1)
        y = height - pad - (height - 2 * pad) * (v - low) / ((high - low) or 1)
        return f"{x:.1f},{y:.1f}"

    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{pad}" y="25" font-size="12">{title(curves)}</text>',
             f'<text x="{pad}" y="{height - 15}" font-size="11">iteration 1 … {n}; lm loss {low:.2f} … {high:.2f}'
             '</text>']
    for k, name in enumerate(("bf16", "fp8")):
        path = " ".join(point(i, v) for i, v in enumerate(curves[name]))
        lines.append(f'<polyline fill="none" stroke="{COLOURS[name]}" stroke-width="1" points="{path}"/>')
        lines.append(f'<text x="{width - 120}" y="{50 + 16 * k}" font-size="12" fill="{COLOURS[name]}">{name}</text>')
    lines.append("</svg>")
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    curves = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    if out.suffix == ".png":
        png(curves, out)
    else:
        svg(curves, out)
    print(title(curves))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
