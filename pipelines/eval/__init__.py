"""The evaluation ladder: accuracy against document length, memory agent against baselines."""
