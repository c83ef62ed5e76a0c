"""A plan: its validation, its choices in words, its placement on machines, the strategy recommended."""
