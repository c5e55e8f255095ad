"""Op catalogue: op families, references, baselines, input generators, cost models, tolerances."""
