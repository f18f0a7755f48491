"""The lab catalogue: the typed config model, what each lab turns on, and the program that composes it."""
