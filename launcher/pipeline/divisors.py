"""The bounded divisors that every hint (use TP in [1, 2, 4, …]) and the layout search use."""

from __future__ import annotations


def divisors(n: int, up_to: int = 1 << 20) -> list[int]:
    """The divisors of n, ascending; pairs d, n/d up to √n (and never more than `up_to` trials: n comes from
    user input, e.g. num_attention_heads=1000000000, and the lists only feed hints and layout searches)."""
    small: list[int] = []
    large: list[int] = []
    d = 1
    while d * d <= n and d <= up_to:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]
